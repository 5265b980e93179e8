"""A stdio relay that cuts the connection once, right after a write request reached the server.

Run as ``python -m tests.support.stdio_cut MARKER TOOL -- COMMAND...``: it starts COMMAND and relays JSON-RPC
lines both ways. The first time a ``tools/call`` of TOOL goes out while MARKER does not exist, it creates
MARKER, lets the server answer (so the write lands), swallows the answer and exits: to the gateway the
connection broke after the request went out. Later runs (the gateway's reconnect) relay everything.
A real fault on the real server's pipe, not a simulated answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path


def main(argv: list[str]) -> int:
    marker, tool, separator, *command = argv
    assert separator == "--"
    cut = not Path(marker).exists()
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    watched: set[object] = set()
    lock = threading.Lock()

    def to_child() -> None:
        assert child.stdin is not None
        for line in sys.stdin.buffer:
            try:
                message = json.loads(line)
            except ValueError:
                message = {}
            params = message.get("params") or {}
            if cut and message.get("method") == "tools/call" and params.get("name") == tool:
                with lock:
                    watched.add(message.get("id"))
                Path(marker).touch()
            child.stdin.write(line)
            child.stdin.flush()
        child.stdin.close()

    threading.Thread(target=to_child, daemon=True).start()
    for line in child.stdout:
        try:
            answered = json.loads(line).get("id")
        except ValueError:
            answered = None
        with lock:
            if answered is not None and answered in watched:
                child.terminate()
                os._exit(0)  # the write landed; its answer is lost with the connection (and the relay thread)
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
