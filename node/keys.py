"""Node identity key files.

The file format is py-libp2p's (and go-libp2p's) serialized private key: the protobuf
``PrivateKey{Type: Ed25519 (1), Data: 32-byte seed}`` = ``08 01 12 20 ‖ seed``, 36 bytes, mode 0600.
So ``libp2p.identity_utils.load_identity(path)`` opens our key files and yields the same peer id.
Keys are unencrypted at rest (as in libp2p): protect the file.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ledger import KeyPair
from node._errors import KeyFileError
from node.config import write_file_atomic

__all__ = ["KEY_FILE_BYTES", "generate_key", "load_key", "save_key"]

_PREFIX = b"\x08\x01\x12\x20"
KEY_FILE_BYTES = len(_PREFIX) + 32


def generate_key() -> KeyPair:
    """A fresh Ed25519 identity from the OS's CSPRNG."""
    return KeyPair.from_seed(secrets.token_bytes(32))


def save_key(key: KeyPair, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
    """Write ``key`` to ``path`` with mode 0600, atomically; refuses to overwrite unless told to.

    An existing symbolic link counts as an existing file: without ``overwrite`` it is refused, with it the
    link itself is replaced; a key is never written through a link to wherever it points."""
    write_file_atomic(path, _PREFIX + key.seed, overwrite=overwrite, mode=0o600, error=KeyFileError)


def load_key(path: str | os.PathLike[str]) -> KeyPair:
    """Read a key file; raises :class:`KeyFileError` naming the file and the problem."""
    p = Path(path)
    if not os.fspath(path):
        raise KeyFileError("'': no key file named (empty path)")
    try:
        st = p.stat()
    except FileNotFoundError:
        raise KeyFileError(f"{p}: no such key file") from None
    except OSError as e:
        raise KeyFileError(f"{p}: cannot read key file: {e.strerror}") from None
    except ValueError:  # a NUL byte in the name
        raise KeyFileError(f"{os.fspath(path)!r}: not a valid file name") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"{p}: not a regular file")
    if st.st_size != KEY_FILE_BYTES:
        raise KeyFileError(f"{p}: not an Ed25519 key file ({st.st_size} bytes, expected {KEY_FILE_BYTES})")
    if st.st_mode & 0o077:
        raise KeyFileError(f"{p}: permissions {stat.S_IMODE(st.st_mode):04o} are too open (expected 0600)")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise KeyFileError(f"{p}: cannot read key file: {e.strerror}") from None
    if not raw.startswith(_PREFIX):
        raise KeyFileError(f"{p}: not an Ed25519 key file (unknown key type header)")
    return KeyPair.from_seed(raw[len(_PREFIX) :])
