"""The reference agent: a client of a Countersign gateway over MCP, and a harness that scores agents.

It is the loop the product grew from, on the outside of the gateway's walls: the model is a pure
function ``call(purpose, prompt) -> str`` (`countersign_agent.drivers`, or the scripted model of
`countersign_agent.scripted`); the loop (`countersign_agent.loop`) asks it for exactly one of
``tool_calls`` or ``final`` per turn, offers it only the names the gateway listed for this key, and
feeds results back as a labelled block; the gateway decides everything else. A write is only ever
a proposal: the agent says a card is waiting, follows it (as an MCP task, or with
``approvals_status``) and reports what the ledger says came of it.

It talks to the gateway only over Streamable HTTP with a bearer key, through the official MCP
client, and imports nothing of the gateway (tests/countersign_agent/test_boundary.py).
"""
