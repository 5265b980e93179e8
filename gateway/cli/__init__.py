"""The ``countersign`` command line: the parser, and the commands an operator and an admin run.

* `main` — the entry: parse, then hand each command to its module;
* `parser` — every command, option and help text, and nothing else;
* `commands` — the commands that act on the store: keys, signing keys, audit, and (after resolving
  the admin's key) the admin's cards and adapters;
* `cards`, `adapters` — ``countersign cards`` and ``countersign adapters``, as an admin.

May import: everything in `gateway`. Each command imports only what it uses, so ``--help`` starts fast.
"""
