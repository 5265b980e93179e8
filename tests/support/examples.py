"""How many examples the property tests run: all of them in CI, a fifth in the inner loop.

Two Hypothesis profiles. ``ci`` runs Hypothesis's default of 100 examples, and every count a test names
in full (``examples(300)`` is 300). ``dev``, for ``pytest -m "not slow"`` on a developer's machine, runs
a fifth of each (never fewer than five): enough to catch a regression while editing, quick enough to
run after every change.
``tests/conftest.py`` loads ``ci`` when ``CI`` is set (as ``.ci/run`` sets it) and ``dev`` otherwise;
``HYPOTHESIS_PROFILE=ci`` runs the full counts anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import settings

CI_EXAMPLES = 100
"""Hypothesis's default, which the ``ci`` profile keeps."""

settings.register_profile("ci", max_examples=CI_EXAMPLES)
settings.register_profile("dev", max_examples=CI_EXAMPLES // 5)

FEWEST = 5
"""No test that names more runs fewer examples than this, whatever the profile."""


def load_profile(environ: Mapping[str, str]) -> str:
    """Load the profile `environ` asks for (``HYPOTHESIS_PROFILE``, else ``ci`` when ``CI`` is set); its name."""
    in_ci = environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    name = environ.get("HYPOTHESIS_PROFILE") or ("ci" if in_ci else "dev")
    settings.load_profile(name)
    return name


def examples(count: int) -> int:
    """`count` examples under the ``ci`` profile; under another, the same share of `count` as that profile
    runs of the default, but never fewer than `FEWEST` (or `count`, if that is less)."""
    scaled = count * settings.default.max_examples // CI_EXAMPLES
    return max(scaled, min(count, FEWEST))
