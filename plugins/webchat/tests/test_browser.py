"""The web chat page in a real headless Chromium, served by a real Switchboard with the demo agent.

Needs Debian's chromium at /usr/bin/chromium (``make test`` installs it) and
Playwright's Python package; Playwright never downloads a browser here.
Set WEBCHAT_SCREENSHOT=/some/dir to keep screenshots of the page.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from backchannel.agents.demo import demo_agent
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.hub import Connection
from backchannel_webchat.session import VisitorSession
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000
HAVE_CHROMIUM = Path(CHROMIUM).exists()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        pytest.fail(f"{CHROMIUM} is missing: run `apt-get install -y chromium` (make test does)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        await launched.close()


@pytest.fixture
async def board(tmp_path: Path) -> AsyncIterator[tuple[Switchboard, WebchatAdapter]]:
    switchboard = Switchboard(SQLiteStore(tmp_path / "state.db"), port=0)
    adapter = WebchatAdapter("web", {"title": "Backchannel demo"})
    switchboard.add_account(adapter, Binding(agent=demo_agent))
    await switchboard.start()
    yield switchboard, adapter
    await switchboard.stop()


async def bubbles(page: Page) -> list[tuple[str, str]]:
    """Return (who, text) of every message bubble on the page, top to bottom."""
    rows = await page.locator("#log > li").evaluate_all(
        "items => items.map(li => [li.querySelector('.who').textContent,"
        " li.querySelector('.body').textContent])"
    )
    return [(who, text) for who, text in rows]


async def open_chat(browser: Browser, adapter: WebchatAdapter) -> Page:
    """Open the chat page in a new tab and wait until it is connected."""
    page = await browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    await page.goto(adapter.url or "")
    await expect(page.get_by_role("status")).to_have_text("Online")
    return page


async def snap(page: Page, name: str) -> None:
    folder = os.environ.get("WEBCHAT_SCREENSHOT")
    if folder:
        await page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


async def test_page_sends_shows_the_demo_reply_and_reload_keeps_the_transcript(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter]
) -> None:
    switchboard, adapter = board
    page = await open_chat(browser, adapter)
    await expect(page).to_have_title("Backchannel demo")

    box = page.get_by_label("Your message")
    await box.fill("Hello from the browser")
    await box.press("Enter")
    log = page.get_by_role("log")
    reply = log.locator("li.agent .body")
    await expect(reply).to_contain_text("I can see 1 message from 1 person in this direct chat")
    await expect(log.locator("li.visitor .state")).to_have_text("")
    await switchboard.wait_idle()
    before = await bubbles(page)
    assert before[0] == ("You", "Hello from the browser")
    assert before[1][0] == "Backchannel demo" and len(before) == 2
    await snap(page, "after-reply")

    await page.reload()
    await expect(page.get_by_role("status")).to_have_text("Online")
    await expect(log.locator("li")).to_have_count(2)
    assert await bubbles(page) == before
    await expect(box).to_be_focused()


async def test_markup_in_messages_renders_as_text(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter]
) -> None:
    switchboard, adapter = board
    page = await open_chat(browser, adapter)
    evil = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"><b>bold</b>'
    box = page.get_by_label("Your message")
    await box.fill(evil)
    await page.get_by_role("button", name="Send").click()
    log = page.get_by_role("log")
    await expect(log.locator("li.agent")).to_have_count(1)
    await switchboard.wait_idle()
    await page.reload()
    await expect(log.locator("li.agent")).to_have_count(1)
    assert (await bubbles(page))[0] == ("You", evil)
    assert await log.locator("script, img, b").count() == 0
    assert await page.evaluate("window.pwned") is None
    await snap(page, "markup")


async def test_too_long_message_is_refused_on_the_page(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter]
) -> None:
    _, adapter = board
    page = await open_chat(browser, adapter)
    # bypass the textarea's maxlength, as a hostile script could
    await page.evaluate(
        "() => { const t = document.getElementById('text'); t.removeAttribute('maxlength');"
        " t.value = 'x'.repeat(4001); }"
    )
    await page.get_by_role("button", name="Send").click()
    await expect(page.get_by_role("alert")).to_contain_text("at most 4000")
    assert await page.locator("#log > li").count() == 0


async def editing_agent(run: Run) -> None:
    """Send a draft, then edit it: the page must show the edit live and after a restart."""
    outcome = await run.call("send_message", {"text": "draft answer"})
    found = re.search(r"#(\d+)", outcome)
    assert found, outcome
    await run.call("edit_message", {"message_id": int(found.group(1)), "text": "final answer"})


async def test_edit_shows_live_and_the_page_recovers_after_a_server_restart(
    browser: Browser, tmp_path: Path
) -> None:
    db = tmp_path / "state.db"

    async def start(port: int) -> tuple[Switchboard, WebchatAdapter]:
        switchboard = Switchboard(SQLiteStore(db), port=port)
        adapter = WebchatAdapter("web", {"title": "Editor"})
        switchboard.add_account(adapter, Binding(agent=editing_agent))
        await switchboard.start()
        return switchboard, adapter

    switchboard, adapter = await start(0)
    try:
        page = await open_chat(browser, adapter)
        await page.get_by_label("Your message").fill("please answer")
        await page.get_by_label("Your message").press("Enter")
        agent = page.get_by_role("log").locator("li.agent")
        await expect(agent.locator(".body")).to_have_text("final answer")
        await expect(agent.locator(".edited")).to_have_text("edited")
        await switchboard.wait_idle()
        before = await bubbles(page)

        port = int((switchboard.url or "").rsplit(":", 1)[1])
        await switchboard.stop()
        await expect(page.get_by_role("status")).not_to_have_text("Online")
        switchboard, adapter = await start(port)
        # the page reconnects by itself and shows the transcript from the store, once
        await expect(page.get_by_role("status")).to_have_text("Online")
        await expect(page.locator("#log > li")).to_have_count(2)
        assert (
            await bubbles(page) == before == [("You", "please answer"), ("Editor", "final answer")]
        )
        await snap(page, "after-restart")
    finally:
        await switchboard.stop()


async def test_typing_shows_while_the_agent_works_and_clears_on_its_reply(
    browser: Browser, tmp_path: Path
) -> None:
    thinking = asyncio.Event()
    answer = asyncio.Event()

    async def slow_agent(run: Run) -> None:
        thinking.set()
        await answer.wait()
        await run.call("send_message", {"text": "done thinking"})

    switchboard = Switchboard(SQLiteStore(tmp_path / "state.db"), port=0)
    adapter = WebchatAdapter("web", {"title": "Helper"})
    switchboard.add_account(adapter, Binding(agent=slow_agent))
    await switchboard.start()
    try:
        page = await open_chat(browser, adapter)
        await page.get_by_label("Your message").fill("take your time")
        await page.get_by_label("Your message").press("Enter")
        await asyncio.wait_for(thinking.wait(), TIMEOUT_MS / 1000)
        typing = page.locator("#typing")
        await expect(typing).to_have_text("Helper is typing…")
        answer.set()
        await expect(page.locator("li.agent .body")).to_have_text("done thinking")
        await expect(typing).to_have_text("")
    finally:
        answer.set()
        await switchboard.stop()


async def test_rate_limited_message_is_resent_by_the_page_after_the_wait(
    browser: Browser, tmp_path: Path
) -> None:
    switchboard = Switchboard(SQLiteStore(tmp_path / "state.db"), port=0)
    adapter = WebchatAdapter("web", {"rate_limit": 60, "rate_burst": 1})
    switchboard.add_account(adapter, Binding(agent=demo_agent))
    await switchboard.start()
    try:
        page = await open_chat(browser, adapter)
        box = page.get_by_label("Your message")
        await box.fill("first")
        await box.press("Enter")
        await box.fill("second, too quickly")
        await box.press("Enter")
        await expect(page.get_by_role("alert")).to_contain_text("sending quickly")
        # one token a second: the page resends by itself and both get answers
        await expect(page.locator("li.agent")).to_have_count(2)
        await expect(page.locator("li.visitor .state")).to_have_text(["", ""])
        await switchboard.wait_idle()
        texts = [text for who, text in await bubbles(page) if who == "You"]
        assert texts == ["first", "second, too quickly"]
        conversation = (await switchboard.store.conversations("web"))[0]
        stored = await switchboard.store.window(conversation.id, 10)
        assert [m.text for m in stored if m.direction == "in"] == texts
    finally:
        await switchboard.stop()


async def test_the_conversation_is_the_browsers_across_tabs_and_new_chat_moves_them_all(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter]
) -> None:
    _, adapter = board
    context = await browser.new_context()  # one browser profile: tabs share localStorage
    first = await context.new_page()
    first.set_default_timeout(TIMEOUT_MS)
    await first.goto(adapter.url or "")
    await first.get_by_label("Your message").fill("remember me")
    await first.get_by_label("Your message").press("Enter")
    await expect(first.locator("li.agent .body")).to_have_count(1)

    second = await context.new_page()  # another tab, later: the same conversation
    second.set_default_timeout(TIMEOUT_MS)
    await second.goto(adapter.url or "")
    await expect(second.locator("li.visitor .body")).to_have_text(["remember me"])

    await second.get_by_role("button", name="New chat").click()
    await expect(second.locator("#log > li")).to_have_count(0)
    third = await context.new_page()  # opened after "New chat": the new conversation
    third.set_default_timeout(TIMEOUT_MS)
    await third.goto(adapter.url or "")
    await expect(third.get_by_role("status")).to_have_text("Online")
    await expect(third.locator("#log > li")).to_have_count(0)
    # the first tab, open all along, followed "New chat" without a reload
    await expect(first.locator("#log > li")).to_have_count(0)
    await expect(first.get_by_role("status")).to_have_text("Online")
    await first.get_by_label("Your message").fill("same new chat?")
    await first.get_by_label("Your message").press("Enter")
    await expect(second.locator("li.visitor .body")).to_have_text(["same new chat?"])
    await first.reload()  # and a reload stays there
    await expect(first.locator("li.visitor .body")).to_have_text(["same new chat?"])
    await context.close()


OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const outside = [];
  for (const element of document.querySelectorAll("body *")) {
    const box = element.getBoundingClientRect();
    if (box.width && (box.right > width + 0.5 || box.left < -0.5)) {
      outside.push(`${element.tagName.toLowerCase()}.${element.className} ends at ${box.right}`);
    }
  }
  return {width, scrollWidth: document.documentElement.scrollWidth, outside};
}"""


