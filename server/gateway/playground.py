"""The browser playground at `/`: plain HTML and JavaScript served as they are (no build step)."""
from __future__ import annotations

from pathlib import Path

from aiohttp import web

PLAYGROUND_DIR = Path(__file__).resolve().parent / "playground"


def add_playground_routes(app: web.Application) -> None:
    """`/` serves the page; `/playground/…` its script and style sheet."""
    app.router.add_get("/", _index)
    app.router.add_static("/playground", PLAYGROUND_DIR)


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(PLAYGROUND_DIR / "index.html", headers={"Cache-Control": "no-cache"})
