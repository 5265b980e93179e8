"""Approvers' passkeys: WebAuthn registration, and approvals signed over the card they approve."""
