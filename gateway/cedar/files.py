"""Reading a policy set from a file or a directory, and putting a changed one in force.

Who calls it: the composition root at start and on reload (a change of the files, or SIGHUP), and
``countersign policy``. A directory's ``*.cedar`` files are read in name order as one set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from gateway.cedar.engine import CedarEngine, CompiledPolicies, compile_policies, schema_digest
from gateway.cedar.schema import cedar_schema
from gateway.errors import ConfigError
from gateway.tools.declarations import Tool

__all__ = ["PolicyReloader", "PolicyText", "file_text", "load_engine", "read_policy_text"]

logger = logging.getLogger(__name__)


def read_policy_text(path: Path) -> str:
    """The Cedar text at `path`: the file, or a directory's ``*.cedar`` files in name order.

    Raises:
        ConfigError: the path does not exist or cannot be read.
    """
    try:
        if path.is_dir():
            return "\n".join(part.read_text(encoding="utf-8") for part in sorted(path.glob("*.cedar")))
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"policy set {path} cannot be read: {error}") from error


PolicyText = Callable[[Iterable[Tool]], str]
"""Where a policy set's text comes from, given the tools served: a file or directory, or the built-in rules."""


def file_text(path: Path) -> PolicyText:
    """The text of the policy files at `path` (the tools play no part)."""
    return lambda tools: read_policy_text(path)


def load_engine(text: PolicyText, source: str, tools: Iterable[Tool]) -> CedarEngine:
    """A Cedar engine with the policy set `text` gives for `tools`, validated against them.

    Raises:
        ConfigError: as `read_policy_text` and `compile_policies`.
    """
    served = list(tools)
    return CedarEngine(compile_policies(text(served), served, source=source))


class PolicyReloader:
    """Puts the policy set in force again when its text changed (a file edited, or, for the built-in rules,
    the tools served); a set that does not validate is refused with Cedar's message, logged, and the set in
    force stays."""

    def __init__(self, engine: CedarEngine, text: PolicyText, source: str, tools: Callable[[], Iterable[Tool]]) -> None:
        self._engine, self._text, self._source, self._tools = engine, text, source, tools
        self.engine = engine
        self.last_error: str | None = None
        """Why the newest text was refused, while it is; None once a set loaded."""
        self.held = False
        """True while no set from the source has been in force (`starting`): nothing is permitted meanwhile."""

    @classmethod
    def starting(
        cls, text: PolicyText, source: str, static: Iterable[Tool], tools: Callable[[], Iterable[Tool]]
    ) -> PolicyReloader:
        """The reloader of a process starting with the policy set `text`, validated against `static`.

        Before the store is read only the in-process adapters' tools are known: a set naming a tool registered
        since, or served by a fronted MCP server, does not validate yet. It is `held`, an empty set in force
        (no permit: everything refused), until `reload` validates it against the tools served; the process
        refuses to start if it still does not then (`gateway.runtime.app`).
        """
        try:
            reloader = cls(load_engine(text, source, static), text, source, tools)
        except ConfigError as error:
            waiting = CedarEngine(compile_policies("", (), source=f"none ({source} not yet in force)"))
            reloader = cls(waiting, text, source, tools)
            reloader.last_error, reloader.held = str(error), True
        return reloader

    def reload(self, *, force: bool = False) -> CompiledPolicies | None:
        """Load the text again if it, or the schema of the tools served, differs from the set in force's (or
        `force`); the set loaded, or None.

        The schema follows the catalog (adapters registered or removed, a fronted server's tools reviewed or
        changed), so a set is validated against the argument types it will be evaluated with; one that no
        longer validates is refused like an edited file: the set in force stays, and `last_error` says why.
        """
        try:
            served = list(self._tools())
            text = self._text(served)
            compiled = self._engine.compiled
            if not force and text == compiled.text and schema_digest(cedar_schema(served)) == compiled.schema:
                self.last_error = None  # the source and the catalog say again what is in force
                return None
            compiled = self._engine.load(text, served, source=self._source)
        except ConfigError as error:
            if str(error) != self.last_error:
                logger.error("policy set refused; %s stays in force: %s", self._engine.active, error)
            self.last_error = str(error)
            return None
        self.last_error, self.held = None, False
        logger.info("policy set %s in force", compiled.name)
        return compiled
