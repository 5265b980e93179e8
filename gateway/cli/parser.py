"""The shape of the `countersign` command line: every command, option and help text, and nothing else.

`gateway.cli.main` parses with it before importing anything a command needs, so ``--help``,
``--version`` and a usage error cost an argparse and no more: this module imports only the
standard library and two vocabulary enums.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.cards.card import CardState
from gateway.principal import KeyKind

__all__ = ["AGENT_ENVIRONMENT", "ENVIRONMENT", "RESOLUTIONS", "build_parser"]

RESOLUTIONS = ("SUCCEEDED", "FAILED")
"""What `cards resolve --outcome` accepts: `gateway.approvals.service.OUTCOMES` (a test holds them equal)."""

ENVIRONMENT = """\
environment (each wins over the config file):
  COUNTERSIGN_CONFIG           the TOML config file (or --config)
  COUNTERSIGN_MODE             demo or production (unset: production with a config file or a Redis URL)
  COUNTERSIGN_REDIS_URL        an external Redis (unset: the embedded server of the data directory)
  COUNTERSIGN_DATA_DIR         the data directory (default .countersign)
  COUNTERSIGN_HOST             the address to bind (default 127.0.0.1)
  COUNTERSIGN_PORT             the port (default 8765)
  COUNTERSIGN_ALLOWED_HOSTS    Host headers accepted on /mcp, comma-separated
  COUNTERSIGN_ALLOWED_ORIGINS  Origin headers accepted on /mcp, comma-separated
  COUNTERSIGN_AUDIT_SECRET     the audit chain's key (the variable [gateway] audit_secret_env names)
  COUNTERSIGN_ADMIN_KEY        the admin key of the cards, adapters and upstreams commands
and the variables the config file names: [adapters.*] token_env and signing_key_env,
[notifications.webhooks.*] secret_env."""


AGENT_ENVIRONMENT = """\
environment:
  COUNTERSIGN_AGENT_KEY        the agent's gateway key (else --key-file)
  COUNTERSIGN_ADMIN_KEY        eval: the stand-in approver's admin key (else --admin-key-file)
  OPENAI_API_KEY               the model API key for --provider openai (--api-key-env names another)
  ANTHROPIC_API_KEY            the model API key for --provider anthropic
  COUNTERSIGN_MODEL_BASE_URL   the model API's base URL (else --base-url; default: the provider's)"""


class _Version(argparse.Action):
    """``--version``, which reads the installed metadata only when asked (importlib.metadata is slow to load)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("countersign")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
            found = "0.0.0"
        print(f"countersign {found}")  # on stdout, as argparse's own version action does
        parser.exit()


