"""GitHub's own OpenAPI description, end to end: `countersign adapters import` against a real gateway, tools
served to a real MCP client, calls answered by Prism serving the same description.

GitHub's description (npm ``@octokit/openapi``, 1,223 operations) and Prism are pinned and installed into the
cache by `tests.support.github_spec` (with ``CI`` set a test fails rather than skips without them). The
gateway here runs on database 13 of the session's Redis; its org acme serves the adapters ``github`` and
``githubissues``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest
import yaml
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.cards.views import card_for_agent
from gateway.cli.main import main
from gateway.config.settings import OrgSettings, Settings
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.registrations import RegistryStore
from tests.support.agents import agent, make_key, payload
from tests.support.cards import approve_as_admin, settled
from tests.support.fault_proxy import REFUSAL, FaultProxy, serve_fault_proxy
from tests.support.github_spec import GitHubSpec
from tests.support.services import TEST_AUDIT_SECRET
from tests.support.signing import signing_key_before_start

pytestmark = pytest.mark.anyio

README = Path(__file__).parents[2] / "README.md"

HTML_URL = r"^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/issues/[0-9]+$"
READS = ("issues/list-for-repo", "issues/get", "issues/list-comments")
OVERLAY = {
    "access": {"roles": ["staff"]},
    "credential": {"secret_env": "GITHUB_TOKEN"},
    "health_path": "/rate_limit",
    # GitHub's description gives "get an issue" an example whose value is an Example Object, not an issue, so
    # Prism answers {"value": {...}}: an API whose answers drift from its own description. Reported, not refused.
    # The issues' addresses are shown to the model: their shape is declared (an issue page on github.com).
    "operations": {
        "issues/get": {"output_check": "report"},
        "issues/list-for-repo": {"trusted_output_fields": {"items[].html_url": HTML_URL}},
    },
}


@pytest.fixture(scope="module")
def github_redis_url(redis_server_url: str) -> str:
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/13"))


@pytest.fixture(scope="module")
def github_gateway(github_redis_url: str) -> Iterator[str]:
    """The base URL of a gateway whose org acme serves the registered adapters these tests import."""
    org = OrgSettings(
        name="acme",
        adapters=frozenset({"github", "githubissues", "githubwrites", "githubstate", "githubresend", "ghissues", "gh"}),
        roles=frozenset({"staff", "approver", "registry"}),
    )
    secrets = {f"{adapter.upper()}_TOKEN": "ghp" for adapter in org.adapters}
    settings = Settings(
        redis_url=github_redis_url, adapters={}, orgs=(org,), registry_poll_seconds=0.2, run_worker=True,
        audit_secret=Secret(TEST_AUDIT_SECRET), secrets=secrets,
    )  # fmt: skip
    signing_key_before_start(github_redis_url)
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        yield base


@pytest.fixture
async def github_redis(github_redis_url: str) -> AsyncIterator[Redis]:
    """A client on the gateway's database, which is not flushed between these tests: the gateway's worker
    keeps its outbox group, and the adapters registered stay registered (each test names its own)."""
    client = Redis.from_url(github_redis_url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()


Rig = tuple[GitHubSpec, str, str, Redis, Path, pytest.CaptureFixture[str]]
"""GitHub's description, Prism's URL, the gateway's, a client on its database, a scratch folder, captured output."""


