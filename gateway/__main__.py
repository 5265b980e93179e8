"""``python -m gateway`` / the ``countersign`` console script. The only reader of `os.environ`."""

from __future__ import annotations

import os
import sys

from gateway.cli import main as _main


def main() -> None:
    sys.exit(_main(sys.argv[1:], os.environ))


if __name__ == "__main__":
    main()
