"""The evaluation's stand-in administrator: decides a card through the gateway's admin API.

An agent never decides its own cards; in an evaluation someone must, so the harness plays the
admin with an admin key of the same org, exactly as a person in the console would: it reads the
card (its version and ``args_hash``) and approves what it read, or rejects or cancels it.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx2

from countersign_agent.errors import GatewayClientError

__all__ = ["Approver", "Verdict"]

Verdict = Literal["approve", "reject", "cancel"]


class Approver:
    """Decides cards on the gateway whose MCP endpoint is `mcp_url`, with the admin `key`."""

    def __init__(self, mcp_url: str, key: str, http: httpx2.AsyncClient) -> None:
        self._base = mcp_url.rstrip("/").removesuffix("/mcp") + "/admin/api"
        self._headers = {"authorization": f"Bearer {key}"}
        self._http = http

    async def decide(self, card_id: str, verdict: Verdict, *, reason: str = "decided by the agent evaluation") -> None:
        """Apply `verdict` to the card as it stands now.

        Raises:
            GatewayClientError: the admin API refused (a card already final, a key without the role...).
        """
        body: dict[str, object] = {}
        if verdict == "approve":
            shown = await self._send("GET", f"/cards/{card_id}", None)
            card = shown.get("card")
            if not isinstance(card, dict):
                raise GatewayClientError(f"admin API GET /cards/{card_id}: no card in the answer")
            body = {"version": card["version"], "args_hash": card["args_hash"], "comment": reason}
        elif verdict == "reject":
            body = {"reason": reason}
        await self._send("POST", f"/cards/{card_id}/{verdict}", body)

    async def _send(self, method: str, path: str, body: dict[str, object] | None) -> dict[str, Any]:
        try:
            answer = await self._http.request(method, self._base + path, headers=self._headers, json=body)
        except httpx2.HTTPError as error:
            raise GatewayClientError(f"admin API unreachable: {type(error).__name__}") from error
        if not answer.is_success:
            raise GatewayClientError(f"admin API {method} {path}: HTTP {answer.status_code}")
        value = answer.json()
        return value if isinstance(value, dict) else {}
