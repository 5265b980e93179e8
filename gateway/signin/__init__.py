"""Approvers' sign-in to the console: OpenID Connect (authorization code with PKCE) and the session it opens."""
