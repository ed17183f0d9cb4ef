"""Who may write voices, or load and unload models, straight through Triton.

`voice_registry`'s register, delete and import need an admin key (the request parameter `admin_key`) where the
server was given admin keys (`voxlane serve --admin-key`, the Helm chart's Secret); the gateway sends its own, having
checked its caller's. Its model control (`load_model`, `unload_model`: Triton's own repository API is closed on a
server with keys or on a network, docs/SERVING.md) needs an admin key, or the server's control key, which
`voxlane serve` makes at each start and hands to the registry in a file only its user reads. The server holds only
their SHA-256: no key is ever on a command line."""
from __future__ import annotations

import hashlib
import hmac

ADMIN_KEY_PARAMETER = "admin_key"  # the request parameter (gRPC and HTTP `parameters`) that carries the key
WRITE_ACTIONS = ("register", "delete", "import")
CONTROL_ACTIONS = ("load_model", "unload_model")  # `name` is the model's
CONTROL_KEY_FILE = "control_key_file"  # `voice_registry`'s parameter: the file that holds the server's control key


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def is_admin(key: object, hashes: tuple[str, ...]) -> bool:
    """Whether `key` (a request's parameter, any type) is one of the admin keys whose hashes are `hashes`."""
    if not isinstance(key, str) or not key:
        return False
    digest = key_hash(key)
    return any(hmac.compare_digest(digest, known) for known in hashes)
