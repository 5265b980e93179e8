"""A durability pre-check for tests of what the ledger itself confirms or refuses."""

from __future__ import annotations


async def always_writable() -> bool:
    """Lets every decision through to the ledger: the test's subject is the ledger's own answer, not the guard's."""
    return True