@pytest.fixture
def rig(
    github_spec: GitHubSpec,
    github_prism: str,
    github_gateway: str,
    github_redis: Redis,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Rig:
    return github_spec, github_prism, github_gateway, github_redis, tmp_path, capsys


async def _cli(
    capsys: pytest.CaptureFixture[str], *args: str, environ: dict[str, str] | None = None
) -> tuple[int, str, str]:
    status = await anyio.to_thread.run_sync(lambda: main(list(args), environ or {}))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.slow
async def test_the_whole_spec_is_refused_before_anything_is_sent_naming_each_limit(
    github_spec: GitHubSpec, github_gateway: str, github_redis: Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a selection, GitHub's 1,223 operations are one adapter over the registry's limits: each limit
    is named with its numbers and the operations that hit it, and nothing reaches the registry."""
    service = await make_key(github_redis, kind=KeyKind.SERVICE, subject="github-svc", roles=())
    status, out, err = await _cli(
        capsys, "adapters", "import", str(github_spec.spec), "--name", "github", "--register", github_gateway,
        environ={"COUNTERSIGN_SERVICE_KEY": service},
    )  # fmt: skip
    assert status == 1 and out == ""
    assert "LIMIT tools per adapter: 1223 > 100 (1223 operation(s): GET /" in err
    assert "LIMIT manifest bytes: " in err and "> 524288 (1223 operation(s): PATCH /repos/{owner}/{repo} (" in err
    assert "LIMIT tool name length: " in err and "(rename with x-countersign.name)" in err
    assert "limit met by the importer: description length: " in err
    assert "nothing was sent" in err
    assert await RegistryStore(github_redis).get("github") is None


@pytest.mark.slow
async def test_split_by_tag_drafts_one_adapter_per_tag_and_the_issues_tag_fits(
    github_spec: GitHubSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--split`` makes one adapter per first tag; the dry run shows what each operation becomes, and the
    issues tag's 58 operations fit the per-adapter limits (only its undecided writes remain problems)."""
    status, _, err = await _cli(
        capsys, "adapters", "import", str(github_spec.spec), "--name", "github", "--split", "--dry-run"
    )
    assert status == 1
    assert "adapter githubissues: 58 tool(s)" in err
    assert "adapter githubrepos: 204 tool(s)" in err
    issues = err.split("adapter githubissues:")[1].split("\nadapter ")[0]
    assert "GET /repos/{owner}/{repo}/issues -> githubissues_list_for_repo (read); inputs: owner*, repo*," in issues
    assert "LIMIT" not in issues


async def test_a_yaml_document_drafts_what_its_json_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same document written as YAML is read as YAML and drafts the same manifest."""
    source = Path(__file__).parents[1] / "data" / "billing-openapi.json"
    document = json.loads(source.read_text())
    (tmp_path / "billing.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    drafts = []
    for path in (source, tmp_path / "billing.yaml"):
        status, out, _ = await _cli(
            capsys, "adapters", "import", str(path), "--name", "billing",
            "--operations", "listInvoices,createCreditNote", "--out", str(tmp_path / path.suffix.strip(".")),
        )  # fmt: skip
        drafts.append((status, (tmp_path / path.suffix.strip(".") / "billing.json").read_text()))
    assert drafts[0] == drafts[1] and drafts[0][0] == 0


def _requests(log: Path) -> list[str]:
    """The requests Prism logged, as ``METHOD /path``."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if "Request received" in line]
    return lines


@pytest.mark.slow
async def test_issue_reads_registered_from_the_spec_answer_an_agent_with_arrays(rig: Rig) -> None:
    """Imported with a YAML overlay (access, credential reference, health path) and registered by the
    command, accepted by an admin, listing a repository's issues, getting one and listing its comments
    succeed through a real MCP client: the arrays come wrapped in ``items``, and the issue's free text
    (titles, bodies) is withheld from the model."""
    github_spec, github_prism, github_gateway, github_redis, tmp_path, capsys = rig
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump(OVERLAY))
    service = await make_key(github_redis, kind=KeyKind.SERVICE, subject="github-svc", roles=())
    status, out, err = await _cli(
        capsys, "adapters", "import", str(github_spec.spec), "--name", "github", "--operations", ",".join(READS),
        "--overlay", str(overlay), "--base-url", github_prism, "--register", github_gateway,
        environ={"COUNTERSIGN_SERVICE_KEY": service},
    )  # fmt: skip
    assert status == 0, err
    assert "github: new adapter quarantined until an admin accepts it" in out
    assert "free-text output field(s) marked untrusted" in err
    admin = await make_key(github_redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    headers = {"authorization": f"Bearer {admin}"}  # accepting rebuilds every served tool (see `_registered`)
    async with httpx.AsyncClient(base_url=github_gateway, headers=headers, timeout=60) as http:
        shown = (await http.get("/admin/api/adapters/github")).json()
        accepted = await http.post("/admin/api/adapters/github/accept", json={"hash": shown["proposed_hash"]})
    assert accepted.status_code == 200, accepted.text
    # The review shows each imported tool as a reviewer needs it, not only its name.
    listing = next(tool for tool in shown["tools"] if tool["name"] == "github_issues_list_for_repo")
    assert (listing["method"], listing["path"]) == ("GET", "/repos/{owner}/{repo}/issues")
    assert {"name": "owner", "type": "string", "required": True, "travels": "path"} in listing["inputs"]
    sees = {item["field"]: item["model_sees"] for item in listing["outputs"]}
    assert sees["items[].html_url"] == "trusted: pattern" and sees["items[].title"] == "withheld"
    agent_key = await make_key(github_redis, roles=("staff",))
    results: dict[str, Any] = {}
    with anyio.fail_after(30):
        while "github_issues_list_for_repo" not in results:
            async with agent(f"{github_gateway}/mcp", agent_key) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                if "github_issues_list_for_repo" not in names:
                    await anyio.sleep(0.2)
                    continue
                where = {"owner": "octocat", "repo": "Hello-World"}
                results["github_issues_list_for_repo"] = await client.call_tool("github_issues_list_for_repo", where)
                results["github_issues_get"] = await client.call_tool(
                    "github_issues_get", where | {"issue_number": 1347}
                )
                results["github_issues_list_comments"] = await client.call_tool(
                    "github_issues_list_comments", where | {"issue_number": 1347}
                )
    for name, result in results.items():
        assert not result.is_error, (name, result)
    listed = payload(results["github_issues_list_for_repo"])
    assert isinstance(listed["items"], list) and listed["items"]
    first = listed["items"][0]
    assert first["number"] == 1347 and first["html_url"] == "https://github.com/octocat/Hello-World/issues/1347"
    # Without a declared shape a URL is text like any other: the comments' addresses are withheld.
    comments = payload(results["github_issues_list_comments"])["items"]
    assert comments and comments[0]["html_url"] == "[withheld: third-party text]"
    # Free text (the title; even ``state``, which GitHub's description gives no enum) is withheld by default.
    assert first["title"] == first["state"] == "[withheld: third-party text]"
    # What does not fit the description is withheld (and logged), never passed on unchecked.
    assert set(payload(results["github_issues_get"]).values()) == {None}
    assert isinstance(payload(results["github_issues_list_comments"])["items"], list)


def _marker_contract(search_path: str, reference_field: str) -> dict[str, Any]:
    """GitHub keeps no idempotency keys: the key rides as a marker in the body it stores, found by a search read."""
    return {
        "dedupes_on_key": False, "key_retention_seconds": 86400, "reference_field": reference_field,
        "key_in": "marker", "key_field": "body", "search_path": search_path,
        "search_query": {"state": "all", "per_page": "100"}, "match_field": "body",
    }  # fmt: skip


WRITES_OVERLAY = {
    "access": {"roles": ["staff"]},
    "approval": {"approver_role": "approver"},
    "credential": {"secret_env": "GITHUBWRITES_TOKEN"},
    # A light read GitHub answers cheaply: while the backend is unhealthy, approved cards wait.
    "health_path": "/rate_limit",
    "operations": {
        "issues/create": {
            "summary_template": "Open an issue in {owner}/{repo}",
            "agent_text_fields": ["title", "body"],
            "write_contract": _marker_contract("/repos/{owner}/{repo}/issues", "number"),
        },
        "issues/create-comment": {
            "summary_template": "Comment on {owner}/{repo}#{issue_number}",
            "agent_text_fields": ["body"],
            "write_contract": _marker_contract("/repos/{owner}/{repo}/issues/{issue_number}/comments", "id"),
        },
    },
}


@pytest.fixture(scope="module")
def github_proxy(github_prism: str) -> Iterator[tuple[str, FaultProxy]]:
    with serve_fault_proxy(github_prism) as served:
        yield served


ProxiedRig = tuple[GitHubSpec, str, str, Redis, Path, pytest.CaptureFixture[str], FaultProxy]
"""GitHub's description, the fault proxy's URL (in front of Prism), the gateway's, a client on its database, a
scratch folder, captured output, and the proxy's state."""


@pytest.fixture
def proxied(
    github_spec: GitHubSpec,
    github_proxy: tuple[str, FaultProxy],
    github_gateway: str,
    github_redis: Redis,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> ProxiedRig:
    proxy_url, proxy = github_proxy
    return github_spec, proxy_url, github_gateway, github_redis, tmp_path, capsys, proxy


async def _registered(name: str, selection: str | tuple[str, ...], overlay: dict[str, Any], rig: ProxiedRig) -> str:
    """Import `selection` (operation ids, or the command's selection options) with `overlay` as adapter `name` in
    front of the proxy, register and accept it (once); an agent's key."""
    github_spec, proxy_url, gateway, redis, tmp_path, capsys, _ = rig
    written = tmp_path / f"{name}.json"
    written.write_text(json.dumps(overlay))
    service = await make_key(redis, kind=KeyKind.SERVICE, subject="github-svc", roles=())
    if await RegistryStore(redis).get(name) is None:
        chosen = ("--operations", selection) if isinstance(selection, str) else selection
        status, _, err = await _cli(
            capsys, "adapters", "import", str(github_spec.spec), "--name", name, *chosen, "--overlay", str(written),
            "--base-url", proxy_url, "--register", gateway, environ={"COUNTERSIGN_SERVICE_KEY": service},
        )  # fmt: skip
        assert status == 0, err
        admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
        # Accepting rebuilds every served tool before it answers: about 2 s for GitHub's issues tag on an idle core.
        headers = {"authorization": f"Bearer {admin}"}
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=60) as http:
            shown = (await http.get(f"/admin/api/adapters/{name}")).json()
            accepted = await http.post(f"/admin/api/adapters/{name}/accept", json={"hash": shown["proposed_hash"]})
            assert accepted.is_success, accepted.text
    return await make_key(redis, roles=("staff",))


@pytest.fixture
async def github_writes(proxied: ProxiedRig) -> tuple[FaultProxy, str]:
    """The fault proxy in front of Prism, behind the accepted adapter ``githubwrites`` (create-issue and
    create-comment with the marker contract), and an agent's key."""
    agent_key = await _registered("githubwrites", "issues/create,issues/create-comment", WRITES_OVERLAY, proxied)
    return proxied[-1], agent_key


async def _settled(redis: Redis, card_id: str, timeout: float) -> Any:
    """The card once final; on a timeout, the card as it stands, to say where it stopped."""
    try:
        return await settled(redis, card_id, timeout=timeout)
    except TimeoutError:
        from gateway.store.ledger.redis_ledger import RedisLedger

        stuck = await RedisLedger(redis).get(card_id)
        raise AssertionError(f"not final in {timeout} s: {stuck!r}") from None


async def _propose(gateway: str, agent_key: str, tool: str, arguments: dict[str, Any]) -> str:
    with anyio.fail_after(30):
        while True:
            async with agent(f"{gateway}/mcp", agent_key) as client:
                if tool in {t.name for t in (await client.list_tools()).tools}:
                    result = await client.call_tool(tool, arguments)
                    assert not result.is_error, result
                    card_id: str = payload(result)["card_id"]
                    return card_id
            await anyio.sleep(0.2)


ISSUE = {"owner": "octocat", "repo": "Hello-World", "title": "Checkout fails", "body": "Steps to reproduce: ..."}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "state", "writes"),
    [
        (None, CardState.SUCCEEDED, 1),
        ("drop", CardState.SUCCEEDED, 1),
        ("500_before", CardState.NEEDS_RECONCILIATION, 0),
    ],
    ids=["answered", "answer-dropped-after-applying", "500-before-applying"],
)
async def test_a_created_issue_is_settled_exactly_once_by_its_marker(
    github_writes: tuple[FaultProxy, str], github_gateway: str, github_redis: Redis, fault: str | None,
    state: CardState, writes: int,
) -> None:  # fmt: skip
    """An approved create-issue carries the card's key as a marker in the issue's body. Answered, it is
    SUCCEEDED; with its answer dropped after GitHub applied it, the search read finds the marker and the
    card is SUCCEEDED with the issue's number, with no second create; with a 500 before anything was applied,
    the search finds nothing and, since GitHub does not dedupe, nothing is resent: a person settles it."""
    proxy, agent_key = github_writes
    # A title of its own: the same proposal twice would be the same card.
    card_id = await _propose(github_gateway, agent_key, "githubwrites_issues_create", ISSUE | {"title": f"{fault}"})
    before = len(proxy.writes_to("POST", "/repos/octocat/Hello-World/issues"))
    proxy.fault = fault
    await approve_as_admin(github_redis, github_gateway, card_id)
    card = await _settled(github_redis, card_id, timeout=90)
    sent = proxy.writes_to("POST", "/repos/octocat/Hello-World/issues")[before:]
    assert (card.state, len(sent)) == (state, writes), card
    if writes:
        assert sent[0][2]["body"].endswith(f"<!-- countersign:{card.idempotency_key} -->")
        assert card.reference == "1347"  # the number of the issue GitHub's example creates


