"""Run one of the README's "Connect your agent" examples, as written, with the framework's scripted model.

Run in the framework's own environment (`tests.support.compat_envs`) as ``python readme_example.py``,
one spec a line on stdin (``{"framework": ..., "code": ..., "url": ..., "token": ..., "calls": [...]}``). The
example's code runs as the body of an async function with ``url``, ``key`` and ``model`` bound (the README
says what each is); ``model`` is the framework's driver's scripted model (``<framework driver>.scripted(calls)``).
It prints ``{"tools": [...], "seen": [...], "printed": "..."}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
import sys
import textwrap
from typing import Any

DRIVERS = {"pydantic_ai": "pydantic_ai_agent", "openai_agents": "openai_agents_agent", "langchain": "langchain_agent"}


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    recorder: Any = None
    model: Any = None
    if spec["framework"] in DRIVERS:
        model, recorder = importlib.import_module(DRIVERS[spec["framework"]]).scripted(spec["calls"])
    source = "async def _example(url, key, model):\n" + textwrap.indent(spec["code"], "    ")
    namespace: dict[str, Any] = {}
    exec(compile(source, "README.md", "exec"), namespace)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await namespace["_example"](spec["url"], spec["token"], model)
    return {
        "tools": list(getattr(recorder, "offered", [])),
        "seen": list(getattr(recorder, "seen", [])),
        "printed": printed.getvalue(),
    }


if __name__ == "__main__":  # one spec a line, one answer a line: the framework is imported once for them all
    for line in sys.stdin:
        print(json.dumps(asyncio.run(main(json.loads(line)))), flush=True)
