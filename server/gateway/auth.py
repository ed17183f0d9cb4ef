"""Who may call the gateway: API keys (`Authorization: Bearer KEY`, OpenAI's convention) and admin keys.

No key configured: the gateway is open, as for a local playground. API keys configured: every route but
`/health`, `/metrics` and the playground's page needs one of them. Admin keys configured: the voice
registry's writes (register, delete) need one of those; an admin key also passes where an API key does.
Without admin keys, registry writes take an API key. Keys come from flags, files (one per line, `#`
comments) and the environment (`VOXLANE_API_KEYS`, `VOXLANE_ADMIN_KEYS`, comma-separated): the way
`voxlane serve` hands them to its gateway, and the way a Helm chart mounts them from a Secret.
"""
from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from server.gateway.errors import INVALID_REQUEST, ApiError

API_KEYS_ENV, ADMIN_KEYS_ENV = "VOXLANE_API_KEYS", "VOXLANE_ADMIN_KEYS"
OPEN_PATHS = ("/health", "/metrics", "/")  # probes, scrapes and the playground's page (its calls need a key)
OPEN_PREFIXES = ("/playground/",)
_VOICES = "/v1/audio/voices"


@dataclass(frozen=True)
class Keys:
    api: frozenset[str] = frozenset()
    admin: frozenset[str] = frozenset()

    def __repr__(self) -> str:  # never in a log
        return f"Keys(api={len(self.api)}, admin={len(self.admin)})"

    @property
    def is_open(self) -> bool:
        return not self.api and not self.admin

    def env(self) -> dict[str, str]:
        """The environment that hands these keys to a child gateway (never its command line: `ps` shows it)."""
        return {API_KEYS_ENV: ",".join(sorted(self.api)), ADMIN_KEYS_ENV: ",".join(sorted(self.admin))}

    def check(self, authorization: str | None, needs_admin: bool) -> ApiError | None:
        """None when `authorization` (the header) may make this call, else the 401/403 to answer."""
        if self.is_open:
            return None
        key = bearer(authorization)
        if key is None:
            return ApiError(401, "no API key: send the header 'Authorization: Bearer YOUR_KEY'", INVALID_REQUEST,
                            code="missing_api_key")
        is_admin = _any_equal(key, self.admin)
        if needs_admin and self.admin:
            if is_admin:
                return None
            if _any_equal(key, self.api):
                return ApiError(403, "changing the voice registry needs an admin key", INVALID_REQUEST,
                                code="admin_key_required")
        elif is_admin or _any_equal(key, self.api):
            return None
        return ApiError(401, "incorrect API key provided", INVALID_REQUEST, code="invalid_api_key")


def bearer(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer KEY` header, or None."""
    scheme, _, key = (authorization or "").strip().partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


def _any_equal(key: str, keys: frozenset[str]) -> bool:
    """Compared in constant time, and against every key (no early exit that times which one matched)."""
    found = False
    for candidate in keys:
        found |= hmac.compare_digest(key.encode(), candidate.encode())
    return found


def needs_admin(request: web.Request) -> bool:
    """The voice registry's writes: register (POST) and delete."""
    return request.path.rstrip("/").startswith(_VOICES) and request.method in ("POST", "DELETE")


def is_open_path(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def read_keys(inline: list[str] | None, files: list[str] | None, env_name: str) -> tuple[str, ...]:
    """Keys from flags, then key files, then an environment variable, in that order and each once; a file
    that cannot be read is an OSError, a key shorter than 8 characters or holding a space a ValueError."""
    keys = [k.strip() for k in inline or []]
    for path in files or []:
        lines = Path(path).read_text().splitlines()
        keys += [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    keys += [k.strip() for k in os.environ.get(env_name, "").split(",")]
    found = tuple(dict.fromkeys(k for k in keys if k))
    if any(len(k) < 8 or any(c.isspace() for c in k) for k in found):
        raise ValueError("an API or admin key must be at least 8 characters with no spaces")
    return found
