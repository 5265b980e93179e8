"""Whose budget a call spends: a person's, however their subject is spelled."""

from __future__ import annotations

import pytest

from gateway.principal import Principal
from policies.charges import budget_owner


def _caller(subject: str, org: str = "acme", key_id: str = "key_0123456789ab") -> Principal:
    return Principal(subject=subject, org=org, roles=frozenset(), key_id=key_id)


@pytest.mark.parametrize(
    "spelling",
    ["alice@acme.example", "ALICE@acme.example", "\u0430lice@acme.example", "\uff41lice@acme.example"],
    ids=["as-is", "case", "cyrillic-a", "fullwidth-a"],
)
def test_every_spelling_and_key_of_one_person_spends_one_budget(spelling: str) -> None:
    """Minting keys, or look-alike subjects, buys no more calls: the owner is the org and the identity."""
    assert budget_owner(_caller(spelling, key_id="key_ffffffffffff")) == budget_owner(_caller("alice@acme.example"))


def test_other_people_and_other_orgs_spend_their_own() -> None:
    """bob is not alice, and alice of another org is another budget."""
    alice = budget_owner(_caller("alice@acme.example"))
    assert budget_owner(_caller("bob@acme.example")) != alice
    assert budget_owner(_caller("alice@acme.example", org="globex")) != alice
