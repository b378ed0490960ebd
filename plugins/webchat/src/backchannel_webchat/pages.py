"""The page, its script and its stylesheet: plain files shipped in this package."""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web

__all__ = ["SECURITY_HEADERS", "StaticFiles"]

_TYPES = {
    "index.html": "text/html",
    "webchat.js": "text/javascript",
    "webchat.css": "text/css",
}


class StaticFiles:
    """Serves index.html (with the title filled in), webchat.js and webchat.css."""

    def __init__(self, title: str):
        folder = resources.files("backchannel_webchat") / "static"
        self._files = {name: (folder / name).read_text("utf-8") for name in _TYPES}
        # the title is the operator's text, but escape it all the same
        self._files["index.html"] = self._files["index.html"].replace(
            "{{title}}", html.escape(title)
        )

    def handler(self, name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """Return an aiohttp handler that serves the file `name`."""
        body = self._files[name]
        content_type = _TYPES[name]

        async def serve(request: web.Request) -> web.StreamResponse:
            response = web.Response(text=body, content_type=content_type, charset="utf-8")
            response.headers.update(SECURITY_HEADERS)
            response.headers["Cache-Control"] = "no-cache"
            return response

        return serve


#: the same for every request: nothing of the request (its Host least of all) is copied in.
#: `connect-src 'self'` covers the page's own websocket (ws: and wss: of its host) in
#: browsers that follow CSP Level 3 (test_browser.py checks Chromium)
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