@pytest.mark.slow
@pytest.mark.parametrize("status", [403, 410, 422])
async def test_a_create_github_refuses_is_failed_with_its_words_for_the_approver_only(
    github_writes: tuple[FaultProxy, str], github_gateway: str, github_redis: Redis, status: int
) -> None:
    """GitHub refusing the create (no rights, the repository gone, a field it will not take): "not applied" by
    the default table, so the card is FAILED at once, not UNKNOWN and not looked up or resent; GitHub's body is
    on the card for the approver, and the agent's view of the card has none of its words."""
    proxy, agent_key = github_writes
    card_id = await _propose(github_gateway, agent_key, "githubwrites_issues_create", ISSUE | {"title": f"r{status}"})
    before = len(proxy.writes_to("POST", "/repos/octocat/Hello-World/issues"))
    proxy.fault = f"{status}_before"
    await approve_as_admin(github_redis, github_gateway, card_id)
    card = await _settled(github_redis, card_id, timeout=60)
    assert card.state is CardState.FAILED and card.attempts == 1, card
    assert len(proxy.writes_to("POST", "/repos/octocat/Hello-World/issues")) == before
    assert json.loads(card.evidence["answer"]) == REFUSAL and card.evidence["status"] == status
    shown = json.dumps(card_for_agent(card))
    assert "admin rights" not in shown and "Ignore previous" not in shown
    assert card_for_agent(card)["code"] == ("NOT_FOUND" if status == 410 else "CONFLICT")