@pytest.mark.parametrize("width", [390, 1280], ids=["phone", "desktop"])
async def test_nothing_overflows_a_phone_or_a_desktop_screen(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter], width: int
) -> None:
    switchboard, adapter = board
    missing: list[str] = []
    context = await browser.new_context(viewport={"width": width, "height": 800})
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
    await page.goto(adapter.url or "")
    await expect(page.get_by_role("status")).to_have_text("Online")
    unbroken = "https://example.com/" + "a" * 300  # a long link: no place to break
    await page.get_by_label("Your message").fill(unbroken)
    await page.get_by_label("Your message").press("Enter")
    await expect(page.locator("li.agent .quote")).to_have_count(1)  # the reply quotes it
    await switchboard.stop()  # the server goes away: the longest status there is
    await expect(page.get_by_role("status")).to_have_text("Offline — reconnecting…")
    await snap(page, f"layout-{width}")

    layout = await page.evaluate(OVERFLOW)
    title = await page.locator("#title").evaluate(
        "h => [h.getBoundingClientRect().height, parseFloat(getComputedStyle(h).lineHeight)]"
    )
    icon = await page.evaluate("() => document.querySelector('link[rel=icon]')?.href || ''")
    await context.close()

    assert layout["outside"] == [], layout
    assert layout["scrollWidth"] <= layout["width"], layout
    assert title[0] <= title[1] * 1.2, f"the title wraps: {title}"  # one line, even so
    assert icon.startswith("data:image/svg+xml")
    assert missing == []  # no 404 (a favicon request would be one)


