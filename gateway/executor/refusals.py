"""The agent path's refusals and audit details, as the model and the audit each read them.

Pure functions of a verdict or an error (`gateway.executor.agent` is their one user): a budget's
refusal, a backend's failure (its own words for the audit only), a validation error without its
input, and the acting agent of a delegated call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gateway.codes import Code
from gateway.decision import Decision
from gateway.errors import UpstreamError, UpstreamRateLimitedError, UpstreamRefusedError
from gateway.limiter import RateVerdict
from gateway.principal import Principal

__all__ = ["error_summary", "failure", "retry", "spent", "wait", "with_acting_client"]


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
