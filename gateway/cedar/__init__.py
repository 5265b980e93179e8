"""Policy as code on Cedar: the production `policies.engine.PolicyEngine`.

Owns: the Cedar schema and entities generated from the live tool catalog (`schema`), the engine
that validates a policy set against that schema and decides with it (`engine`), the translation
of the built-in rules (tool access, ``[approvals]`` rules, OAuth ``tool_scopes``) into Cedar
(`builtin`), and reading policy files and directories (`files`).

May import: the vocabulary, `policies`, and the ``cedarpy`` bindings of the official Cedar engine.
It stands with the other implementations of the vocabulary's Protocols (it reads policy files);
only the composition root and the command line build it, and the catalog and the executor see it
through `policies.access.decide_access`.
"""