async def test_the_socket_is_allowed_by_a_policy_of_connect_src_self(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter]
) -> None:
    """`connect-src 'self'` covers the page's own ws: (CSP Level 3); nothing of the request's
    Host is copied into the policy."""
    _, adapter = board
    page = await browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    await page.add_init_script(
        "window.violations = [];"
        " document.addEventListener('securitypolicyviolation',"
        " e => window.violations.push(e.violatedDirective + ' ' + e.blockedURI));"
    )
    response = await page.goto(adapter.url or "")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "connect-src 'self';" in csp and "ws:" not in csp and "127.0.0.1" not in csp
    await expect(page.get_by_role("status")).to_have_text("Online")
    await page.get_by_label("Your message").fill("over the socket")
    await page.get_by_label("Your message").press("Enter")
    await expect(page.locator("li.agent")).to_have_count(1)
    assert await page.evaluate("window.violations") == []


NAME_KEY = "backchannel.webchat.name"


async def stored_names(switchboard: Switchboard) -> list[str]:
    conversation = (await switchboard.store.conversations("web"))[0]
    return [
        m.sender.name
        for m in await switchboard.store.window(conversation.id, 50)
        if m.direction == "in"
    ]


async def test_a_name_link_names_that_page_and_is_kept_only_once_the_visitor_sends(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter]
) -> None:
    switchboard, adapter = board
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    status = page.get_by_role("status")
    box = page.get_by_label("Your message")

    async def say(text: str, replies: int) -> None:
        await box.fill(text)
        await box.press("Enter")
        await expect(page.locator("li.agent")).to_have_count(replies)
        await switchboard.wait_idle()

    await page.goto((adapter.url or "") + "?name=Mallory")  # a link someone sent
    await expect(status).to_have_text("Online")
    assert await page.evaluate(f"localStorage.getItem('{NAME_KEY}')") is None
    await page.goto(adapter.url or "")
    await expect(status).to_have_text("Online")
    await say("first", 1)
    assert await stored_names(switchboard) == ["Visitor"]  # the link named nobody

    await page.goto((adapter.url or "") + "?name=Ada")
    await expect(status).to_have_text("Online")
    await say("second", 2)
    assert await page.evaluate(f"localStorage.getItem('{NAME_KEY}')") == "Ada"
    await page.goto(adapter.url or "")
    await expect(status).to_have_text("Online")
    await say("third", 3)
    assert await stored_names(switchboard) == ["Visitor", "Ada", "Ada"]
    await context.close()