def _instant(text: str) -> int:
    """An ISO 8601 time (``Z`` or an offset; none means UTC) as milliseconds since the epoch."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line. Building it imports nothing heavy (no test of it needs Redis)."""
    parser = argparse.ArgumentParser(prog="countersign", description="An MCP gateway with human-approved writes.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    parser.add_argument("--config", type=Path, help="TOML config file (adapters, backend URLs, orgs, roles)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the gateway: the demo with no config and no COUNTERSIGN_REDIS_URL, else production",
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--demo", action="store_true", help="demo mode whatever is configured: demo backends, demo keys printed"
    )
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--no-worker", action="store_true", help="run no approved-card worker in this process")
    commands.add_parser(
        "worker",
        help="run an approved-card worker on its own (backends need configured URLs)",
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="mint a key; it is printed once")
    create.add_argument("--kind", choices=[k.value for k in KeyKind], required=True)
    create.add_argument("--subject", required=True)
    create.add_argument("--org", required=True)
    create.add_argument("--roles", action="append", default=[], help="comma-separated; may repeat")
    create.add_argument("--json", action="store_true", help="print the key and its record as JSON")
    create.add_argument(
        "--allow-mixed-scripts",
        action="store_true",
        help="mint a key for a subject that mixes writing systems (refused by default: the stuff of look-alikes)",
    )
    keys.add_parser("list", help="list keys (never the keys themselves)")
    revoke = keys.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id")

    sessions = commands.add_parser("sessions", help="approvers' console sessions").add_subparsers(
        dest="sessions_command", required=True
    )
    passkeys = commands.add_parser("passkeys", help="approvers' passkeys").add_subparsers(
        dest="passkeys_command", required=True
    )
    for verb, text in (
        (sessions.add_parser("list", help="an approver's live console sessions"), None),
        (sessions.add_parser("revoke", help="end every console session of an approver now"), None),
        (passkeys.add_parser("list", help="an approver's passkeys"), None),
        (passkeys.add_parser("remove", help="forget one passkey of an approver"), "credential_id"),
        (passkeys.add_parser("reset", help="forget every passkey of an approver (a lost authenticator)"), None),
    ):
        verb.add_argument("--org", required=True)
        verb.add_argument("--subject", required=True, help="as the identity provider names them")
        if text:
            verb.add_argument(text)
    subjects = commands.add_parser("subjects", help="revoke a person as a whole").add_subparsers(
        dest="subjects_command", required=True
    )
    revoke_subject = subjects.add_parser(
        "revoke",
        help="revoke a subject under every spelling: its keys, tokens minted for it, its approved cards not yet run",
    )
    revoke_subject.add_argument("subject")
    revoke_subject.add_argument("--org", required=True)
    subjects.add_parser("list", help="list the revoked subjects")

    signing = commands.add_parser("signing-keys", help="the gateway's own signing keys (JWKS)").add_subparsers(
        dest="signing-keys_command", required=True
    )
    signing.add_parser("rotate", help="make a new signing key active (the first one too); the old one stays published")
    signing.add_parser("list", help="the published keys: kid, active or when it retires")

    audit = commands.add_parser("audit", help="read the audit trail").add_subparsers(
        dest="audit_command", required=True
    )
    tail = audit.add_parser("tail", help="print the newest audit events")
    tail.add_argument("-n", type=int, default=20)
    tail.add_argument("-f", "--follow", action="store_true")
    tail.add_argument("--json", action="store_true")
    verify = audit.add_parser("verify", help="check the audit trail's hash chain, archive included (exit 1 on a break)")
    verify.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        type=Path,
        help="a checkpoint `audit export --checkpoint` wrote: the trail must still reach it (may repeat)",
    )
    export = audit.add_parser("export", help="print the trail, archive and stream, one JSON object a line")
    export.add_argument("--since", type=_instant, help="from this time on (ISO 8601, e.g. 2026-12-01T09:00Z)")
    export.add_argument("--until", type=_instant, help="up to this time, exclusive (ISO 8601)")
    export.add_argument(
        "--format", choices=["jsonl", "ocsf"], default="jsonl", help="jsonl: our fields; ocsf: OCSF API Activity"
    )
    export.add_argument(
        "--checkpoint",
        type=Path,
        help="also write the sealed chain head to this file, kept with the export, for `audit verify --checkpoint`",
    )
    identity = _identity()
    _cards(commands, identity)
    _adapters(commands, identity)
    _upstreams(commands, identity)
    _policy(commands)
    _agent(commands)
    _accept_config_everywhere(parser)
    return parser


def _accept_config_everywhere(parser: argparse.ArgumentParser) -> None:
    """Let every subcommand take ``--config`` too (``countersign serve --config f.toml``).

    Its default is SUPPRESS, so a subcommand without the option keeps the value given before the
    subcommand. argparse offers no public walk of its subparsers, hence `_actions`.
    """
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in {id(p): p for p in action.choices.values()}.values():
            if not any("--config" in option.option_strings for option in sub._actions):
                sub.add_argument(
                    "--config",
                    type=Path,
                    default=argparse.SUPPRESS,
                    help="TOML config file (here or before the command)",
                )
            _accept_config_everywhere(sub)


def _identity() -> argparse.ArgumentParser:
    """The ``--key`` option every admin command (cards, adapters, upstreams) takes."""
    identity = argparse.ArgumentParser(add_help=False)
    identity.add_argument(
        "--key", help="an admin key (default: $COUNTERSIGN_ADMIN_KEY, preferred: argv is visible to other users)"
    )
    return identity


def _policy(commands: Any) -> None:
    policy = commands.add_parser(
        "policy", help="policy as code: Cedar policies for access and approvals"
    ).add_subparsers(dest="policy_command", required=True)
    policy.add_parser("show", help="print the built-in rules (access, [approvals] rules, tool_scopes) as Cedar")
    validate = policy.add_parser("validate", help="validate a policy file or directory against the tools' schema")
    validate.add_argument("file", type=Path)
    test = policy.add_parser("test", help="run the cases of DIR/cases.toml against the policies of DIR")
    test.add_argument("dir", type=Path)
    explain = policy.add_parser("explain", help="the decision on one call, and the policies that decided it")
    explain.add_argument("--key", required=True, help="the agent key's id (key_...), as `keys list` shows it")
    explain.add_argument("--tool", required=True)
    explain.add_argument("--args", default="{}", help="the call's arguments, a JSON object")
    explain.add_argument("--tainted", action="store_true", help="a write proposed by a tainted requester")
    explain.add_argument("--policies", type=Path, help="a policy file or directory (default: the configured set)")