@pytest.mark.slow
async def test_a_comment_is_created_once_through_a_real_mcp_client(
    github_writes: tuple[FaultProxy, str], github_gateway: str, github_redis: Redis
) -> None:
    """A comment proposed by an agent and approved by a person is created once, with its marker."""
    proxy, agent_key = github_writes
    where = {"owner": "octocat", "repo": "Hello-World", "issue_number": 1347}
    card_id = await _propose(
        github_gateway, agent_key, "githubwrites_issues_create_comment", where | {"body": "Same here."}
    )
    before = len(proxy.writes_to("POST", "/issues/1347/comments"))
    await approve_as_admin(github_redis, github_gateway, card_id)
    card = await _settled(github_redis, card_id, timeout=90)
    assert card.state is CardState.SUCCEEDED, (card.evidence, card.events if hasattr(card, "events") else None)
    assert len(proxy.writes_to("POST", "/issues/1347/comments")) == before + 1


ISSUE_AT = "/repos/{owner}/{repo}/issues/{issue_number}"
PULL_AT = "/repos/{owner}/{repo}/pulls/{pull_number}"


def _state_contract(path: str, condition: dict[str, Any], **more: Any) -> dict[str, Any]:
    """Nowhere to carry a key: the write's target is read again and its state matched against what it asked for."""
    return {
        "dedupes_on_key": False, "key_retention_seconds": 86400, "state_path": path, "state_match": [condition],
    } | more  # fmt: skip