async def test_an_idle_page_pauses_and_reconnects_when_its_visitor_is_back(
    browser: Browser, tmp_path: Path
) -> None:
    switchboard = Switchboard(SQLiteStore(tmp_path / "state.db"), port=0)
    adapter = WebchatAdapter("web", {"idle_timeout": 1})
    switchboard.add_account(adapter, Binding(agent=demo_agent))
    await switchboard.start()
    try:
        page = await open_chat(browser, adapter)
        status = page.get_by_role("status")
        # the server closes the socket after a second without a message; the page waits
        await expect(status).to_have_text("Paused")
        await snap(page, "paused")
        box = page.get_by_label("Your message")
        await box.press("a")  # the visitor is back
        await expect(status).to_have_text("Online")
        await expect(status).to_have_text("Paused")  # and idle again
        await box.fill("written while paused")
        await box.press("Enter")  # reconnects, then sends
        await expect(page.locator("li.agent")).to_have_count(1)
        await expect(page.locator("li.visitor .state")).to_have_text([""])
        assert [who for who, _ in await bubbles(page)] == ["You", "Agent"]
    finally:
        await switchboard.stop()


TAB_KEY = "backchannel.webchat.conversation"
PENDING_KEY = "backchannel.webchat.pending"


class AckDropper:
    """Drop the server's `ack` frames while `on`: a message is committed but its page never
    hears so, as when the connection dies right after the commit."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        real = VisitorSession._send

        async def send(session: VisitorSession, frame: dict[str, Any]) -> None:
            if self.on and frame.get("type") == "ack":
                return
            await real(session, frame)

        monkeypatch.setattr(VisitorSession, "_send", send)


async def visitor_texts(switchboard: Switchboard) -> dict[str, list[str]]:
    """Return the visitor messages stored in each web chat conversation, by conversation id."""
    stored: dict[str, list[str]] = {}
    for conversation in await switchboard.store.conversations("web"):
        tab = conversation.address.chat.rsplit(".", 1)[1]
        messages = await switchboard.store.window(conversation.id, 50)
        stored[tab] = [m.text for m in messages if m.direction == "in"]
    return stored


async def new_tab(context: BrowserContext, adapter: WebchatAdapter) -> Page:
    """Open a tab of the browser and wait until it shows its transcript (a message sent
    earlier would be sent again by the transcript's resend of what is unacked)."""
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    await page.goto(adapter.url or "")
    await expect(page.get_by_role("status")).to_have_text("Online", timeout=TIMEOUT_MS)
    await expect(page.get_by_role("log")).to_have_attribute("aria-busy", "false")
    return page


async def send_unacked(page: Page, text: str, replies: int) -> None:
    """Send `text` while acks are dropped, and wait until it is stored (the agent answered)."""
    await page.get_by_label("Your message").fill(text)
    await page.get_by_label("Your message").press("Enter")
    await expect(page.locator("li.agent")).to_have_count(replies, timeout=TIMEOUT_MS)
    await expect(page.locator("li.visitor .state").last).to_have_text("sending…")


async def a_tab_with_an_unacked_message(
    browser: Browser, adapter: WebchatAdapter, acks: AckDropper
) -> tuple[BrowserContext, Page, str]:
    """A browser whose tab sent "pay invoice 42" in its conversation, the server's ack
    dropped (acks stay dropped); return the browser, the tab and the conversation's id."""
    context = await browser.new_context()
    first = await new_tab(context, adapter)
    chat = await first.evaluate(f"localStorage.getItem('{TAB_KEY}')")
    acks.on = True
    await send_unacked(first, "pay invoice 42", replies=1)
    return context, first, chat


async def new_chat_in_another_tab(
    context: BrowserContext, adapter: WebchatAdapter
) -> tuple[Page, str]:
    """Open another tab of the browser, start a New chat there; return it and its id."""
    second = await new_tab(context, adapter)
    await second.get_by_role("button", name="New chat").click()
    await expect(second.locator("#log > li")).to_have_count(0, timeout=TIMEOUT_MS)
    await expect(second.get_by_role("status")).to_have_text("Online", timeout=TIMEOUT_MS)
    return second, await second.evaluate(f"localStorage.getItem('{TAB_KEY}')")


async def test_a_reloaded_tab_resends_its_unacked_message_only_into_its_own_conversation(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored in A, ack lost; another tab starts B; the reload goes back to A to resend it
    (deduplicated there), instead of storing it in B too."""
    switchboard, adapter = board
    acks = AckDropper(monkeypatch)
    context, first, chat_a = await a_tab_with_an_unacked_message(browser, adapter, acks)

    second, chat_b = await new_chat_in_another_tab(context, adapter)
    assert chat_b != chat_a

    acks.on = False
    await first.reload()
    await expect(first.get_by_role("status")).to_have_text("Online", timeout=TIMEOUT_MS)
    # the resend was acked: nothing is pending any more
    await until_nothing_pending(first)
    await switchboard.wait_idle()
    assert await visitor_texts(switchboard) == {chat_a: ["pay invoice 42"]}
    # the reloaded tab shows where the message went (A, with the agent's answer); the other
    # tab stays in B, which never got it; the browser's conversation is still B
    await expect(first.locator("li.visitor .state")).to_have_text([""])
    assert [who for who, _ in await bubbles(first)] == ["You", "Backchannel demo"]
    assert (await bubbles(first))[0] == ("You", "pay invoice 42")
    assert await second.locator("#log > li").count() == 0
    assert await first.evaluate(f"localStorage.getItem('{TAB_KEY}')") == chat_b
    # nothing pending: the next reload follows the browser's conversation, B
    await first.reload()
    await expect(first.get_by_role("status")).to_have_text("Online", timeout=TIMEOUT_MS)
    await expect(first.get_by_role("log")).to_have_attribute("aria-busy", "false")  # shown
    assert await first.locator("#log > li").count() == 0
    await context.close()


async def test_unacked_messages_saved_by_an_earlier_page_are_never_resent_into_another_chat(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries without a conversation (saved by the previous version of the page): one stored
    in the conversation the reload opens is done; any other is offered back, not resent."""
    switchboard, adapter = board
    acks = AckDropper(monkeypatch)
    context, first, chat_a = await a_tab_with_an_unacked_message(browser, adapter, acks)
    second, chat_b = await new_chat_in_another_tab(context, adapter)
    await send_unacked(second, "and the receipt", replies=1)
    acks.on = False

    # the first tab's sessionStorage as the previous page wrote it: no conversation recorded
    legacy = [
        {"client_id": item["client_id"], "text": item["text"]}
        for page in (first, second)
        for item in await page.evaluate(f"JSON.parse(sessionStorage.getItem('{PENDING_KEY}'))")
    ]
    assert [item["text"] for item in legacy] == ["pay invoice 42", "and the receipt"]
    await first.evaluate(
        "([key, value]) => sessionStorage.setItem(key, JSON.stringify(value))",
        [PENDING_KEY, legacy],
    )
    await first.reload()  # opens the browser's conversation, B
    await expect(first.get_by_role("status")).to_have_text("Online", timeout=TIMEOUT_MS)
    # B holds "and the receipt": shown from its transcript, done; "pay invoice 42" (stored in
    # A, which this page cannot know) is not resent but put back in the box, with a word why
    box = first.get_by_label("Your message")
    await expect(box).to_have_value("pay invoice 42")
    await expect(first.get_by_role("alert")).to_contain_text("back in the message box")
    assert await bubbles(first) == [("You", "and the receipt"), ("Backchannel demo", ANY)]
    await expect(first.locator("li.visitor .state")).to_have_text([""])
    assert await first.evaluate(f"sessionStorage.getItem('{PENDING_KEY}')") == "[]"
    await switchboard.wait_idle()
    assert await visitor_texts(switchboard) == {
        chat_a: ["pay invoice 42"],
        chat_b: ["and the receipt"],
    }
    # sending it again is the visitor's call: it goes to B, as a new message, and is acked
    await box.press("Enter")
    await expect(first.locator("li.visitor .state")).to_have_text(["", ""], timeout=TIMEOUT_MS)
    await expect(first.locator("#error")).to_have_text("")
    await switchboard.wait_idle()
    assert (await visitor_texts(switchboard))[chat_b] == ["and the receipt", "pay invoice 42"]
    await context.close()


class MessageDropper:
    """Drop the page's `message` frames unread while `on`, as a connection that dies before
    the server reads them: nothing is stored, nothing is acked. `dropped` counts them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.dropped: list[str] = []
        self._changed = asyncio.Event()
        real = VisitorSession._visitor_message

        async def receive(
            session: VisitorSession, connection: Connection, frame: dict[str, Any]
        ) -> None:
            if self.on:
                self.dropped.append(str(frame.get("text")))
                self._changed.set()
                return
            await real(session, connection, frame)

        monkeypatch.setattr(VisitorSession, "_visitor_message", receive)

    async def wait_dropped(self, count: int) -> None:
        """Wait until `count` message frames were dropped in all."""
        async with asyncio.timeout(TIMEOUT_MS / 1000):
            while len(self.dropped) < count:
                self._changed.clear()
                await self._changed.wait()


async def until_nothing_pending(page: Page, timeout: float = 15.0) -> None:
    """Wait until the page holds no unacked message. Asked from here, not with
    `wait_for_function`: its polling evaluates the condition inside the page, which the
    page's Content Security Policy (no 'unsafe-eval') refuses."""
    deadline = asyncio.get_running_loop().time() + timeout
    while await page.evaluate(f"sessionStorage.getItem('{PENDING_KEY}')") != "[]":
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the page still held unacked messages after {timeout}s")
        await asyncio.sleep(0.05)


async def pending_in(page: Page) -> list[tuple[str, str]]:
    """Return (text, conversation) of every unacked message the page keeps."""
    items = await page.evaluate(f"JSON.parse(sessionStorage.getItem('{PENDING_KEY}') || '[]')")
    return [(item["text"], item.get("conversation")) for item in items]


async def test_new_chat_resends_the_unacked_messages_into_the_conversation_left_once(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A "New chat" in the tab that holds unacked messages of A (one stored but its ack lost,
    one never read): both reach A, once each, and none is sent into the new chat B."""
    switchboard, adapter = board
    acks = AckDropper(monkeypatch)
    lost = MessageDropper(monkeypatch)
    context, first, chat_a = await a_tab_with_an_unacked_message(browser, adapter, acks)
    acks.on = False
    lost.on = True
    await first.get_by_label("Your message").fill("and the receipt")
    await first.get_by_label("Your message").press("Enter")
    await lost.wait_dropped(1)
    assert await pending_in(first) == [("pay invoice 42", chat_a), ("and the receipt", chat_a)]
    lost.on = False

    await first.get_by_role("button", name="New chat").click()
    await expect(first.locator("#log > li")).to_have_count(0)
    await expect(first.get_by_role("status")).to_have_text("Online")
    chat_b = await first.evaluate(f"localStorage.getItem('{TAB_KEY}')")
    assert chat_b != chat_a
    # resent over the new chat's socket, into A: acked, so nothing is pending any more
    await until_nothing_pending(first)
    await switchboard.wait_idle()
    assert await visitor_texts(switchboard) == {chat_a: ["pay invoice 42", "and the receipt"]}
    # the new chat shows none of it (A's answers stay in A)
    await expect(first.get_by_role("log")).to_have_attribute("aria-busy", "false")
    assert await first.locator("#log > li").count() == 0

    await first.get_by_label("Your message").fill("a new question")
    await first.get_by_label("Your message").press("Enter")
    await expect(first.locator("li.agent")).to_have_count(1)
    await expect(first.locator("li.visitor .state")).to_have_text([""])
    await switchboard.wait_idle()
    assert await visitor_texts(switchboard) == {
        chat_a: ["pay invoice 42", "and the receipt"],
        chat_b: ["a new question"],
    }
    assert [text for who, text in await bubbles(first) if who == "You"] == ["a new question"]
    await context.close()


async def test_new_chat_while_offline_then_a_reload_keeps_and_resends_the_old_chats_messages(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unacked in A, the server gone, "New chat" (B) and a message there; the server back
    and the tab reloaded: it shows B (where the visitor was), and each message reaches the
    conversation it was written in, once."""
    db = tmp_path / "state.db"

    async def start(port: int) -> tuple[Switchboard, WebchatAdapter]:
        switchboard = Switchboard(SQLiteStore(db), port=port)
        adapter = WebchatAdapter("web", {"title": "Backchannel demo"})
        switchboard.add_account(adapter, Binding(agent=demo_agent))
        await switchboard.start()
        return switchboard, adapter

    lost = MessageDropper(monkeypatch)
    switchboard, adapter = await start(0)
    try:
        context = await browser.new_context()
        page = await new_tab(context, adapter)
        status = page.get_by_role("status")
        box = page.get_by_label("Your message")
        chat_a = await page.evaluate(f"localStorage.getItem('{TAB_KEY}')")
        lost.on = True
        await box.fill("pay invoice 42")
        await box.press("Enter")
        await lost.wait_dropped(1)

        port = int((switchboard.url or "").rsplit(":", 1)[1])
        await switchboard.stop()
        await expect(status).to_have_text("Offline — reconnecting…")
        await page.get_by_role("button", name="New chat").click()
        await expect(page.locator("#log > li")).to_have_count(0)
        chat_b = await page.evaluate(f"localStorage.getItem('{TAB_KEY}')")
        assert chat_b != chat_a
        await box.fill("hello again")
        await box.press("Enter")
        await expect(page.locator("li.visitor .state")).to_have_text(["sending…"])
        # nothing typed is dropped: each kept with the conversation it was written in
        assert await pending_in(page) == [("pay invoice 42", chat_a), ("hello again", chat_b)]

        # back, still losing what the page sends: the reload shows B, where the visitor was,
        # though A's message is unacked (and resent, out of sight)
        switchboard, adapter = await start(port)
        await page.reload()
        await expect(status).to_have_text("Online")
        await expect(page.locator("li.visitor .body")).to_have_text(["hello again"])
        await expect(page.locator("li.visitor .state")).to_have_text(["sending…"])
        await expect(page.get_by_role("log")).to_have_attribute("aria-busy", "false")
        assert await pending_in(page) == [("pay invoice 42", chat_a), ("hello again", chat_b)]
        assert await page.evaluate(f"localStorage.getItem('{TAB_KEY}')") == chat_b

        lost.on = False
        await page.reload()
        await expect(status).to_have_text("Online")
        await until_nothing_pending(page)
        await expect(page.locator("li.visitor .state")).to_have_text([""])
        await expect(page.locator("li.agent")).to_have_count(1)
        await switchboard.wait_idle()
        assert await visitor_texts(switchboard) == {
            chat_a: ["pay invoice 42"],
            chat_b: ["hello again"],
        }
        assert [text for who, text in await bubbles(page) if who == "You"] == ["hello again"]
        await context.close()
    finally:
        await switchboard.stop()


async def test_a_server_that_does_not_take_a_messages_conversation_gets_no_message_of_another(
    browser: Browser, board: tuple[Switchboard, WebchatAdapter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older server (no "message_conversation" in its welcome) would store a message of
    A sent over B's socket in B: after "New chat" the page keeps A's message until a server
    that takes it is back, and only then resends it, into A."""
    switchboard, adapter = board
    lost = MessageDropper(monkeypatch)
    older = True
    real = VisitorSession._send

    async def send(session: VisitorSession, frame: dict[str, Any]) -> None:
        if older and frame.get("type") == "welcome":
            frame = {k: v for k, v in frame.items() if k != "message_conversation"}
        await real(session, frame)

    monkeypatch.setattr(VisitorSession, "_send", send)
    context = await browser.new_context()
    page = await new_tab(context, adapter)
    chat_a = await page.evaluate(f"localStorage.getItem('{TAB_KEY}')")
    lost.on = True
    await page.get_by_label("Your message").fill("pay invoice 42")
    await page.get_by_label("Your message").press("Enter")
    await lost.wait_dropped(1)
    lost.on = False

    await page.get_by_role("button", name="New chat").click()
    await expect(page.locator("#log > li")).to_have_count(0)
    chat_b = await page.evaluate(f"localStorage.getItem('{TAB_KEY}')")
    await page.get_by_label("Your message").fill("hello again")
    await page.get_by_label("Your message").press("Enter")
    # B's message is acked; A's is not sent to this server, so only B's is stored
    await expect(page.locator("li.visitor .state")).to_have_text([""])
    await expect(page.locator("li.agent")).to_have_count(1)
    await switchboard.wait_idle()
    assert await visitor_texts(switchboard) == {chat_b: ["hello again"]}
    assert await pending_in(page) == [("pay invoice 42", chat_a)]

    older = False
    await page.reload()
    await until_nothing_pending(page)
    await switchboard.wait_idle()
    assert await visitor_texts(switchboard) == {
        chat_a: ["pay invoice 42"],
        chat_b: ["hello again"],
    }
    await expect(page.locator("li.visitor .body")).to_have_text(["hello again"])
    await context.close()
