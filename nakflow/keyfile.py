"""Key files: ``nakflow keygen`` writes them (a CURVE pair, or with ``--shared`` a shared
key), ``--shared-key`` reads a shared one.

A shared key file holds 32 random bytes as hex on one line, mode 0600. The key never
needs to travel in a Spark closure or a command line: each node reads it from its file.
Neither kind is ever overwritten: a new key locks out every peer that holds the old.
"""

from __future__ import annotations

import logging
import os
import secrets

from .errors import ConfigError
from .wire.auth import SharedKey

log = logging.getLogger("nakflow.keyfile")


def _key_path(directory: str, name: str, suffix: str) -> str:
    """``DIR/NAME.suffix``; raises ValueError for a name that is not a plain file name
    (``../x`` wrote outside DIR)."""
    if not name or name != os.path.basename(name) or name in (".", ".."):
        raise ValueError(f"key name {name!r} must be a plain file name (no directory)")
    return os.path.join(directory, f"{name}.{suffix}")


def _make_directory(directory: str) -> None:
    """Create ``directory`` if it is not there; raises NotADirectoryError naming it if
    it is a file (the error said a key file existed and would not be overwritten)."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(f"{directory} is not a directory")
    os.makedirs(directory, exist_ok=True)


def write_curve_pair(directory: str, name: str) -> tuple[str, str]:
    """Create ``DIR/NAME.key`` and ``DIR/NAME.key_secret`` (0600 from the start), a CURVE
    pair; raises FileExistsError if either exists (ZeroMQ's ``create_certificates``
    overwrote both, and wrote the secret world-readable before a chmod). Returns the
    paths (public, secret)."""
    import zmq.auth

    public, secret = _key_path(directory, name, "key"), _key_path(directory, name, "key_secret")
    there = [os.path.basename(p) for p in (public, secret) if os.path.exists(p)]
    if there:
        raise FileExistsError(f"{' and '.join(there)} exist{'s' if len(there) == 1 else ''} "
                              f"in {directory}")
    _make_directory(directory)
    old = os.umask(0o077)
    try:
        made = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(made[0], 0o644)  # the public half is for handing out
    return made[0], made[1]


def write_shared_key(directory: str, name: str) -> str:
    """Create ``DIR/NAME.shared_key`` (0600; never overwrites one). Returns its path."""
    path = _key_path(directory, name, "shared_key")
    _make_directory(directory)
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
    try:
        key = SharedKey.parse(text, max_age_s=max_age_s)
    except ValueError as exc:  # it named neither the file nor what makes a good one
        curve = (" (it is a CURVE certificate: those go to --curve-secret and "
                 "--curve-server-key)" if "ZeroMQ CURVE" in text else "")
        raise ConfigError(f"shared key file {path}: {exc}{curve}; 'nakflow keygen --shared "
                          "DIR NAME' makes one (DIR/NAME.shared_key)") from None
    if mode & 0o077:
        log.warning("shared key file %s is readable by others (chmod 600 it)", path)
    return key
