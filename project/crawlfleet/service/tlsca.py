"""A small certificate authority for the hub's TLS: one CA, one certificate per host.

Used by the tests and, on the control node, by the playbooks (``crawlfleet ca init`` and
``crawlfleet ca issue``). Every step is idempotent: a file is written only when its content must
change, and each step says whether it changed anything (Ansible's ``changed_when``):

* ``ensure_ca(dir)``: ``ca.key`` (EC P-256, mode 0600) and ``ca.crt`` (self-signed), created when
  missing and re-issued with the same key when within ``renew_days`` of expiry.
* ``ensure_host(dir, host, names)``: ``<host>.key`` (0600) and ``<host>.crt`` signed by the CA,
  whose subject alternative names are ``names`` (DNS names and IP addresses). Re-issued when
  missing, within ``renew_days`` of expiry, with other names, or signed by another CA key.

The clock is a parameter (``now``) so expiry is testable without waiting.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Clock = Callable[[], datetime.datetime]
CA_DAYS = 3650
HOST_DAYS = 397
RENEW_DAYS = 30
CA_NAME = "crawlfleet CA"
_BACKDATE = datetime.timedelta(minutes=5)  # clocks of other hosts a little behind


class CaError(ValueError):
    """A CA directory, host or name the tool cannot work with (one line naming it)."""


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class Outcome:
    """What one step did: ``changed`` and why, and the files it wrote."""

    changed: bool = False
    reason: str = "up to date"
    files: list[str] = field(default_factory=list)


def write_private(path: Path, data: bytes, mode: int = 0o600) -> bool:
    """Write ``data`` to ``path`` atomically with ``mode``; False (untouched) when it is the same.

    A file with the right content but another mode gets its mode set (and counts as changed).
    """
    if path.exists() and path.read_bytes() == data:
        if path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
            return True
        return False
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(temporary, mode)
    os.replace(temporary, path)
    return True


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_or_create_key(path: Path, outcome: Outcome) -> ec.EllipticCurvePrivateKey:
    if path.exists():
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except ValueError:
            raise CaError(f"{path} is not a PEM private key without a passphrase") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CaError(f"{path} is not an EC private key (made by crawlfleet ca)")
        if path.stat().st_mode & 0o777 != 0o600:  # the key is kept, its mode repaired
            path.chmod(0o600)
            outcome.changed, outcome.reason = True, f"{path.name} mode set to 0600"
            outcome.files.append(str(path))
        return key
    key = ec.generate_private_key(ec.SECP256R1())
    write_private(path, _key_bytes(key))
    outcome.files.append(str(path))
    return key


def _load_cert(path: Path) -> x509.Certificate | None:
    if not path.exists():
        return None
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError:
        return None


def _expires_soon(cert: x509.Certificate, now: datetime.datetime, renew_days: int) -> bool:
    return cert.not_valid_after_utc - now <= datetime.timedelta(days=renew_days)


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    pem = serialization.Encoding.PEM
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    return cert.public_key().public_bytes(pem, info) == key.public_key().public_bytes(pem, info)


def _write_cert(path: Path, cert: x509.Certificate, outcome: Outcome, reason: str) -> None:
    write_private(path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    outcome.changed, outcome.reason = True, reason
    outcome.files.append(str(path))


def _check_days(days: int, renew_days: int) -> None:
    if days <= renew_days:
        raise CaError(f"--days ({days}) must be more than --renew-days ({renew_days})")


def _sign(
    subject: x509.Name,
    issuer: x509.Name,
    public: ec.EllipticCurvePublicKey,
    signer: ec.EllipticCurvePrivateKey,
    *,
    moment: datetime.datetime,
    not_after: datetime.datetime,
    ca: bool,
    extensions: Sequence[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    """A certificate valid from a little before ``moment``, with the basic constraints and key
    usage of a CA (signs certificates) or of a host (TLS), then ``extensions`` (each with its
    critical flag) in order.
    """
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(moment - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=not ca,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer, hashes.SHA256())


def ca_paths(directory: Path) -> tuple[Path, Path]:
    return directory / "ca.key", directory / "ca.crt"


def ensure_ca(
    directory: Path,
    *,
    name: str = CA_NAME,
    days: int = CA_DAYS,
    renew_days: int = RENEW_DAYS,
    now: Clock = utcnow,
) -> Outcome:
    """Create the CA in ``directory`` when missing; renew it when within ``renew_days``."""
    _check_days(days, renew_days)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    outcome = Outcome()
    key_path, cert_path = ca_paths(directory)
    key = _load_or_create_key(key_path, outcome)
    cert = _load_cert(cert_path)
    moment = now()
    if cert is not None and _same_key(cert, key) and not _expires_soon(cert, moment, renew_days):
        return outcome
    reason = "created" if cert is None else "renewed"
    if cert is not None and not _same_key(cert, key):
        reason = "re-issued for ca.key"
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    public = key.public_key()
    built = _sign(
        subject,
        subject,
        public,
        key,
        moment=moment,
        not_after=moment + datetime.timedelta(days=days),
        ca=True,
        extensions=[(x509.SubjectKeyIdentifier.from_public_key(public), False)],
    )
    _write_cert(cert_path, built, outcome, f"CA {reason}")
    return outcome


def parse_names(names: Sequence[str]) -> list[x509.GeneralName]:
    """``names`` as subject alternative names: IP addresses as such, the rest as DNS names."""
    if not names:
        raise CaError("a host certificate needs at least one name or IP address (--name)")
    parsed: list[x509.GeneralName] = []
    for text in dict.fromkeys(names):
        try:
            parsed.append(x509.IPAddress(ipaddress.ip_address(text)))
            continue
        except ValueError:
            pass
        label = text.removeprefix("*.")
        if not label or not all(
            part and len(part) < 64 and all(c.isalnum() or c == "-" for c in part)
            for part in label.split(".")
        ):
            raise CaError(f"--name {text[:60]!r} is neither a DNS name nor an IP address")
        parsed.append(x509.DNSName(text.lower()))
    return parsed


def _names_of(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n.value) for n in san}


def ensure_host(
    directory: Path,
    host: str,
    names: Sequence[str],
    *,
    out: Path | None = None,
    days: int = HOST_DAYS,
    renew_days: int = RENEW_DAYS,
    now: Clock = utcnow,
) -> Outcome:
    """``<host>.key`` and ``<host>.crt`` in ``out`` (default: the CA directory), up to date."""
    _check_days(days, renew_days)
    if not host or "/" in host or host.startswith("."):
        raise CaError(f"--host {host[:60]!r} must be a host name (it names the files)")
    key_path, cert_path = ca_paths(directory)
    ca_cert = _load_cert(cert_path)
    if ca_cert is None or not key_path.exists():
        raise CaError(f"no CA in {directory}: run crawlfleet ca init --dir {directory} first")
    ca_key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CaError(f"{key_path} is not an EC private key (made by crawlfleet ca)")
    sans = parse_names(names)
    target = out or directory
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    outcome = Outcome()
    key = _load_or_create_key(target / f"{host}.key", outcome)
    host_cert_path = target / f"{host}.crt"
    cert = _load_cert(host_cert_path)
    moment = now()
    wanted = {str(n.value) for n in sans}
    if cert is None:
        reason = "created"
    elif not _same_key(cert, key):
        reason = f"re-issued for {host}.key"
    elif cert.issuer != ca_cert.subject or _aki(cert) != _ski(ca_cert):
        reason = "re-issued: signed by another CA"
    elif _names_of(cert) != wanted:
        reason = "re-issued: names changed"
    elif _expires_soon(cert, moment, renew_days):
        reason = "renewed"
    else:
        return outcome
    not_after = min(moment + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    public = key.public_key()
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    built = _sign(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]),
        ca_cert.subject,
        public,
        ca_key,
        moment=moment,
        not_after=not_after,
        ca=False,
        extensions=[
            (x509.ExtendedKeyUsage(usage), False),
            (x509.SubjectAlternativeName(sans), False),
            (x509.SubjectKeyIdentifier.from_public_key(public), False),
            (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False),
        ],
    )
    _write_cert(host_cert_path, built, outcome, f"certificate {reason}")
    return outcome


def _ski(cert: x509.Certificate) -> bytes:
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        return b""


def _aki(cert: x509.Certificate) -> bytes:
    try:
        ext = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    except x509.ExtensionNotFound:
        return b""
    return ext.key_identifier or b""
