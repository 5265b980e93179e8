"""``python -m gateway`` / the ``countersign`` console script. The only reader of `os.environ`."""

from __future__ import annotations

import os
import sys

from gateway.cli.main import main as _main
from gateway.telemetry.tracing import configure as _configure_tracing


def main() -> None:
    _configure_tracing(os.environ)  # the standard OTEL_* variables; nothing set: a no-op tracer
    sys.exit(_main(sys.argv[1:], os.environ))


if __name__ == "__main__":
    main()
