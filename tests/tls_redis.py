"""A real redis-server speaking only TLS, on a free loopback port, with certificates made for it here.

`openssl` makes a CA, a server certificate for 127.0.0.1 / localhost and a client certificate (Redis
asks for one: `tls-auth-clients yes`), plus a second CA nobody signed with (a client trusting only
it must be refused). `stop()` ends the server and removes the files.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from bench._procs import free_port, stop


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(folder: Path) -> None:
    """ca.crt/.key, other-ca.crt, server.crt/.key (IP 127.0.0.1, DNS localhost), client.crt/.key."""
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
                 "-days", "2", "-subj", f"/CN=switchyard test {ca}", cwd=folder)
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (folder / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN=switchyard test {name}", cwd=folder)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=folder)


class TlsRedis:
    """redis-server with `--port 0 --tls-port P`: nothing but TLS answers."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="switchyard-tls-redis-"))
        make_certificates(self.folder)
        self.port = free_port()
        f = self.folder
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cert-file", str(f / "server.crt"), "--tls-key-file", str(f / "server.key"),
             "--tls-ca-cert-file", str(f / "ca.crt"), "--tls-auth-clients", "yes",
             "--save", "", "--appendonly", "no", "--dir", str(f)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait()

    def url(self, *, ca: str = "ca.crt", client_cert: bool = True, db: int = 0) -> str:
        """A rediss:// URL with redis-py's TLS parameters (the CA file; the client certificate)."""
        query = {"ssl_ca_certs": str(self.folder / ca)}
        if client_cert:
            query.update(ssl_certfile=str(self.folder / "client.crt"), ssl_keyfile=str(self.folder / "client.key"))
        return f"rediss://127.0.0.1:{self.port}/{db}?{urlencode(query)}"

    def _wait(self, timeout: float = 20.0) -> None:
        import redis

        deadline = time.monotonic() + timeout
        while True:
            try:
                redis.Redis.from_url(self.url(), socket_timeout=2).ping()
                return
            except redis.ConnectionError as error:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the TLS redis-server did not start") from error
                time.sleep(0.05)

    def stop(self) -> None:
        stop(self.proc)
        shutil.rmtree(self.folder, ignore_errors=True)
