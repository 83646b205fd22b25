"""Shared-key files: ``nakflow keygen --shared`` writes them, ``--shared-key`` reads them.

The file holds 32 random bytes as hex on one line, mode 0600. The key never needs
to travel in a Spark closure or a command line: each node reads it from its file.
"""

from __future__ import annotations

import logging
import os
import secrets

from .wire.auth import SharedKey

log = logging.getLogger("nakflow.keyfile")


def write_shared_key(directory: str, name: str) -> str:
    """Create ``DIR/NAME.shared_key`` (0600; never overwrites one). Returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.shared_key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


def load_shared_key(path: str, *, max_age_s: float | None = 300.0) -> SharedKey:
    """The SharedKey in ``path``. Raises ValueError (ConfigError) if it is unusable."""
    try:
        mode = os.stat(path).st_mode
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise ValueError(f"shared key file: {exc}") from None
    if mode & 0o077:
        log.warning("shared key file %s is readable by others (chmod 600 it)", path)
    return SharedKey.parse(text, max_age_s=max_age_s)
