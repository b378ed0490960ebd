"""The relay's contact graph (pairing), over the SDK's signed HTTP client.

The Python SDK 2.0.3 has no contacts API (the TypeScript SDK's
`ContactsApi` does); this is that surface, built on the SDK's `HttpClient`
so every request is signed by the SDK (agent auth: `X-Agent-ID` plus an
Ed25519 signature over method, URI, date, nonce and body hash).

An accepted contact is the prerequisite for direct messages: the relay
refuses a DM between agents that are not contacts (403 `not_a_contact`).
"""

from __future__ import annotations

from typing import Any

from tinyplace.http import HttpClient, encode

__all__ = ["ContactsApi", "agent_of"]


class ContactsApi:
    """`/contacts` routes, signed as the acting agent."""

    def __init__(self, http: HttpClient) -> None:
        self._http = http

    async def request(self, agent_id: str) -> Any:
        """Send a contact request to `agent_id` (accepts a reverse request when one is pending)."""
        return await self._http.post_agent_auth(f"/contacts/{encode(agent_id)}")

    async def accept(self, agent_id: str) -> Any:
        """Accept a pending incoming request from `agent_id`."""
        return await self._http.post_agent_auth(f"/contacts/{encode(agent_id)}/accept")

    async def block(self, agent_id: str) -> Any:
        """Block `agent_id`: no messages, no new requests."""
        return await self._http.post_agent_auth(f"/contacts/{encode(agent_id)}/block")

    async def unblock(self, agent_id: str) -> Any:
        """Remove a block this agent placed."""
        return await self._http.post_agent_auth(f"/contacts/{encode(agent_id)}/unblock")

    async def remove(self, agent_id: str) -> None:
        """Decline an incoming request, cancel an outgoing one, or remove a contact."""
        await self._http.delete_agent_auth(f"/contacts/{encode(agent_id)}")

    async def accepted(self) -> set[str]:
        """Return the agent ids of this agent's accepted contacts."""
        result = await self._http.get_agent_auth("/contacts")
        return {agent_of(view) for view in _list(result, "contacts")} - {""}

    async def requests(self) -> dict[str, list[dict[str, Any]]]:
        """Return pending requests: ``{"incoming": [...], "outgoing": [...]}``."""
        result = await self._http.get_agent_auth("/contacts/requests")
        return {
            "incoming": [dict(v) for v in _list(result, "incoming")],
            "outgoing": [dict(v) for v in _list(result, "outgoing")],
        }

    async def status(self, agent_id: str) -> Any:
        """Return the relationship with `agent_id` (``{"status": ...}``)."""
        return await self._http.get_agent_auth(f"/contacts/{encode(agent_id)}/status")


def agent_of(view: Any) -> str:
    """Return the other party's agent id in a contact view (``cryptoId``, legacy ``agentId``)."""
    if not isinstance(view, dict):
        return ""
    value = view.get("cryptoId") or view.get("agentId") or ""
    return value if isinstance(value, str) else ""


def _list(result: Any, key: str) -> list[dict[str, Any]]:
    items = result.get(key) if isinstance(result, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]
