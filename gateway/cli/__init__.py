"""The ``countersign`` command line: the parser, and the commands an operator and an admin run.

* `main` — the entry: parse, then hand each command to its module;
* `parser` — every command, option and help text, and nothing else;
* `commands` — the commands that act on the store: keys, audit, and the admin's cards and adapters;
* `cards`, `adapters`, `signing_keys` — ``countersign cards``, ``adapters`` and ``signing-keys``.

May import: everything in `gateway`. Each command imports only what it uses, so ``--help`` starts fast.
"""