def _state_overlay(adapter: str, **contract: Any) -> dict[str, Any]:
    """Add labels, close (update) an issue and merge a pull request, each with a preview of its target (what the
    card compares a state lookup with) and a state contract (`contract` changes each)."""
    return {
        "access": {"roles": ["staff"]},
        "approval": {"approver_role": "approver"},
        "credential": {"secret_env": f"{adapter.upper()}_TOKEN"},
        "health_path": "/rate_limit",
        "operations": {
            "issues/add-labels": {
                "summary_template": "Add labels to {owner}/{repo}#{issue_number}",
                "preview_path": ISSUE_AT, "preview_fields": ["labels"],
                "write_contract": _state_contract(ISSUE_AT, {"field": "labels[].name", "includes_argument": "labels"})
                | contract,
            },
            "issues/update": {
                "summary_template": "Set {owner}/{repo}#{issue_number} {state}",
                "agent_text_fields": ["title", "body"],
                "preview_path": ISSUE_AT, "preview_fields": ["state"],
                "write_contract": _state_contract(
                    ISSUE_AT, {"field": "state", "equals_argument": "state"}, reference_field="number"
                ) | contract,
            },
            "pulls/merge": {
                "summary_template": "Merge {owner}/{repo}#{pull_number}",
                "agent_text_fields": ["commit_title", "commit_message"],
                "preview_path": PULL_AT, "preview_fields": ["state", "merged"],
                "write_contract": _state_contract(PULL_AT, {"field": "merged", "equals": True}) | contract,
            },
        },
    }  # fmt: skip


def test_the_readme_shows_the_state_contracts_these_tests_run() -> None:
    """The README's add labels, close and merge overlay is the one run against GitHub's description here."""
    section = README.read_text().split("## Import your API\n", 1)[1].split("\n## ", 1)[0]
    shown = yaml.safe_load(section.split("```yaml\n")[2].split("```", 1)[0])
    assert shown["operations"] == _state_overlay("githubstate")["operations"]


