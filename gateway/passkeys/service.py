"""Approvers' passkeys: registering one, signing an approval with one, listing and removing them.

Who calls it: the admin API (the console's passkey pages and its signed approvals), the card
service (`gateway.approvals.service`, which asks `verify_approval` before recording an approval),
and the operator's CLI (`reset`). What it asks of the store: the approver's passkeys, their
counters, and the one pending registration challenge (`gateway.store.passkeys`). Every WebAuthn
message is parsed and verified by the `webauthn` library, never by our own code; user verification
is required at registration and at every approval.

Who may register: a person signed in through the identity provider (a session principal,
``ses_`` key id). An API key may register only in demo mode: otherwise whoever found an approver's
key could register their own authenticator and approve as them, which is what passkeys are for
preventing. Listing and removing are open to the approver's own session or key (removing only
lowers what they can do), and an operator resets an approver's passkeys from the CLI. Every
change and every refusal is audited.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, InvalidRegistrationResponse
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.views import ResultCode
from gateway.passkeys.assertion import ApprovalAssertion, SignedDecision, approval_challenge
from gateway.principal import SESSION_KEY_PREFIX, Principal
from gateway.printable import is_printable
from gateway.store.passkeys import PasskeyStore, StoredPasskey

__all__ = ["MAX_NAME", "PasskeyResult", "PasskeyService", "Relying"]

MAX_NAME = 64
"""Longest name an approver gives a passkey."""
_REGISTER_HINT = "register one in the console (Passkeys, Add a passkey), signed in with your company sign-in"


@dataclass(frozen=True, kw_only=True, slots=True)
class Relying:
    """The relying party the console is: its id (the host) and its origin, as browsers see them."""

    rp_id: str
    origin: str
    name: str = "Countersign"


@dataclass(frozen=True, kw_only=True, slots=True)
class PasskeyResult:
    """The answer to a passkey action: a stable code, one sentence, and what the action produced."""

    code: ResultCode
    message: str
    passkeys: tuple[StoredPasskey, ...] = ()
    options: Mapping[str, Any] | None = None
    """The WebAuthn options to hand to the browser (registration or an approval's assertion)."""
    assertion: ApprovalAssertion | None = None

    @property
    def ok(self) -> bool:
        return self.code is ResultCode.OK


class PasskeyService:
    """The passkeys of the approvers of one gateway, for one relying party."""

    def __init__(
        self,
        store: PasskeyStore,
        audit: AuditSink,
        *,
        relying: Relying,
        keys_may_register: bool,
        now_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self._audit = audit
        self.relying = relying
        self._keys_may_register = keys_may_register
        self._now_ms = now_ms

    # -- registration -----------------------------------------------------------------------------

    async def registration_options(self, admin: Principal) -> PasskeyResult:
        """Options for ``navigator.credentials.create``; the challenge waits for `register`."""
        refused = await self._may_register(admin)
        if refused is not None:
            return refused
        existing = await self._store.list(admin.org, admin.subject)
        challenge = secrets.token_bytes(32)
        options = generate_registration_options(
            rp_id=self.relying.rp_id,
            rp_name=self.relying.name,
            user_name=admin.subject,
            user_id=_user_handle(admin),
            user_display_name=admin.subject,
            challenge=challenge,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.PREFERRED,
                user_verification=UserVerificationRequirement.REQUIRED,
            ),
            exclude_credentials=[
                PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id)) for p in existing
            ],
        )
        await self._store.offer_challenge(admin.org, admin.subject, bytes_to_base64url(challenge))
        return PasskeyResult(
            code=ResultCode.OK, message="touch your authenticator", options=json.loads(options_to_json(options))
        )

    async def register(self, admin: Principal, credential: Mapping[str, Any], *, name: str) -> PasskeyResult:
        """Verify the authenticator's answer to the pending challenge and keep the passkey."""
        refused = await self._may_register(admin)
        if refused is not None:
            return refused
        name = name.strip()
        if not name or len(name) > MAX_NAME or not is_printable(name):
            return await self._refuse(
                admin, "passkey.register", ResultCode.VALIDATION_ERROR, f"name: 1 to {MAX_NAME} printable characters"
            )
        challenge = await self._store.take_challenge(admin.org, admin.subject)
        if challenge is None:
            return await self._refuse(
                admin,
                "passkey.register",
                ResultCode.CONFLICT,
                "no registration is waiting (it expired or was answered): start again",
            )
        try:
            verified = verify_registration_response(
                credential=dict(credential),
                expected_challenge=base64url_to_bytes(challenge),
                expected_rp_id=self.relying.rp_id,
                expected_origin=self.relying.origin,
                require_user_verification=True,
            )
        except (InvalidRegistrationResponse, KeyError, TypeError, ValueError) as error:
            return await self._refuse(
                admin,
                "passkey.register",
                ResultCode.PASSKEY_INVALID,
                f"the authenticator's answer did not verify: {_short(error)}",
            )
        passkey = StoredPasskey(
            credential_id=bytes_to_base64url(verified.credential_id),
            public_key=bytes_to_base64url(verified.credential_public_key),
            sign_count=verified.sign_count,
            name=name,
            created_ms=self._now_ms(),
            aaguid=verified.aaguid,
        )
        if not await self._store.add(admin.org, admin.subject, passkey):
            return await self._refuse(
                admin, "passkey.register", ResultCode.CONFLICT, "this passkey is registered already"
            )
        await self._record(admin, "passkey.register", ResultCode.OK, "", passkey.credential_id)
        return PasskeyResult(code=ResultCode.OK, message=f"passkey {name!r} registered", passkeys=(passkey,))

    # -- reading and removing ---------------------------------------------------------------------

    async def list(self, admin: Principal) -> Sequence[StoredPasskey]:
        return await self._store.list(admin.org, admin.subject)

    async def has_any(self, admin: Principal) -> bool:
        return bool(await self._store.list(admin.org, admin.subject))

    async def remove(self, admin: Principal, credential_id: str) -> PasskeyResult:
        """Forget one of the approver's own passkeys."""
        if not await self._store.remove(admin.org, admin.subject, credential_id):
            return await self._refuse(admin, "passkey.remove", ResultCode.NOT_FOUND, "no such passkey")
        await self._record(admin, "passkey.remove", ResultCode.OK, "", credential_id)
        return PasskeyResult(code=ResultCode.OK, message="passkey removed")

    async def reset(self, operator: Principal, *, org: str, subject: str) -> int:
        """Forget every passkey of the approver (`org`, `subject`): an operator's recovery step. How many."""
        count = await self._store.reset(org, subject)
        await self._audit.record(
            AuditEvent(
                action="passkey.reset",
                outcome="ok",
                subject=operator.subject,
                org=org,
                key_id=operator.key_id,
                extra={"approver": subject[:200], "removed": str(count)},
            )
        )
        return count

    # -- approvals --------------------------------------------------------------------------------

    async def assertion_options(
        self, admin: Principal, *, card_id: str, version: int, args_hash: str, decision: SignedDecision
    ) -> PasskeyResult:
        """Options for ``navigator.credentials.get`` whose challenge is the card's (`approval_challenge`)."""
        passkeys = await self._store.list(admin.org, admin.subject)
        if not passkeys:
            return await self._refuse(
                admin,
                "passkey.challenge",
                ResultCode.PASSKEY_REQUIRED,
                f"you have no passkey registered: {_REGISTER_HINT}",
            )
        challenge = approval_challenge(card_id=card_id, version=version, args_hash=args_hash, decision=decision)
        options = generate_authentication_options(
            rp_id=self.relying.rp_id,
            challenge=challenge,
            allow_credentials=[PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id)) for p in passkeys],
            user_verification=UserVerificationRequirement.REQUIRED,
        )
        return PasskeyResult(
            code=ResultCode.OK, message="touch your authenticator", options=json.loads(options_to_json(options))
        )

    async def verify_approval(
        self, admin: Principal, credential: Mapping[str, Any], *, card_id: str, version: int, args_hash: str
    ) -> PasskeyResult:
        """Verify an assertion over the approval of the card as reviewed, and move the passkey's counter.

        OK carries the `ApprovalAssertion` to record with the approval. PASSKEY_INVALID: not one of the
        approver's passkeys, a challenge of another card, version or decision, no user verification, or
        a counter that did not move forward (a replay). Refusals are audited by the card service.
        """
        credential_id = credential.get("id") if isinstance(credential, Mapping) else None
        if not isinstance(credential_id, str) or not credential_id:
            return PasskeyResult(code=ResultCode.PASSKEY_INVALID, message="passkey: not a WebAuthn assertion")
        stored = await self._store.get(admin.org, admin.subject, credential_id)
        if stored is None:
            return PasskeyResult(
                code=ResultCode.PASSKEY_INVALID, message=f"passkey: not one of yours; {_REGISTER_HINT}"
            )
        challenge = approval_challenge(card_id=card_id, version=version, args_hash=args_hash, decision="approve")
        try:
            verified = verify_authentication_response(
                credential=dict(credential),
                expected_challenge=challenge,
                expected_rp_id=self.relying.rp_id,
                expected_origin=self.relying.origin,
                credential_public_key=base64url_to_bytes(stored.public_key),
                credential_current_sign_count=stored.sign_count,
                require_user_verification=True,
            )
        except (InvalidAuthenticationResponse, KeyError, TypeError, ValueError) as error:
            # The library's words name the check (challenge, counter, signature); they are ours, not the caller's.
            return PasskeyResult(code=ResultCode.PASSKEY_INVALID, message=f"passkey: {_short(error)}")
        moved = await self._store.advance(admin.org, admin.subject, credential_id, verified.new_sign_count)
        if moved != "OK":
            return PasskeyResult(
                code=ResultCode.PASSKEY_INVALID,
                message="passkey: its signature counter did not move forward (a replay)",
            )
        response = credential["response"]
        assertion = ApprovalAssertion(
            approver=admin.subject,
            card_id=card_id,
            version=version,
            args_hash=args_hash,
            decision="approve",
            credential_id=credential_id,
            public_key=stored.public_key,
            authenticator_data=str(response["authenticatorData"]),
            client_data_json=str(response["clientDataJSON"]),
            signature=str(response["signature"]),
            sign_count=verified.new_sign_count,
            rp_id=self.relying.rp_id,
            origin=self.relying.origin,
        )
        return PasskeyResult(code=ResultCode.OK, message="passkey verified", assertion=assertion)

    # -- helpers ----------------------------------------------------------------------------------

    async def _may_register(self, admin: Principal) -> PasskeyResult | None:
        if admin.key_id.startswith(SESSION_KEY_PREFIX) or self._keys_may_register:
            return None
        return await self._refuse(
            admin,
            "passkey.register",
            ResultCode.PERMISSION_DENIED,
            "a passkey is registered only from the console signed in with your company sign-in, not with an API key",
        )

    async def _refuse(self, admin: Principal, action: str, code: ResultCode, message: str) -> PasskeyResult:
        await self._record(admin, action, code, message, "")
        return PasskeyResult(code=code, message=message)

    async def _record(self, admin: Principal, action: str, code: ResultCode, reason: str, credential_id: str) -> None:
        extra = {"credential_id": credential_id[:200]} if credential_id else {}
        await self._audit.record(
            AuditEvent.by(
                admin,
                action=action,
                outcome="ok" if code is ResultCode.OK else "deny",
                code="" if code is ResultCode.OK else code.value,
                reason=reason,
                extra=extra,
            )
        )


def _user_handle(admin: Principal) -> bytes:
    # A stable, opaque handle per approver (WebAuthn forbids personal data in it).
    return hashlib.sha256(f"{admin.org}|{admin.subject}".encode()).digest()


def _short(error: Exception) -> str:
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__
