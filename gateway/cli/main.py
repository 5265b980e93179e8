"""The `countersign` command line: serve, worker, keys, signing-keys, audit, cards, adapters, upstreams, agent.

Every command acts on the data of the configured Redis, or of the embedded server of the data
directory (attaching to a running `serve`, or starting the server for the command's duration).
The command line's shape is `gateway.cli.parser`; the store commands are `gateway.cli.commands`.
This module only parses and dispatches, and imports each command's modules when it runs, so
``countersign --help`` costs an argparse and ``countersign cards list`` does not load the MCP SDK
or the HTTP server.

``--config FILE`` goes before the command or after it (``countersign keys list --config f.toml``).
The mode follows from the configuration (`gateway.config.settings`: a file or a Redis URL is production,
where every command needs the audit secret); ``serve --demo`` asks for the demo whatever it says.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gateway.cli.parser import build_parser
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.config.settings import Settings

__all__ = ["main"]


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point. Returns the process exit status (0 ok, 1 refused, 2 usage)."""
    args = build_parser().parse_args(argv)
    if args.command == "agent":  # a client of a gateway: it needs no settings and no store
        from countersign_agent.cli import run_agent_command

        return run_agent_command(args, environ or {})
    if args.command == "adapters" and args.adapters_command == "import":  # operator tooling: no store, no settings
        from gateway.cli.adapters import import_adapters

        return import_adapters(args, environ or {})
    try:
        from gateway.config.settings import Settings

        settings = Settings.load(environ or {}, args.config, demo=getattr(args, "demo", False))
        if args.command in ("serve", "worker"):
            return _serve(settings, args)
        if args.command == "adapters" and args.adapters_command == "import-openapi":
            from gateway.cli import adapters as cli_adapters

            return cli_adapters.import_openapi(args)
        if args.command == "policy" and args.policy_command != "explain":
            from gateway.cli.policy import run_offline

            return run_offline(settings, args)
        if args.command in ("cards", "adapters", "upstreams"):
            args.key = args.key or (environ or {}).get("COUNTERSIGN_ADMIN_KEY", "")
        import asyncio

        from gateway.cli.commands import run_command

        return asyncio.run(run_command(settings, args))
    except GatewayError as error:
        print(f"countersign: {error}", file=sys.stderr)
        return 1


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import contextlib
    from dataclasses import replace

    from gateway.runtime.serve import run, run_worker

    if args.command == "worker":
        with contextlib.suppress(KeyboardInterrupt):
            _run_fast(run_worker(settings))
        return 0
    settings = replace(
        settings,
        host=args.host or settings.host,
        port=args.port or settings.port,
        run_worker=settings.run_worker and not args.no_worker,
    )
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C before the server took over signals
        _run_fast(run(settings))
    return 0


def _run_fast(main: Coroutine[Any, Any, None]) -> None:
    """Run a long-lived coroutine on uvloop when it is installed (uvicorn[standard] brings it)."""
    import asyncio

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)