STATE_WRITES = "issues/add-labels,issues/update,pulls/merge"


@pytest.fixture
async def github_state(proxied: ProxiedRig) -> tuple[FaultProxy, str, str]:
    """The fault proxy behind the accepted adapter ``githubstate`` (add labels, close, merge), an agent's key and
    an approver's."""
    agent_key = await _registered("githubstate", STATE_WRITES, _state_overlay("githubstate"), proxied)
    admin = await make_key(proxied[3], kind=KeyKind.ADMIN, subject="ann@acme.example", roles=("approver",))
    return proxied[-1], agent_key, admin


async def _admin_card(gateway: str, admin: str, card_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=gateway, headers={"authorization": f"Bearer {admin}"}) as http:
        answer = await http.get(f"/admin/api/cards/{card_id}")
    assert answer.status_code == 200, answer.text
    shown: dict[str, Any] = answer.json()["card"]
    return shown


def _state_write(tool: str, number: int) -> tuple[str, dict[str, Any], tuple[str, str]]:
    """The tool, its arguments on issue or pull `number` of octocat/Hello-World, and the request it sends."""
    repo = {"owner": "octocat", "repo": "Hello-World"}
    return {
        "labels": (
            "githubstate_issues_add_labels", repo | {"issue_number": number, "labels": ["triage"]},
            ("POST", f"/issues/{number}/labels"),
        ),
        "close": (
            "githubstate_issues_update", repo | {"issue_number": number, "state": "closed"},
            ("PATCH", f"/issues/{number}"),
        ),
        "merge": ("githubstate_pulls_merge", repo | {"pull_number": number}, ("PUT", f"/pulls/{number}/merge")),
    }[tool]  # fmt: skip


def _whole_tag_overlay() -> dict[str, Any]:
    """GitHub's issues tag decided whole: root defaults leave a write no read can settle to a person (and give it
    a summary); create issue and comment carry the key as a marker, add labels, close and merge settle by state."""
    overlay = _state_overlay("ghissues")
    overlay |= {
        "summary_template": "Change issues data in {owner}/{repo}",
        "write_contract": {"dedupes_on_key": False, "key_retention_seconds": 86400, "settle_by_person": True},
        # GitHub's own example data does not always fit its description: what fits is shown, the rest withheld.
        "output_check": "report",
    }
    overlay["operations"] = WRITES_OVERLAY["operations"] | overlay["operations"]
    return overlay


