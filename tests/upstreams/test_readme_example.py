"""The README's "Put Countersign in front of an MCP server" configuration, run as written against the real
filesystem server (only its command and folder pointed at the cached install and a folder the test owns),
with an agent on a real MCP client over Streamable HTTP and the gateway under uvicorn."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.config.settings import Settings
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import agent, make_key
from tests.support.mcp_servers import NodeServer
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def _readme_config() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Put Countersign in front of an MCP server\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


def _pointed_at(config: str, server: NodeServer, folder: Path) -> str:
    """The README's configuration with its command run from the cached install, on `folder`."""
    document: dict[str, Any] = tomllib.loads(config)
    stdio = document["upstreams"]["files"]
    assert stdio["command"] == "npx" and stdio["args"][-1] == "/srv/shared"
    assert stdio["args"][1] == "@modelcontextprotocol/server-filesystem@2026.8.31"  # the version the test pins
    pointed = config.replace('command = "npx"', f'command = "{server.node}"')
    old_args = 'args = ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/srv/shared"]'
    assert old_args in pointed
    return pointed.replace(old_args, f'args = ["{server.entry}", "{folder}"]')


async def test_the_readme_configuration_fronts_the_filesystem_server(
    filesystem_server: NodeServer, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """Read through the access check; a write as a card whose page shows the file and the diff; approved through
    the admin API, run once by the gateway's worker."""
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "notes.txt").write_text("draft\n")
    config = tmp_path / "countersign.toml"
    config.write_text(_pointed_at(_readme_config(), filesystem_server, folder))
    environ = {
        "COUNTERSIGN_REDIS_URL": redis_url,
        "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET,
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
    }
    settings = Settings.load(environ, config)
    token = await make_key(redis, roles=("staff",))
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        async with agent(f"{base}/mcp", token) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {n for n in names if n.startswith("files_")} == {
                "files_read_text_file",
                "files_list_directory",
                "files_write_file",
                "files_edit_file",
                "files_move_file",
            }
            read = await client.call_tool("files_read_text_file", {"path": str(folder / "notes.txt")})
            assert not read.is_error and "draft" in str(read.structured_content)
            proposed = await client.call_tool(
                "files_write_file", {"path": str(folder / "notes.txt"), "content": "final\n"}
            )
            assert not proposed.is_error and proposed.structured_content is not None
            card_id = str(proposed.structured_content["card_id"])
            assert (folder / "notes.txt").read_text() == "draft\n"
            # What the console's card page shows an approver: the file as it is, and the diff of the write.
            admin = await make_key(redis, subject="carol@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
            async with httpx.AsyncClient(
                base_url=f"{base}/admin/api", headers={"authorization": f"Bearer {admin}"}, timeout=10
            ) as http:
                shown = (await http.get(f"/cards/{card_id}")).json()["card"]
                lines = shown["preview"]["lines"]
                assert "  draft" in lines and "  -draft" in lines and "  +final" in lines
                decided = await http.post(
                    f"/cards/{card_id}/approve",
                    json={"version": shown["version"], "args_hash": shown["args_hash"], "comment": "ok"},
                )
                assert decided.status_code == 200, decided.text
            ledger = RedisLedger(redis)
            with anyio.fail_after(20):
                while (card := await ledger.get(card_id)) is not None and card.state not in (
                    CardState.SUCCEEDED,
                    CardState.FAILED,
                    CardState.UNKNOWN,
                    CardState.NEEDS_RECONCILIATION,
                ):
                    await anyio.sleep(0.05)
            assert card is not None and card.state is CardState.SUCCEEDED
            assert (folder / "notes.txt").read_text() == "final\n"
            assert [event.type for event in await ledger.events(card_id)].count("dispatched") == 1
            # edit_file and move_file: their cards show the file as it is and the diff each would make.
            edit = {"path": str(folder / "notes.txt"), "edits": [{"oldText": "final", "newText": "done"}]}
            move = {"source": str(folder / "notes.txt"), "destination": str(folder / "moved.txt")}
            expected = {"files_edit_file": ("  -final", "  +done"), "files_move_file": (f"  +{folder / 'moved.txt'}",)}
            for tool, arguments in (("files_edit_file", edit), ("files_move_file", move)):
                filed = await client.call_tool(tool, arguments)
                assert not filed.is_error and filed.structured_content is not None
                async with httpx.AsyncClient(
                    base_url=f"{base}/admin/api", headers={"authorization": f"Bearer {admin}"}, timeout=10
                ) as http:
                    lines = (await http.get(f"/cards/{filed.structured_content['card_id']}")).json()["card"]["preview"]
                assert "  final" in lines["lines"] and set(expected[tool]) <= set(lines["lines"])
            assert (folder / "notes.txt").read_text() == "final\n" and not (folder / "moved.txt").exists()
