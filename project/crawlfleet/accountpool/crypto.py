"""Passwords at rest: Fernet encryption with keys from configuration, never from the command line.

The key comes from ``ACCOUNTPOOL_SECRET_KEY`` or a key file (``--secret-key-file`` /
``ACCOUNTPOOL_SECRET_KEY_FILE``) so that it never shows in a process list. Several keys may be
given (separated by commas or whitespace): the first encrypts, all decrypt, which lets an
operator rotate the key without losing stored passwords.
"""

from __future__ import annotations

import re

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


class SecretKeyError(ValueError):
    """A secret key that cannot be used; the message never contains the key itself."""


class DecryptError(ValueError):
    """A stored password that the configured key cannot decrypt (key changed or data damaged)."""


def generate_key() -> str:
    """A new random key in the format ``ACCOUNTPOOL_SECRET_KEY`` expects."""
    return Fernet.generate_key().decode("ascii")


class PasswordBox:
    """Encrypts passwords for Redis and decrypts them for a login; holds the keys."""

    def __init__(self, keys_text: str, source: str = "ACCOUNTPOOL_SECRET_KEY") -> None:
        keys = [k for k in re.split(r"[\s,]+", keys_text.strip()) if k]
        if not keys:
            raise SecretKeyError(f"{source} is empty")
        fernets = []
        for index, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.encode("ascii")))
            except (ValueError, UnicodeEncodeError):
                # Never echo the key: it is a secret, and a near-miss leaks most of it.
                raise SecretKeyError(
                    f"{source}: key #{index} is not a Fernet key (32 url-safe base64-encoded "
                    "bytes; create one with `crawlfleet accountpool keygen`)"
                ) from None
        self._fernet = MultiFernet(fernets)

    def encrypt(self, password: str) -> bytes:
        return self._fernet.encrypt(password.encode("utf-8"))

    def decrypt(self, blob: bytes) -> str:
        try:
            return self._fernet.decrypt(blob).decode("utf-8")
        except (InvalidToken, UnicodeDecodeError):
            raise DecryptError(
                "cannot decrypt a stored password with the configured ACCOUNTPOOL_SECRET_KEY "
                "(was the key changed?)"
            ) from None