@pytest.mark.slow
async def test_the_issues_tag_registered_whole_serves_reads_and_five_writes_each_sent_once(
    proxied: ProxiedRig, github_gateway: str, github_redis: Redis
) -> None:
    """``--tags issues`` on GitHub's whole description, plus the pulls' merge, registered and accepted: an agent
    lists a repository's issues (an array), gets one and lists its comments; creating an issue, commenting, adding
    labels (an array in the body and in the answer), closing by PATCH and merging by PUT, each approved by a
    person, end SUCCEEDED with exactly one request at the backend, and each card says the answer settled it."""
    proxy = proxied[-1]
    selection = ("--tags", "issues", "--operations", "pulls/merge")
    agent_key = await _registered("ghissues", selection, _whole_tag_overlay(), proxied)
    admin = await make_key(github_redis, kind=KeyKind.ADMIN, subject="ann@acme.example", roles=("approver",))
    repo = {"owner": "octocat", "repo": "Hello-World"}
    async with agent(f"{github_gateway}/mcp", agent_key) as client:
        with anyio.fail_after(30):
            while "ghissues_issues_list_for_repo" not in {t.name for t in (await client.list_tools()).tools}:
                await anyio.sleep(0.2)
        listed = {tool.name for tool in (await client.list_tools()).tools}
        reads = [
            await client.call_tool("ghissues_issues_list_for_repo", repo),
            await client.call_tool("ghissues_issues_get", repo | {"issue_number": 241}),
            await client.call_tool("ghissues_issues_list_comments", repo | {"issue_number": 241}),
        ]
    assert len([name for name in listed if name.startswith("ghissues_")]) == 59
    assert all(not read.is_error for read in reads), reads
    assert isinstance(payload(reads[0])["items"], list) and isinstance(payload(reads[2])["items"], list)
    writes = [
        ("ghissues_issues_create", ISSUE | {"title": "whole tag"}, ("POST", "/repos/octocat/Hello-World/issues")),
        ("ghissues_issues_create_comment", repo | {"issue_number": 241, "body": "Seen."}, ("POST", "/241/comments")),
        ("ghissues_issues_add_labels", repo | {"issue_number": 241, "labels": ["triage"]}, ("POST", "/241/labels")),
        ("ghissues_issues_update", repo | {"issue_number": 241, "state": "closed"}, ("PATCH", "/issues/241")),
        ("ghissues_pulls_merge", repo | {"pull_number": 241}, ("PUT", "/pulls/241/merge")),
    ]
    for tool, arguments, (method, path) in writes:
        before = proxy.attempts_at(method, path)
        card_id = await _propose(github_gateway, agent_key, tool, arguments)
        await approve_as_admin(github_redis, github_gateway, card_id)
        card = await _settled(github_redis, card_id, timeout=60)
        assert (tool, card.state, proxy.attempts_at(method, path) - before) == (tool, CardState.SUCCEEDED, 1), card
        assert (await _admin_card(github_gateway, admin, card_id))["settlement"]["by"] == "answer"
    assert proxy.writes_to("POST", "/241/labels")[-1][2] == {"labels": ["triage"]}
    assert proxy.writes_to("PATCH", "/issues/241")[-1][2] == {"state": "closed"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("which", "fault", "number", "held"),
    [
        ("labels", "drop", 211, False),
        ("close", "drop", 212, False),
        ("merge", "drop", 213, False),
        ("close", "500_after", 214, False),
    ],
    ids=["labels-answer-dropped", "close-answer-dropped", "merge-answer-dropped", "close-500-after-applying"],
)
async def test_a_write_whose_answer_was_lost_settles_by_its_targets_state_with_no_second_request(
    github_state: tuple[FaultProxy, str, str], github_gateway: str, github_redis: Redis, which: str, fault: str,
    number: int, held: bool,
) -> None:  # fmt: skip
    """GitHub applied the write and the answer was lost: the issue, read again, has the labels, is closed, the
    pull is merged, so the card is SUCCEEDED by a state match, with no second request. The card shows what the
    read saw and that it did not hold at proposal (the preview read then), so the write, or a change made since,
    made it so; the agent's view carries none of it."""
    proxy, agent_key, admin = github_state
    tool, arguments, (method, path) = _state_write(which, number)
    card_id = await _propose(github_gateway, agent_key, tool, arguments)
    proxy.fault = fault
    await approve_as_admin(github_redis, github_gateway, card_id)
    card = await _settled(github_redis, card_id, timeout=60)
    assert (card.state, proxy.attempts_at(method, path), len(proxy.writes_to(method, path))) == (
        CardState.SUCCEEDED, 1, 1
    ), card  # fmt: skip
    settlement = (await _admin_card(github_gateway, admin, card_id))["settlement"]
    assert settlement["by"] == "state_match" and settlement["saw"]["held_at_proposal"] is held, settlement
    assert "did not at proposal" in settlement["said"]
    seen = {"labels": {"labels[].name": ["bug", "triage"]}, "close": {"state": "closed"}, "merge": {"merged": True}}
    assert settlement["saw"]["saw"] == seen[which]
    async with agent(f"{github_gateway}/mcp", agent_key) as client:
        status = await client.call_tool("approvals_status", {"card_id": card_id})
    assert payload(status)["status"] == "SUCCEEDED" and "state_match" not in json.dumps(payload(status))


