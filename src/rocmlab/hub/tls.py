"""TLS of the workshop hub: real Unix passwords never cross a network in clear.

A hub listening beyond loopback serves HTTPS: with the certificate and key given
(``--ssl-cert``/``--ssl-key``), else with a self-signed certificate made once in the hub's
state folder, whose SHA-256 fingerprint ``rocmlab hub`` prints for learners to compare with
what their browser shows. Plain HTTP beyond loopback needs ``--insecure-http``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from pathlib import Path

from ..errors import InputError

CERT_NAME, KEY_NAME = "hub-cert.pem", "hub-key.pem"
VALID_DAYS = 365


def is_loopback(ip: str) -> bool:
    """Whether a listen address reaches only this machine ("" is every address: no)."""
    if ip == "localhost":
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def choose(
    ip: str, state: Path, cert: str | None, key: str | None, insecure_http: bool, create: bool = True
) -> tuple[str, str]:
    """(certificate, key) the hub serves, or ("", "") for plain HTTP: the pair given, else beyond
    loopback (unless ``insecure_http``) the self-signed pair in ``state/tls``, made now when
    ``create`` (else by ``self_signed`` later)."""
    if bool(cert) != bool(key):
        raise InputError("--ssl-cert and --ssl-key go together")
    if cert:
        for path in (cert, key):
            if not Path(path).is_file():
                raise InputError(f"{path}: no such file")
        return str(Path(cert).resolve()), str(Path(key).resolve())
    if insecure_http or is_loopback(ip):
        return "", ""
    if not create:
        return str(state / "tls" / CERT_NAME), str(state / "tls" / KEY_NAME)
    return self_signed(state / "tls", ip)


def self_signed(folder: Path, ip: str = "") -> tuple[str, str]:
    """A self-signed certificate for this machine's names (kept and reused), and its key (mode 600)."""
    cert_path, key_path = folder / CERT_NAME, folder / KEY_NAME
    if cert_path.is_file() and key_path.is_file():
        return str(cert_path), str(key_path)
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    names = sorted({socket.getfqdn(), socket.gethostname(), "localhost"})
    addresses = {"127.0.0.1", *([ip] if ip and not is_loopback(ip) and ip not in ("0.0.0.0", "::") else [])}
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(addresses)]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


def fingerprint(cert: str) -> str:
    """SHA-256 fingerprint of a PEM certificate, as browsers show it (AA:BB:...)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    digest = x509.load_pem_x509_certificate(Path(cert).read_bytes()).fingerprint(hashes.SHA256())
    return ":".join(f"{byte:02X}" for byte in digest)
