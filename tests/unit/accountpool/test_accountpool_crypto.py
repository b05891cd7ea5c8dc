"""Passwords at rest: Fernet round trip, wrong keys, key rotation, keys never echoed."""

from __future__ import annotations

import pytest

from crawlfleet.accountpool.crypto import DecryptError, PasswordBox, SecretKeyError, generate_key


def test_round_trip_and_ciphertext_hides_password() -> None:
    box = PasswordBox(generate_key())
    blob = box.encrypt("s3cret-päss")
    assert b"s3cret" not in blob
    assert box.decrypt(blob) == "s3cret-päss"
    assert box.encrypt("same") != box.encrypt("same")  # random IV: equal passwords don't show


def test_wrong_key_gives_one_line_decrypt_error() -> None:
    blob = PasswordBox(generate_key()).encrypt("pw")
    with pytest.raises(DecryptError, match="ACCOUNTPOOL_SECRET_KEY") as info:
        PasswordBox(generate_key()).decrypt(blob)
    assert "\n" not in str(info.value)


def test_rotation_first_key_encrypts_all_keys_decrypt() -> None:
    old, new = generate_key(), generate_key()
    blob = PasswordBox(old).encrypt("pw")
    rotated = PasswordBox(f"{new}, {old}")
    assert rotated.decrypt(blob) == "pw"
    assert PasswordBox(new).decrypt(rotated.encrypt("pw2")) == "pw2"


@pytest.mark.parametrize("text", ["", "   ", "not-a-key", generate_key()[:-4], "ä" * 44])
def test_bad_keys_are_refused_without_echoing_them(text: str) -> None:
    with pytest.raises(SecretKeyError) as info:
        PasswordBox(text, "ACCOUNTPOOL_SECRET_KEY")
    message = str(info.value)
    assert "ACCOUNTPOOL_SECRET_KEY" in message
    if text.strip():
        assert text not in message


def test_garbage_ciphertext_is_a_decrypt_error() -> None:
    with pytest.raises(DecryptError):
        PasswordBox(generate_key()).decrypt(b"garbage")
