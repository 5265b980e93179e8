"""Which adapters each organisation has enabled: operator configuration, as plain data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["OrgAdapters"]


@dataclass(frozen=True, slots=True)
class OrgAdapters:
    """Adapters enabled per organisation. An organisation that is not listed gets nothing."""

    adapters_by_org: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = {org: frozenset(adapters) for org, adapters in self.adapters_by_org.items()}
        object.__setattr__(self, "adapters_by_org", MappingProxyType(frozen))

    def enabled(self, org: str, adapter: str) -> bool:
        return adapter in self.adapters_by_org.get(org, frozenset())

    @property
    def orgs(self) -> frozenset[str]:
        return frozenset(self.adapters_by_org)
