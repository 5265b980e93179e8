"""`countersign upstreams ...`: review the tools of the MCP servers the gateway fronts, from a terminal.

``review`` lists each ``[upstreams.<name>]`` the admin may review, with the tools it listed when a gateway last
read it: served or quarantined and why, the hash to pin, the upstream's annotations (suggestions, never trusted)
and, for a changed definition, the diff from the one reviewed. ``accept NAME TOOL --hash H --mode M`` stores the
admin's review of one tool as listed with hash H, with its access (``--public`` or ``--role``); every gateway
fronting the server serves it from its next reading. ``accept-registration NAME --hash H --acknowledge url`` fronts
a server its service registered again at another URL (or with another credential) in place of the one fronted
now, naming each change review shows. The same authority and audit as the admin API
(`gateway.upstreams.tool_reviews`).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from gateway.audit.events import AuditSink
from gateway.cli.adapters import report_review
from gateway.config.settings import Settings
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from gateway.review_answers import ReviewResult
from gateway.store.upstream_reviews import UpstreamReviewStore
from gateway.upstreams.tool_reviews import UpstreamReviews

__all__ = ["run", "upstream_reviews"]


def upstream_reviews(client: Any, audit: AuditSink, settings: Settings) -> UpstreamReviews:
    """The fronted servers' reviews as a command reads them from the store (`client`), auditing to `audit`."""
    return UpstreamReviews(
        settings.upstreams,
        UpstreamReviewStore(client),
        audit,
        org_adapters=settings.org_adapters,
        now_ms=lambda: int(time.time() * 1000),
        # A command serves nothing: a definition naming another backend's tool is flagged by the gateway's review.
        served_tool_names=frozenset,
    )


async def run(client: Any, audit: AuditSink, admin: Principal, args: argparse.Namespace, settings: Settings) -> int:
    """Run one `upstreams` command as `admin`."""
    reviews = upstream_reviews(client, audit, settings)
    if args.upstreams_command == "review":
        upstreams = await reviews.overview(admin)
        if upstreams is None:
            return report_review(ReviewResult(code="PERMISSION_DENIED", message="reviewing needs the registry role"))
        for upstream in upstreams:
            if args.json:
                print(json.dumps(upstream.model_dump(mode="json"), sort_keys=True))
                continue
            print(f"{upstream.name}  {upstream.transport}  protocol={upstream.protocol or '(not read yet)'}")
            if upstream.proposed is not None:
                # Where the service asks the gateway to connect now: shown as text, accepted only by name and hash.
                url = escape_unprintable(str(upstream.proposed.get("url", "")))
                fronted = escape_unprintable(upstream.url)
                print(f"  registered again: url={url}  changes {', '.join(upstream.attention)}")
                print(f"    proposed={upstream.proposed_hash}  (fronted until accepted: {fronted})")
            for tool in upstream.tools:
                # The upstream's own text: escaped, so it cannot move the cursor or recolour the terminal.
                state = tool.state if not tool.reason else f"{tool.state} ({escape_unprintable(tool.reason)})"
                print(f"  {escape_unprintable(tool.name)}  {state}  listed={tool.listed_hash}")
                if tool.review is not None:
                    print(f"    review: {tool.review['mode']} by {escape_unprintable(tool.reviewed_by)}")
                if tool.suggestion:
                    hints = escape_unprintable(json.dumps(tool.suggestion, sort_keys=True))
                    print(f"    suggested by the upstream (not trusted): {hints}")
                for flag in tool.flags:
                    # Read before classifying: an instruction to the model, hidden characters, a secret asked for.
                    where, excerpt = escape_unprintable(flag.field), escape_unprintable(flag.excerpt)
                    print(f"    flag {flag.code} in {where}: {excerpt}")
                for line in tool.diff:
                    print(f"    {escape_unprintable(line)}")
        return 0
    if args.upstreams_command == "accept-registration":
        acceptance = {"hash": args.hash, "acknowledge": args.acknowledge}
        return report_review(await reviews.accept_registration(admin, args.name, acceptance))
    review: dict[str, Any] = {
        "mode": args.mode,
        "definition": args.hash,
        "public": args.public,
        "roles": [role for chunk in args.role for role in chunk.split(",") if role.strip()],
        "approver_role": args.approver_role,
        "trusted_output": args.trusted_output,
    }
    for rule in ("preview", "lookup"):
        if getattr(args, rule) is not None:
            review[rule] = getattr(args, rule)
    return report_review(await reviews.accept(admin, args.name, args.tool, review))
