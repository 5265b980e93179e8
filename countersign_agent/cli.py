"""``countersign agent ask`` and ``countersign agent eval``: the reference agent from the command line.

`gateway.cli.main` parses (the options are in `gateway.cli.parser`) and hands the parsed arguments and
the environment here, before it loads any gateway settings: the agent is a client of a gateway,
reached over HTTP, and needs nothing of the gateway's own configuration. This module reads keys
from the environment or from key files, builds the driver, runs, and prints; exit status 0 when
the run gave an answer (ask) or every check passed (eval), 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path

import httpx2

from countersign_agent.drivers import Driver, make_driver
from countersign_agent.errors import AgentError, TurnParseError
from countersign_agent.evaluation import Target, evaluate, score_table, usage_lines
from countersign_agent.gateway_session import connect
from countersign_agent.loop import converse, follow, report, waiting_notices
from countersign_agent.scenarios import BUILT_IN, Scenario, load_scenarios
from countersign_agent.scripted import ScriptedModel, load_transcript
from countersign_agent.usage import UsageLedger

__all__ = ["run_agent_command"]

API_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


class _UsageError(Exception):
    pass


def run_agent_command(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Run ``agent ask`` or ``agent eval``; returns the exit status."""
    try:
        if args.agent_command == "ask":
            return asyncio.run(_ask(args, environ))
        return asyncio.run(_eval(args, environ))
    except _UsageError as error:
        print(f"countersign agent: {error}", file=sys.stderr)
        return 2
    except (AgentError, OSError) as error:
        print(f"countersign agent: {error}", file=sys.stderr)
        return 1


def _parse_errors(errors: Sequence[TurnParseError], where: str = "") -> None:
    """The raw head each unparsable turn kept: the one clue to a live failure that does not reproduce."""
    for error in errors:
        print(
            f"countersign agent: {where + ': ' if where else ''}a turn did not parse ({error.reason}); "
            f"it began {error.head!r}",
            file=sys.stderr,
        )


def _key(environ: Mapping[str, str], variable: str, path: Path) -> str:
    if environ.get(variable):
        return environ[variable]
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        raise _UsageError(f"no key: set {variable} or point to a key file ({path} cannot be read)") from None


def _model_driver(
    args: argparse.Namespace, environ: Mapping[str, str], http: httpx2.AsyncClient, ledger: UsageLedger
) -> Driver:
    if not args.model:
        raise _UsageError("--model is required (or --scripted to replay a transcript)")
    variable = args.api_key_env or API_KEY_ENV[args.provider]
    api_key = environ.get(variable, "")
    if not api_key:
        raise _UsageError(f"no model API key: set {variable}")
    base_url = args.base_url or environ.get("COUNTERSIGN_MODEL_BASE_URL") or None
    return make_driver(args.provider, model=args.model, api_key=api_key, http=http, ledger=ledger, base_url=base_url)


async def _ask(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    key = _key(environ, "COUNTERSIGN_AGENT_KEY", args.key_file)
    ledger = UsageLedger()
    async with httpx2.AsyncClient(timeout=120) as http:
        if args.scripted:
            driver: Driver = ScriptedModel(turns=load_transcript(args.scripted), ledger=ledger)
        else:
            driver = _model_driver(args, environ, http, ledger)
        async with connect(args.url, key, tasks=not args.no_tasks) as session:
            run = await converse(
                driver, session, args.request, max_turns=args.max_turns, today=date.today().isoformat()
            )
            _parse_errors(run.parse_errors)
            print(f"agent: {run.answer}")
            for notice in waiting_notices(run):
                print(f"countersign: {notice}", flush=True)
            for outcome in await follow(session, run, timeout_seconds=args.follow_seconds):
                print(f"countersign: {report(outcome)}")
    for line in usage_lines(ledger):
        print(f"usage: {line}", file=sys.stderr)
    return 1 if run.degraded else 0


async def _eval(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    scenarios = load_scenarios(args.scenarios or BUILT_IN, only=tuple(args.only))
    target = Target(
        mcp_url=args.url,
        agent_key=_key(environ, "COUNTERSIGN_AGENT_KEY", args.key_file),
        admin_key=_key(environ, "COUNTERSIGN_ADMIN_KEY", args.admin_key_file),
        follow_seconds=args.follow_seconds,
        tasks=not args.no_tasks,
    )
    ledger = UsageLedger()
    async with httpx2.AsyncClient(timeout=120) as http:
        if args.scripted:
            directory: Path = args.scripted

            def driver_for(scenario: Scenario, values: Mapping[str, str]) -> Driver:
                return ScriptedModel(
                    turns=load_transcript(directory / f"{scenario.name}.json"), ledger=ledger, values=values
                )
        else:
            model = _model_driver(args, environ, http, ledger)

            def driver_for(scenario: Scenario, values: Mapping[str, str]) -> Driver:
                return model

        runs = await evaluate(scenarios, driver_for, target)
    print(score_table(runs))
    for run in runs:
        _parse_errors(run.conversation.parse_errors, run.scenario.name)
        for check in run.checks:
            if not check.passed:
                print(f"  {run.scenario.name}: {check.name}: {check.detail}")
    for line in usage_lines(ledger):
        print(f"usage: {line}", file=sys.stderr)
    return 0 if all(check.passed for run in runs for check in run.checks) else 1
