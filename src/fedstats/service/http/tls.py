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
from fedstats.errors import ParameterError

__all__ = ["check_server_tls", "make_dev_certificates", "read_pem_certificates"]


def read_pem_certificates(path: Path | str, option: str) -> list[x509.Certificate]:
    """The PEM certificates in file ``path`` (``--tls-cert``, ``--ca``), at least one.

    Raises
    ------
    ParameterError
        Naming ``option``, if the file cannot be read or holds no PEM certificate (a private key, a
        DER file, garbage).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ParameterError(option, str(path), f"a readable PEM file ({exc.strerror})") from None
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        what = " (this one holds a private key)" if b"PRIVATE KEY" in data else ""
        raise ParameterError(option, str(path), f"a PEM certificate file{what}")
    return certs


def check_server_tls(cert: Path | str, key: Path | str) -> None:
    """Check the server's ``--tls-cert`` and ``--tls-key`` before anything starts.

    Each file must be readable PEM of its kind (a certificate chain; an unencrypted private key), and the
    key must be the certificate's: the server refuses to start otherwise, with one line naming the option,
    rather than with a traceback from the TLS library after its database was created.

    Raises
    ------
    ParameterError
        If a file is missing or unreadable, the files are swapped, either is not PEM, or the key does not
        match the certificate.
    """
    if b"PRIVATE KEY" in _read(cert, "--tls-cert") and b"CERTIFICATE" in _read(key, "--tls-key"):
        raise ParameterError(
            "--tls-cert/--tls-key", f"{cert} / {key}", "the certificate, then the key (swapped)"
        )
    leaf = read_pem_certificates(cert, "--tls-cert")[0]
    key_pem = _read(key, "--tls-key")
    try:
        private = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ParameterError(
            "--tls-key", str(key), f"an unencrypted PEM private key ({str(exc).split('.')[0]})"
        ) from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if private.public_key().public_bytes(serialization.Encoding.DER, public) != (
        leaf.public_key().public_bytes(serialization.Encoding.DER, public)
    ):
        raise ParameterError(
            "--tls-key", str(key), f"the private key of the certificate in --tls-cert {cert}"
        )


def _read(path: Path | str, option: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ParameterError(option, str(path), f"a readable PEM file ({exc.strerror})") from None


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_dev_certificates(
    out: Path | str, hosts: list[str], *, force: bool = False
) -> dict[str, Path]:
    """Write ``ca.pem``, ``ca-key.pem``, ``server.pem`` and ``server-key.pem`` into ``out``.

    Parameters
    ----------
    out : path
        Folder (created if missing).
    hosts : list of str
        DNS names and IP addresses the server certificate is valid for (at least one; each 1 to 64
        characters, no spaces or control characters).
    force : bool
        Replace an existing ``ca.pem`` (every device pinning the old CA is then cut off). Default False.

    Returns
    -------
    dict
        Paths by role: ``ca``, ``ca_key``, ``cert``, ``key``.

    Raises
    ------
    ParameterError
        If ``out`` already holds a CA and ``force`` is False, a host is empty or malformed, or ``out``
        cannot be written.
    """
    if not hosts:
        raise ParameterError("--host", "", "at least one host name or IP address")
    for h in hosts:
        if not 1 <= len(h) <= 64 or any(c.isspace() or not c.isprintable() for c in h):
            raise ParameterError(
                "--host", h, "a host name or IP address of 1 to 64 characters, no spaces"
            )
    folder = Path(out)
    if (folder / "ca.pem").exists() and not force:
        raise ParameterError(
            "--out",
            str(folder),
            "a folder without a CA (this one has ca.pem: devices pinning it would be cut off; "
            "--force replaces it)",
        )
    try:
        return _write_dev_certificates(folder, hosts)
    except OSError as exc:
        raise ParameterError("--out", str(folder), f"a writable folder ({exc.strerror})") from None


def _write_dev_certificates(folder: Path, hosts: list[str]) -> dict[str, Path]:
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
