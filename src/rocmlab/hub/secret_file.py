"""A secret the live service keeps across restarts, in a file only its owner reads: made once,
never replaced (two processes starting at once end up with the same one)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def persistent_secret(path: Path, size: int = 32) -> bytes:
    """The secret in ``path`` (hex), made (mode 600) if there is none."""
    path = Path(path)
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except FileNotFoundError:
        pass
    value = secrets.token_bytes(size)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(value.hex() + "\n")
    try:
        os.link(temp, path)  # never replaces a secret another process made first
    except FileExistsError:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    finally:
        os.unlink(temp)
    return value
