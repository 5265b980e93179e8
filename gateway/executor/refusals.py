"""The agent path's refusals and audit details, as the model and the audit each read them.

Pure functions of a verdict or an error (`gateway.executor.agent` is their one user): a budget's
refusal, a backend's failure (its own words for the audit only), a validation error without its
input, the arguments that would choose an idempotency key, and the acting agent of a delegated call.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from gateway.codes import Code
from gateway.decision import Decision
from gateway.errors import UpstreamError, UpstreamRateLimitedError, UpstreamRefusedError
from gateway.limits.rate_limiter import RateVerdict
from gateway.principal import Principal
from gateway.tools.declarations import is_key_field

__all__ = ["error_summary", "failure", "key_fields", "minted_keys", "retry", "spent", "wait", "with_acting_client"]


def with_acting_client(principal: Principal, extra: Mapping[str, str]) -> Mapping[str, str]:
    """A delegated call's event names the agent beside the person it acts for."""
    return {**extra, "acting_client": principal.acting_client} if principal.acting_client else extra


def spent(verdict: RateVerdict) -> Decision:
    """A budget's refusal as the audit reads it; the caller reads RATE_LIMITED with `_retry`."""
    return Decision.deny(Code.RATE_LIMITED, f"{verdict.bucket} budget spent; retry after {verdict.retry_after:g} s")


def retry(verdict: RateVerdict) -> dict[str, Any]:
    return {"retry_after": verdict.retry_after}


def failure(error: UpstreamError) -> Decision:
    """The refusal for a failed call. A backend's own words (its refusal code) go in the reason, which only
    the audit keeps: the model gets the code of our vocabulary and its fixed message, nothing the backend wrote."""
    backend = f" (backend: {error.reason})" if isinstance(error, UpstreamRefusedError) and error.reason else ""
    return Decision.deny(Code(error.code), f"{type(error).__name__}: {error}{backend}")


def wait(error: UpstreamError) -> dict[str, Any] | None:
    """What the model is told of a backend's own rate limit: how long it asked callers to wait."""
    return {"retry_after": error.retry_after} if isinstance(error, UpstreamRateLimitedError) else None


def error_summary(error: ValidationError) -> list[dict[str, Any]]:
    """Field-level problems without echoing the input back (it may be long or hostile)."""
    return [
        {"field": ".".join(str(part) for part in item["loc"]), "type": item["type"], "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]


_KNOWN_NAME_CHARS = 64
"""Argument names up to this long have their `is_key_field` verdict remembered: a bounded cache of
bounded names, so an agent cannot pin large strings in memory with it."""


def key_fields(arguments: Iterable[str]) -> list[str]:
    """The argument names that would let the caller choose an idempotency key (`is_key_field`), sorted."""
    return sorted(name for name in arguments if _is_key_field(name))


def minted_keys(fields: Iterable[str]) -> dict[str, Any]:
    """The refusal's details for `key_fields`: keys are the gateway's."""
    message = "idempotency keys are minted by the gateway"
    return {"errors": [{"field": f, "type": "server_minted_key", "message": message} for f in fields]}


def _is_key_field(name: str) -> bool:
    # Remembered: every call of a tool sends the same few names, and each check lowercases, strips and searches.
    return _remembered_key_field(name) if len(name) <= _KNOWN_NAME_CHARS else is_key_field(name)


@functools.lru_cache(maxsize=1024)
def _remembered_key_field(name: str) -> bool:
    return is_key_field(name)
