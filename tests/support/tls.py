"""A throw-away CA and a server certificate for 127.0.0.1 / localhost / ::1 (trustme).

Usage::

    files = make_tls_files(tmp_path)
    uvicorn.run(app, ssl_certfile=files.cert_chain, ssl_keyfile=files.key)   # the server
    boto3.client("s3", endpoint_url="https://127.0.0.1:PORT", verify=str(files.ca_bundle))
    ssl.create_default_context(cafile=files.ca_bundle)                       # any other client
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

DEFAULT_NAMES = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class TLSFiles:
    cert_chain: Path  # server certificate followed by the CA chain (PEM), for the server
    key: Path  # server private key (PEM, unencrypted), for the server
    ca_bundle: Path  # the CA certificate (PEM), for clients (verify=, cafile=, AWS_CA_BUNDLE)
    names: tuple[str, ...]

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.cert_chain), str(self.key))
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_bundle))


def make_tls_files(directory: str | os.PathLike[str], names: tuple[str, ...] = DEFAULT_NAMES) -> TLSFiles:
    """Write ``server.pem`` (chain), ``server.key`` and ``ca.pem`` into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="Ferry test CA")
    cert = ca.issue_cert(*names, common_name=names[0])
    files = TLSFiles(
        cert_chain=d / "server.pem", key=d / "server.key", ca_bundle=d / "ca.pem", names=tuple(names)
    )
    cert.cert_chain_pems[0].write_to_path(str(files.cert_chain))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(files.cert_chain), append=True)
    cert.private_key_pem.write_to_path(str(files.key))
    os.chmod(files.key, 0o600)
    ca.cert_pem.write_to_path(str(files.ca_bundle))
    return files
