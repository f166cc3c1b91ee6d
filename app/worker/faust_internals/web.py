"""The routes Faust's web server serves, read from the aiohttp application behind it."""

from __future__ import annotations

from typing import Any

__all__ = ["web_routes"]


def web_routes(web: Any) -> list[tuple[str, str]]:
    """Every ``(method, path pattern)`` the worker's web server serves, sorted.

    Read from the aiohttp application behind Faust's web driver (``web.web_app``), so it
    lists Faust's own views beside ours, whoever registered them.
    """
    return sorted(
        {(route.method, route.resource.canonical) for route in web.web_app.router.routes()}
    )
