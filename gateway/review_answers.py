"""What a registry admin's review answers, for both kinds of backend a service brings: registered adapters
(`gateway.registry`) and fronted MCP servers (`gateway.upstreams`).

Both reviews refuse with the same four codes, answered with the same HTTP statuses (`REVIEW_STATUS`), and list
every problem of a refused body the same way (`validation_problems`), so a script that drives one drives the
other. Plain data: no layer, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import ValidationError

from gateway.codes import Code

__all__ = ["REVIEW_STATUS", "validation_problems"]

REVIEW_STATUS: Mapping[str, int] = MappingProxyType(
    {Code.VALIDATION_ERROR: 422, Code.PERMISSION_DENIED: 403, Code.NOT_FOUND: 404, Code.CONFLICT: 409}
)
"""Every refusal code of a review, with the status the review's routes answer it with."""


def validation_problems(error: ValidationError, whole: str) -> tuple[str, ...]:
    """Each problem of a refused body, by where it is (`whole` when it is the body itself), without the input."""
    return tuple(
        f"{'.'.join(str(part) for part in item['loc']) or whole}: {item['msg']}"
        for item in error.errors(include_url=False, include_input=False)
    )
