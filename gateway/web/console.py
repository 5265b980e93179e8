"""The admin web console: one static page at ``/admin/`` with its script and stylesheet.

Who calls it: the composition root adds `console_routes()` after the admin and registry API
mounts, so ``/admin/api/...`` is always matched by those first. The console holds no data and
needs no credential to load: the page asks ``/admin/session`` (`gateway.signin.routes`) how the
approver signs in, through the company's identity provider (an HttpOnly session cookie the script
never sees, and a CSRF token on every change) or, in demo mode only, with a pasted admin key kept in
the tab's ``sessionStorage``, and calls the admin API from the browser. This module deliberately
knows nothing of cards, adapters or keys; it serves three fixed files, read once at startup.

Every file is served with a Content-Security-Policy that allows only this origin's script,
style and fetches (no inline code at all), and without caching: a console update is seen on the
next load, and no shared cache keeps a copy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

__all__ = ["CONSOLE_HEADERS", "console_routes"]

CONSOLE_HEADERS: dict[str, str] = {
    # require-trusted-types-for makes Chromium refuse any string assigned to an HTML sink
    # (innerHTML and friends), a second line behind the script never using them.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'; "
        "require-trusted-types-for 'script'; trusted-types 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
"""Headers of every console response."""

# URL path under /admin/ -> (file in gateway/web/console_assets, media type)
_ASSETS: dict[str, tuple[str, str]] = {
    "/admin/": ("index.html", "text/html; charset=utf-8"),
    "/admin/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/admin/console.css": ("console.css", "text/css; charset=utf-8"),
}


def _endpoint(content: bytes, media_type: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return Response(content, media_type=media_type, headers=CONSOLE_HEADERS)

    return endpoint


def console_routes() -> list[BaseRoute]:
    """``/admin/`` (the page), its two assets, and ``/admin`` redirecting to the page.

    Raises:
        FileNotFoundError: when the package was installed without its console files.
    """
    folder = files("gateway.web") / "console_assets"
    routes: list[BaseRoute] = [Route("/admin", _to_console, methods=["GET"])]
    for path, (name, media_type) in _ASSETS.items():
        content = (folder / name).read_bytes()
        routes.append(Route(path, _endpoint(content, media_type), methods=["GET"]))
    return routes


async def _to_console(request: Request) -> Response:
    return RedirectResponse("/admin/", status_code=308, headers={"cache-control": "no-store"})