def _cards(commands: Any, identity: argparse.ArgumentParser) -> None:
    cards = commands.add_parser("cards", help="review and decide approval cards").add_subparsers(
        dest="cards_command", required=True
    )
    listing = cards.add_parser("list", parents=[identity], help="cards of your org, newest first")
    listing.add_argument("--state", choices=[state.value for state in CardState])
    listing.add_argument("--tool")
    listing.add_argument("--requester", help="the requesting agent's subject")
    listing.add_argument("--limit", type=int, help="stop after this many cards (default: every matching card)")
    listing.add_argument("--json", action="store_true", help="one JSON object per card")
    show = cards.add_parser("show", parents=[identity], help="one card with its history")
    show.add_argument("card_id")
    show.add_argument("--json", action="store_true")
    archived = cards.add_parser(
        "archived", parents=[identity], help="a finished card retention moved out of Redis, from the card archive"
    )
    archived.add_argument("card_id")
    archived.add_argument("--json", action="store_true")
    archived.add_argument(
        "--verify", action="store_true", help="check the copy against its card.archive audit entry (reads the trail)"
    )
    approve = cards.add_parser(
        "approve", parents=[identity], help="show cards, then approve them exactly as shown once you confirm"
    )
    _decision(approve)
    approve.add_argument("--comment", default="")
    reject = cards.add_parser("reject", parents=[identity], help="show cards, then veto them once you confirm")
    _decision(reject)
    reject.add_argument("--reason", required=True)
    cancel = cards.add_parser("cancel", parents=[identity], help="cancel a pending or approved card")
    cancel.add_argument("card_id")
    resolve = cards.add_parser("resolve", parents=[identity], help="settle a NEEDS_RECONCILIATION card")
    resolve.add_argument("card_id")
    resolve.add_argument("--outcome", choices=RESOLUTIONS, required=True)
    resolve.add_argument(
        "--evidence", type=_json_object, required=True, help='a JSON object, e.g. \'{"ticket": "T-1"}\''
    )


def _decision(command: argparse.ArgumentParser) -> None:
    """The options approve and reject share: the cards, and how the decision is bound to a review."""
    command.add_argument("card_ids", nargs="+", metavar="card_id", help="one card, or several decided as one batch")
    command.add_argument("--version", type=int, help="the version you reviewed (one card; with --args-hash)")
    command.add_argument("--args-hash", help="the args_hash you reviewed (one card; with --version)")
    command.add_argument(
        "--yes", action="store_true", help="no confirmation, for scripts: needs --version and --args-hash"
    )


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not valid JSON") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _adapters(commands: Any, identity: argparse.ArgumentParser) -> None:
    adapters = commands.add_parser("adapters", help="review and pin registered adapters").add_subparsers(
        dest="adapters_command", required=True
    )
    review = adapters.add_parser("review", parents=[identity], help="registrations, their flags and diffs")
    review.add_argument("--json", action="store_true")
    accept = adapters.add_parser("accept", parents=[identity], help="serve the proposal you reviewed")
    accept.add_argument("name")
    accept.add_argument("--hash", required=True, help="the proposed_hash shown by review")
    accept.add_argument(
        "--acknowledge", type=_words, default=(), help="the changes review called out (base_url,credential)"
    )
    remove = adapters.add_parser("remove", parents=[identity], help="stop serving an adapter")
    remove.add_argument("name")
    drafting = adapters.add_parser("import-openapi", help="draft a manifest from an OpenAPI 3 document")
    drafting.add_argument("spec", type=Path)
    drafting.add_argument("--name", required=True)
    drafting.add_argument("--base-url")
    importing = adapters.add_parser(
        "import", help="draft adapters from an OpenAPI 3 document (JSON or YAML, file or URL) and register them"
    )
    importing.add_argument("spec", help="a file or an http(s) URL")
    importing.add_argument("--name", required=True, help="the adapter's name (with --split, its prefix)")
    importing.add_argument("--base-url", help="the backend's URL, if not the document's first server")
    importing.add_argument("--tags", type=_words, default=(), help="keep operations with one of these tags (a,b)")
    importing.add_argument("--paths", type=_words, default=(), help="keep operations under these path prefixes")
    importing.add_argument("--operations", type=_words, default=(), help="keep operations with these operationIds")
    importing.add_argument("--split", action="store_true", help="one adapter per first tag (<name><tag>)")
    importing.add_argument("--overlay", help="x-countersign keys for the root and for operations by id (JSON/YAML)")
    importing.add_argument("--dry-run", action="store_true", help="show what each operation becomes; send nothing")
    importing.add_argument("--out", type=Path, help="write each draft manifest to DIR/<adapter>.json")
    importing.add_argument("--register", metavar="URL", help="the gateway to register with (PUT /registry/api/...)")
    importing.add_argument(
        "--service-key-env", default="COUNTERSIGN_SERVICE_KEY", help="the variable holding the service key"
    )


