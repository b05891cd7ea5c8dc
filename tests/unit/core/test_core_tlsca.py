"""crawlfleet.service.tlsca: the CA and host certificates are created, kept when nothing is due, and
renewed or re-issued when due — under an injected clock — and the CLI reports changed or not."""

from __future__ import annotations

import datetime
import json
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from crawlfleet.cli import main
from crawlfleet.service import tlsca

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_ca_and_host_are_created_with_private_keys_0600(tmp_path: Path) -> None:
    clock = Clock()
    made = tlsca.ensure_ca(tmp_path, now=clock)
    assert made.changed and made.reason == "CA created"
    assert mode(tmp_path / "ca.key") == 0o600
    issued = tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan", "10.0.0.5"], now=clock)
    assert issued.changed and mode(tmp_path / "hub1.key") == 0o600
    host = cert(tmp_path / "hub1.crt")
    san = host.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(n.value) for n in san} == {"hub1.lan", "10.0.0.5"}
    assert host.issuer == cert(tmp_path / "ca.crt").subject
    # Python's own verifier (strict flags) accepts the pair as a server certificate chain
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    context.load_cert_chain(tmp_path / "hub1.crt", tmp_path / "hub1.key")


def test_nothing_changes_when_nothing_is_due(tmp_path: Path) -> None:
    clock = Clock()
    tlsca.ensure_ca(tmp_path, now=clock)
    tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan"], now=clock)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    clock.now = START + datetime.timedelta(days=300)
    assert not tlsca.ensure_ca(tmp_path, now=clock).changed
    again = tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan"], now=clock)
    assert not again.changed and again.files == []
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    assert after == before


def test_a_host_certificate_is_renewed_within_renew_days_keeping_its_key(tmp_path: Path) -> None:
    clock = Clock()
    tlsca.ensure_ca(tmp_path, now=clock)
    tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan"], now=clock, days=90, renew_days=30)
    key = (tmp_path / "hub1.key").read_bytes()
    clock.now = START + datetime.timedelta(days=59)
    assert not tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan"], now=clock, days=90).changed
    clock.now = START + datetime.timedelta(days=61)
    renewed = tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan"], now=clock, days=90)
    assert renewed.changed and renewed.reason == "certificate renewed"
    assert cert(tmp_path / "hub1.crt").not_valid_after_utc > START + datetime.timedelta(days=140)
    assert (tmp_path / "hub1.key").read_bytes() == key


def test_new_names_or_a_new_ca_reissue(tmp_path: Path) -> None:
    clock = Clock()
    tlsca.ensure_ca(tmp_path, now=clock)
    tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan"], now=clock)
    moved = tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan", "10.0.0.6"], now=clock)
    assert moved.reason == "certificate re-issued: names changed"
    (tmp_path / "ca.key").unlink()
    (tmp_path / "ca.crt").unlink()
    tlsca.ensure_ca(tmp_path, now=clock)
    other = tlsca.ensure_host(tmp_path, "hub1", ["hub1.lan", "10.0.0.6"], now=clock)
    assert other.reason == "certificate re-issued: signed by another CA"


def test_the_ca_renews_within_renew_days(tmp_path: Path) -> None:
    clock = Clock()
    tlsca.ensure_ca(tmp_path, now=clock, days=100, renew_days=10)
    clock.now = START + datetime.timedelta(days=91)
    assert tlsca.ensure_ca(tmp_path, now=clock, days=100, renew_days=10).reason == "CA renewed"


def test_a_loose_key_mode_is_repaired(tmp_path: Path) -> None:
    tlsca.ensure_ca(tmp_path)
    (tmp_path / "ca.key").chmod(0o644)
    fixed = tlsca.ensure_ca(tmp_path)
    assert fixed.changed and mode(tmp_path / "ca.key") == 0o600


@pytest.mark.parametrize(
    ("names", "needle"),
    [([], "--name"), (["bad name"], "'bad name'"), (["a..b"], "'a..b'")],
)
def test_bad_names_are_one_line(tmp_path: Path, names: list[str], needle: str) -> None:
    tlsca.ensure_ca(tmp_path)
    with pytest.raises(tlsca.CaError, match=needle):
        tlsca.ensure_host(tmp_path, "hub1", names)


def test_the_cli_prints_changed_then_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ca", "init", "--dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is True
    issue = ["ca", "issue", "--dir", str(tmp_path), "--host", "hub1", "--name", "127.0.0.1"]
    assert main(issue) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is True
    assert main(issue) == 0
    assert json.loads(capsys.readouterr().out) == {
        "changed": False,
        "reason": "up to date",
        "files": [],
    }
    assert main(["ca", "issue", "--dir", str(tmp_path / "none"), "--host", "h", "--name", "x"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no CA in" in line
