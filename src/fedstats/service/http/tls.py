"""A development certificate authority and server certificate (``fedstats server dev-certs``).

For tests and trials on one machine: a self-signed CA (ECDSA P-256, 10 years) and a server certificate for
the given host names and IP addresses, signed by it (1 year). Clients pass the CA file as ``--ca``. A real
deployment uses certificates from its own PKI.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fedstats._io import atomic_write_bytes

__all__ = ["make_dev_certificates"]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_dev_certificates(out: Path | str, hosts: list[str]) -> dict[str, Path]:
    """Write ``ca.pem``, ``ca-key.pem``, ``server.pem`` and ``server-key.pem`` into ``out``.

    Parameters
    ----------
    out : path
        Folder (created if missing).
    hosts : list of str
        DNS names and IP addresses the server certificate is valid for (at least one).

    Returns
    -------
    dict
        Paths by role: ``ca``, ``ca_key``, ``cert``, ``key``.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("fedstats development CA"))
        .issuer_name(_name("fedstats development CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {
        "ca": folder / "ca.pem",
        "ca_key": folder / "ca-key.pem",
        "cert": folder / "server.pem",
        "key": folder / "server-key.pem",
    }
    atomic_write_bytes(paths["ca"], ca.public_bytes(serialization.Encoding.PEM))
    atomic_write_bytes(paths["ca_key"], _pem_key(ca_key), mode=0o600)
    atomic_write_bytes(paths["cert"], cert.public_bytes(serialization.Encoding.PEM))
    atomic_write_bytes(paths["key"], _pem_key(key), mode=0o600)
    return paths