def _words(text: str) -> tuple[str, ...]:
    return tuple(word.strip() for word in text.split(",") if word.strip())


def _upstreams(commands: Any, identity: argparse.ArgumentParser) -> None:
    upstreams = commands.add_parser("upstreams", help="review the tools of the MCP servers fronted").add_subparsers(
        dest="upstreams_command", required=True
    )
    review = upstreams.add_parser("review", parents=[identity], help="listed tools, quarantined or served, diffs")
    review.add_argument("--json", action="store_true")
    accept = upstreams.add_parser("accept", parents=[identity], help="classify one tool as listed now")
    accept.add_argument("name", help="the upstream ([upstreams.NAME])")
    accept.add_argument("tool", help="the upstream's name of the tool")
    accept.add_argument("--hash", required=True, help="the listed hash shown by review (the definition you read)")
    accept.add_argument("--mode", required=True, choices=["read", "write", "hidden"])
    accept.add_argument("--public", action="store_true", help="every agent of an org serving the upstream")
    accept.add_argument("--role", action="append", default=[], help="a role that may call it (repeatable)")
    accept.add_argument("--approver-role", default="approver", help="writes: the role that countersigns")
    accept.add_argument("--trusted-output", action="store_true", help="reads: the output is not third-party text")
    accept.add_argument("--preview", type=_json_object, help='writes: {"tool", "arguments", "compare"?} as JSON')
    accept.add_argument("--lookup", type=_json_object, help='writes: {"tool", "arguments", "equals"|"contains"}')
    moved = upstreams.add_parser(
        "accept-registration", parents=[identity], help="front a server its service registered again elsewhere"
    )
    moved.add_argument("name", help="the registered upstream")
    moved.add_argument("--hash", required=True, help="the proposed hash shown by review (the registration you read)")
    moved.add_argument(
        "--acknowledge", action="append", default=[], help="each changed setting review shows (url, token_env, oauth)"
    )


def _agent(commands: Any) -> None:
    agent = commands.add_parser(
        "agent", help="the reference agent: a client of a gateway over MCP, and its evaluation"
    ).add_subparsers(dest="agent_command", required=True)
    client = argparse.ArgumentParser(add_help=False)
    # A client of a gateway reads no gateway config: hidden here, `_accept_config_everywhere` leaves it out.
    client.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    client.add_argument("--url", default="http://127.0.0.1:8765/mcp", help="the gateway's MCP endpoint")
    client.add_argument(
        "--key-file",
        type=Path,
        metavar="FILE",
        default=Path(".countersign/demo-agent.key"),
        help="the agent key, if not in the env",
    )
    client.add_argument("--provider", choices=["openai", "anthropic"], default="openai", help="the model API's format")
    client.add_argument("--model", help="the model name the API knows (required without --scripted)")
    client.add_argument("--base-url", help="the model API's base URL (default: the provider's own)")
    client.add_argument("--api-key-env", help="the variable holding the model API key (default: by provider)")
    client.add_argument("--follow-seconds", type=float, default=300.0, help="how long to follow a card (default 300)")
    client.add_argument("--no-tasks", action="store_true", help="follow cards with approvals_status, not MCP tasks")
    for name, text in (
        ("ask", "run the agent on one request and report what came of its cards"),
        ("eval", "score the agent on the evaluation scenarios; prints a table"),
    ):
        command = agent.add_parser(
            name,
            parents=[client],
            help=text,
            epilog=AGENT_ENVIRONMENT,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == "ask":
            command.add_argument("request", help="what the user asks, in plain words")
            command.add_argument("--max-turns", type=int, default=8)
            command.add_argument(
                "--scripted", type=Path, metavar="FILE", help="replay this transcript (JSON list of turns)"
            )
        else:
            command.add_argument(
                "--admin-key-file",
                type=Path,
                metavar="FILE",
                default=Path(".countersign/demo-admin.key"),
                help="the stand-in approver's admin key, if not in the env",
            )
            command.add_argument(
                "--scenarios", type=Path, metavar="DIR", help="a directory of scenario TOML files (default: built-in)"
            )
            command.add_argument(
                "--only", action="append", default=[], metavar="NAME", help="run only this scenario; may repeat"
            )
            command.add_argument(
                "--scripted", type=Path, metavar="DIR", help="replay DIR/<scenario>.json transcripts instead of a model"
            )
