"""The gateway's exception tree, divided by who has to act.

```text
* GatewayError
  x ToolDeclarationError      (programmer: bad Tool, duplicate name; has .code)
  x ConfigError               (operator: missing or invalid setting)
  x AuthError                 (operator/CLI: unknown key, bad key kind)
  x StoreUnavailableError     (the state store did not answer; fail closed, retry later)
  x ArchiveError              (operator: an archive file or its directory cannot be written or read; .path)
    + AuditArchiveError         (the audit trail's archive)
    + CardArchiveError          (the archive of retired cards)
  x InvalidCursorError        (the caller sent a list cursor the ledger never issued; start over)
  x ManifestError             (a service: its manifest cannot become tools; .problems, each naming its place)
    + SchemaError               (a JSON Schema outside the subset tools validate with)
  x SessionQuotaExceededError (the caller: a key holds all the MCP sessions it may; one frees when closed or idle)
  x PathArgumentError         (the caller: a value that would change the endpoint; nothing sent)
  x UpstreamError             (an adapter could not complete the call)
    + UpstreamTimeoutError      (no answer within the deadline)
    + UpstreamUnavailableError  (could not connect, or the backend said it is down)
    + UpstreamProtocolError     (an answer we cannot understand)
    + UpstreamNotFoundError     (the object does not exist for this caller)
    + UpstreamRefusedError      (a definitive business refusal, e.g. 409)
    + UpstreamRateLimitedError  (429: the backend did not process the request; retry after a wait)
```

One class stands outside this tree on purpose: `gateway.signing.receipts.ReceiptMismatchError` is a
PyJWT `InvalidTokenError`, because a backend that verifies approval receipts catches PyJWT's errors.

Refusals by access and approval are not exceptions: they are `Decision` values that become
envelopes. Exceptions here carry structured context so a boundary can translate them without
parsing messages.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ArchiveError",
    "AuditArchiveError",
    "AuthError",
    "CardArchiveError",
    "ConfigError",
    "GatewayError",
    "InvalidCursorError",
    "ManifestError",
    "PathArgumentError",
    "SchemaError",
    "SessionQuotaExceededError",
    "StoreUnavailableError",
    "ToolDeclarationError",
    "UpstreamError",
    "UpstreamNotFoundError",
    "UpstreamProtocolError",
    "UpstreamRateLimitedError",
    "UpstreamRefusedError",
    "UpstreamTimeoutError",
    "UpstreamUnavailableError",
]


class GatewayError(Exception):
    """Base class of every error the gateway raises on purpose."""


class ToolDeclarationError(GatewayError):
    """A tool declaration is invalid; raised at construction, never at call time.

    `code` is stable (e.g. ``"invalid_name"``, ``"duplicate_name"``) so tests and tooling can
    match on it instead of the message.
    """

    def __init__(self, message: str, *, code: str, tool: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.tool = tool


class ConfigError(GatewayError):
    """An operator setting is missing or invalid."""


class AuthError(GatewayError):
    """A key operation could not be carried out (unknown key id, bad kind)."""


class StoreUnavailableError(GatewayError):
    """The state store (Redis) did not answer, or failed mid-command; writes must not proceed.

    Raised only by `gateway.store`, which translates every Redis and socket failure into it, and
    nothing else: a disk failure of an archive is an `ArchiveError`. `cause` names the underlying
    failure (``ConnectionError``, ``TimeoutError``) for logs and audit.
    """

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class ArchiveError(GatewayError):
    """An archive on disk could not be written or read (its `OSError` is the cause): a full disk, a
    permission, a path that is not a directory. The operator acts; nothing leaves Redis meanwhile, so a
    background pass that meets it is tried again later.

    Raised only by `gateway.archives`. `path` names the file or directory that failed.
    """

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class AuditArchiveError(ArchiveError):
    """The audit trail's archive (`gateway.archives.audit_archive`) failed: no entry is trimmed from the
    stream past what a committed file holds."""


class CardArchiveError(ArchiveError):
    """The archive of retired cards (`gateway.archives.card_archive`) failed: nothing of the batch was
    committed, so no card of it is removed from Redis."""


class PathArgumentError(GatewayError, ValueError):
    """A value cannot be a path segment as given: empty, a dot segment (``.``, ``..``) in any encoding,
    or not valid text. Filled in, it would change which endpoint is called, so nothing is sent.

    Raised by `gateway.tools.backend_http.fill_path`; the agent's path answers it as VALIDATION_ERROR.
    `argument` names the placeholder.
    """

    def __init__(self, message: str, *, argument: str) -> None:
        super().__init__(message)
        self.argument = argument


class InvalidCursorError(GatewayError):
    """A list cursor that the ledger did not issue (mangled, forged, or from another version).

    The caller sent it, so the caller acts: list again from the start. `problem` says what was
    wrong with it, in words fit for a VALIDATION_ERROR.
    """

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class UpstreamError(GatewayError):
    """An adapter could not complete its call to the backend.

    `service` names the adapter; `status` is the HTTP status when one was received.
    """

    code = "UPSTREAM_ERROR"

    def __init__(
        self, message: str, *, service: str, status: int | None = None, sent: bool = True, answer: str = ""
    ) -> None:
        super().__init__(message)
        self.service = service
        self.status = status
        self.sent = sent
        """False only when the request certainly never left the gateway (e.g. connect refused)."""
        self.answer = answer
        """The backend's own error body, as text and cut short (`gateway.tools.backend_http.MAX_ANSWER_CHARS`),
        or empty. Backend text: the card keeps it for approvers (its evidence), never the model or the audit."""


class UpstreamTimeoutError(UpstreamError):
    """The backend did not answer within the deadline."""

    code = "UPSTREAM_TIMEOUT"


class UpstreamUnavailableError(UpstreamError):
    """The backend could not be reached, or answered that it is unavailable."""

    code = "UPSTREAM_UNAVAILABLE"


class UpstreamProtocolError(UpstreamError):
    """The backend answered something the adapter cannot understand."""

    code = "UPSTREAM_ERROR"


class UpstreamNotFoundError(UpstreamError):
    """The object does not exist for this caller (or belongs to another org: same answer)."""

    code = "NOT_FOUND"


class UpstreamRefusedError(UpstreamError):
    """The backend definitively refused the request (a business rule, e.g. a taken slot)."""

    code = "CONFLICT"

    def __init__(
        self, message: str, *, service: str, status: int | None = None, reason: str = "", answer: str = ""
    ) -> None:
        super().__init__(message, service=service, status=status, sent=True, answer=answer)
        self.reason = reason
        """The backend's machine code for the refusal (``slot_taken``), or empty. Backend text: it goes to
        people (the audit event's reason, the card's evidence), never to the model."""


class UpstreamRateLimitedError(UpstreamError):
    """The backend answered 429: it refused to process the request until `retry_after` seconds pass.

    A 429 says the request was not processed (RFC 6585), so for a write it means "not applied": the
    worker sends it again later with the same key (`policies.outcome.classify`).
    """

    code = "RATE_LIMITED"

    def __init__(self, message: str, *, service: str, retry_after: float, answer: str = "") -> None:
        super().__init__(message, service=service, status=429, sent=True, answer=answer)
        self.retry_after = retry_after
        """Seconds the backend asked for (its ``Retry-After``), bounded; a default when it gave none."""


class ManifestError(GatewayError, ValueError):
    """A manifest cannot become tools; `problems` lists every reason, each naming its place."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


class SchemaError(ManifestError):
    """A manifest's JSON Schema is outside the supported subset; `problems` says where and why."""


class SessionQuotaExceededError(GatewayError):
    """A key already holds `limit` MCP sessions in this process: raised when a new one is admitted, answered
    by the session manager as a refusal."""

    def __init__(self, key_id: str, *, limit: int, open_sessions: int, retry_after: int) -> None:
        super().__init__(f"key {key_id} holds {open_sessions} sessions (limit {limit})")
        self.key_id = key_id
        self.limit = limit
        self.open_sessions = open_sessions
        self.retry_after = retry_after
        """Whole seconds until the first of the key's sessions idles out (at least 1)."""