@pytest.mark.slow
async def test_a_label_already_there_at_proposal_settles_without_claiming_the_write_added_it(
    github_state: tuple[FaultProxy, str, str], github_gateway: str, github_redis: Redis
) -> None:
    """GitHub's example issue is labelled ``bug`` already: a lost answer to "add bug" finds the label, and the
    card says it held at proposal, so the read cannot tell whether this write changed anything."""
    proxy, agent_key, admin = github_state
    tool, arguments, (method, path) = _state_write("labels", 221)
    card_id = await _propose(github_gateway, agent_key, tool, arguments | {"labels": ["bug"]})
    proxy.fault = "drop"
    await approve_as_admin(github_redis, github_gateway, card_id)
    card = await _settled(github_redis, card_id, timeout=60)
    assert (card.state, proxy.attempts_at(method, path)) == (CardState.SUCCEEDED, 1), card
    settlement = (await _admin_card(github_gateway, admin, card_id))["settlement"]
    assert settlement["by"] == "state_match" and settlement["saw"]["held_at_proposal"] is True, settlement
    assert "already did at proposal: the read cannot tell whether this write changed anything" in settlement["said"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("adapter", "sends"), [("githubstate", 1), ("githubresend", 2)], ids=["no-dedupe-no-resend", "resend-capped-at-1"]
)
async def test_no_state_contract_resends_more_than_its_cap(
    proxied: ProxiedRig, github_gateway: str, github_redis: Redis, adapter: str, sends: int
) -> None:
    """GitHub answers every close with a 500 before applying it, so no state read ever matches. A contract that
    says GitHub does not dedupe sends once and hands the card to a person; one that allows resends (closing is
    the same request again) sends at most its cap more, then hands it over: never more."""
    proxy = proxied[-1]
    contract = {"dedupes_on_key": True, "max_resends": 1} if adapter == "githubresend" else {}
    agent_key = await _registered(adapter, STATE_WRITES, _state_overlay(adapter, **contract), proxied)
    number = 231 if adapter == "githubstate" else 232
    repo = {"owner": "octocat", "repo": "Hello-World"}
    card_id = await _propose(
        github_gateway, agent_key, f"{adapter}_issues_update", repo | {"issue_number": number, "state": "closed"}
    )
    proxy.fault, proxy.fault_count = "500_before", 10
    try:
        await approve_as_admin(github_redis, github_gateway, card_id)
        card = await _settled(github_redis, card_id, timeout=90)
    finally:
        proxy.fault, proxy.fault_count = None, 1
    assert (card.state, proxy.attempts_at("PATCH", f"/issues/{number}")) == (CardState.NEEDS_RECONCILIATION, sends)
    assert card.attempts == sends and not proxy.writes_to("PATCH", f"/issues/{number}")


def _readme_steps() -> tuple[list[list[str]], str]:
    """The ``countersign`` commands and the overlay of the README's "Import your API", as written."""
    section = README.read_text().split("## Import your API\n", 1)[1].split("\n## ", 1)[0]
    blocks = [block.split("```", 1)[0] for block in section.split("```sh\n")[1:]]
    commands = [shlex.split(block.replace("\\\n", " ")) for block in blocks]
    overlay = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return commands, overlay


@pytest.mark.slow
async def test_the_readme_import_your_api_steps_register_tools_an_agent_can_call(rig: Rig) -> None:
    """The README's steps, as written, on GitHub's description: the dry run, the overlay, the registration
    (against Prism in place of api.github.com), an admin's acceptance by hash, and an agent's call."""
    github_spec, github_prism, github_gateway, github_redis, tmp_path, capsys = rig
    commands, overlay = _readme_steps()
    (tmp_path / "overlay.yaml").write_text(overlay)
    (tmp_path / "api.github.com.json").symlink_to(github_spec.spec)
    dry_run, register = commands
    assert dry_run[:3] == ["countersign", "adapters", "import"] and "--dry-run" in dry_run
    service = await make_key(github_redis, kind=KeyKind.SERVICE, subject="gh-svc", roles=())

    def run(command: list[str]) -> list[str]:
        words = [word for word in command if not word.startswith("COUNTERSIGN_SERVICE_KEY=")]
        words = [str(tmp_path / w) if w in ("api.github.com.json", "overlay.yaml") else w for w in words[1:]]
        return [github_gateway if w.startswith("http://127.0.0.1:") else w for w in words]

    status, _, err = await _cli(capsys, *run(dry_run))
    assert "-> gh_issues_list_for_repo (read); inputs: owner*, repo*," in err and "LIMIT" not in err
    status, out, err = await _cli(
        capsys, *run(register), "--base-url", github_prism, environ={"COUNTERSIGN_SERVICE_KEY": service}
    )
    assert status == 0, err
    proposed = out.split("(proposed ", 1)[1].split(")", 1)[0]
    admin = await make_key(github_redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    headers = {"authorization": f"Bearer {admin}"}  # accepting rebuilds every served tool (see `_registered`)
    async with httpx.AsyncClient(base_url=github_gateway, headers=headers, timeout=60) as http:
        assert (await http.post("/admin/api/adapters/gh/accept", json={"hash": proposed})).is_success
    agent_key = await make_key(github_redis, roles=("staff",))
    with anyio.fail_after(30):
        while True:
            async with agent(f"{github_gateway}/mcp", agent_key) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                if {"gh_issues_list_for_repo", "gh_issues_list_comments", "gh_issues_create"} <= names:
                    listed = await client.call_tool("gh_issues_list_for_repo", {"owner": "o", "repo": "r"})
                    break
            await anyio.sleep(0.2)
    assert not listed.is_error and isinstance(payload(listed)["items"], list)
