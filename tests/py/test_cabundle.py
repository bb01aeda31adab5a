"""Which CA file verifies an https endpoint when none is configured (src/s3/cabundle.h).

A loopback https server with a self-signed certificate (made by openssl) stands in for S3 and
answers every request with a NoSuchKey error: reaching it proves the TLS handshake passed,
a TLS error proves it did not. The wheel's bundled libcurl carries Debian's compiled-in path,
so the Python layer hands certifi's file to the library, which uses it (or SSL_CERT_FILE,
AWS_CA_BUNDLE) before the system's files."""

from __future__ import annotations

import http.server
import os
import shutil
import ssl
import subprocess
import threading

import pytest

NOSUCHKEY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code>'
             b"<Message>none here</Message></Error>")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _reply(self, body: bool):
        self.send_response(404)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(NOSUCHKEY)))
        self.end_headers()
        if body:
            self.wfile.write(NOSUCHKEY)

    def do_HEAD(self):  # noqa: N802 (http.server's names)
        self._reply(False)

    def do_GET(self):  # noqa: N802
        self._reply(True)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"https://127.0.0.1:{srv.server_address[1]}", str(cert)
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def clean_env(monkeypatch, tmp_path, lib_path):
    """No CA bundle from the environment or the shared files."""
    for k in ("AWS_CA_BUNDLE", "SSL_CERT_FILE", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


def _head(endpoint):
    import s3direct

    c = s3direct.Client(endpoint, access_key_id="AK", secret_access_key="SK",
                        addressing="path", max_attempts=1, connect_timeout_ms=5000, device=-1)
    try:
        c.head("bucket", "key")
    finally:
        c.close()


def _reached(endpoint):
    """The handshake passed: the server's 404 came back."""
    import s3direct

    with pytest.raises(s3direct.S3DirectError) as ei:
        _head(endpoint)
    assert ei.value.http_status == 404, ei.value


def _tls_fails(endpoint):
    import s3direct

    with pytest.raises(s3direct.TransferError) as ei:
        _head(endpoint)
    assert ei.value.name == "S3D_ETLS", ei.value


def test_certifi_is_used_when_nothing_is_configured(tls_server, clean_env, monkeypatch):
    certifi = pytest.importorskip("certifi")
    endpoint, cert = tls_server
    # The real certifi (or the system's file) does not trust the self-signed certificate.
    _tls_fails(endpoint)
    # certifi's file is what the client is given: pointing it at the certificate makes the
    # handshake pass.
    monkeypatch.setattr(certifi, "where", lambda: cert)
    _reached(endpoint)


def test_ssl_cert_file_and_aws_ca_bundle_come_first(tls_server, clean_env, monkeypatch):
    certifi = pytest.importorskip("certifi")
    endpoint, cert = tls_server
    real_certifi = certifi.where()
    monkeypatch.setattr(certifi, "where", lambda: cert)
    # SSL_CERT_FILE comes before certifi: certifi's real file (without the certificate)
    # there makes it fail.
    other = real_certifi
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    _tls_fails(endpoint)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    _reached(endpoint)
    # AWS_CA_BUNDLE comes before SSL_CERT_FILE.
    monkeypatch.setenv("AWS_CA_BUNDLE", str(other))
    _tls_fails(endpoint)
    monkeypatch.setenv("AWS_CA_BUNDLE", cert)
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    _reached(endpoint)


def test_cli_takes_the_default_bundle(tls_server, clean_env, monkeypatch):
    """The CLI binary gets certifi's file from its console script through
    S3D_DEFAULT_CA_BUNDLE; the wrapper sets it from certifi.where()."""
    import subprocess

    from test_cli import _cli_path

    cli = _cli_path()
    if cli is None:
        pytest.skip("the s3direct CLI is not built")
    endpoint, cert = tls_server
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AK", AWS_SECRET_ACCESS_KEY="SK",
               S3D_DEFAULT_CA_BUNDLE="/nonexistent.pem")
    args = [cli, "--endpoint-url", endpoint, "stat", "s3://bucket/key"]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "HTTP 404" not in r.stderr, r.stderr
    env["S3D_DEFAULT_CA_BUNDLE"] = cert
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    # The server's 404 came back: the handshake passed.
    assert r.returncode != 0 and "HTTP 404" in r.stderr, r.stderr


def test_cli_wrapper_passes_certifi(monkeypatch):
    certifi = pytest.importorskip("certifi")
    from s3direct import _cli

    seen = {}
    monkeypatch.delenv("S3D_DEFAULT_CA_BUNDLE", raising=False)
    monkeypatch.setattr(certifi, "where", lambda: "/some/cacert.pem")
    monkeypatch.setattr(os, "access", lambda p, m: True)
    monkeypatch.setattr(os, "execv", lambda exe, argv: seen.update(
        exe=exe, ca=os.environ.get("S3D_DEFAULT_CA_BUNDLE")))
    _cli.main()
    assert seen["ca"] == "/some/cacert.pem"


# An openssl.cnf that no client could connect to the test server with: it signs with RSA and
# this allows Ed25519 signatures only (curl sets the protocol versions and ciphers itself).
_BROKEN_OPENSSL_CNF = """openssl_conf = s3d_test
[s3d_test]
ssl_conf = s3d_ssl
[s3d_ssl]
system_default = s3d_sys
[s3d_sys]
SignatureAlgorithms = ed25519
"""

_HEAD_IN_A_NEW_PROCESS = """
import sys
import s3direct
c = s3direct.Client(sys.argv[1], access_key_id="AK", secret_access_key="SK",
                    addressing="path", max_attempts=1, connect_timeout_ms=5000, device=-1,
                    ca_bundle=sys.argv[2])
with open("/proc/self/maps") as f:
    if "/libcurl" in f.read():
        print("system libcurl")
        sys.exit(0)
try:
    c.head("bucket", "key")
except s3direct.S3DirectError as e:
    print(e.name, e.http_status, e)
"""


def test_static_openssl_reads_no_openssl_cnf(tls_server, clean_env, tmp_path):
    """The wheel's own OpenSSL (S3D_STATIC_DEPS, scripts/build-glibc228.sh) reads no
    openssl.cnf (issue 35, item 8): not OPENSSL_CONF's, not one at its compiled-in OPENSSLDIR.
    Both are looked up by the same load, which curl asked for unless configured with
    --disable-openssl-auto-load-config; OPENSSL_CONF is the way to plant one here without
    writing to the build folder. A build against the system's libcurl and OpenSSL reads the
    system's configuration by design: skipped there."""
    import subprocess
    import sys

    import s3direct

    endpoint, cert = tls_server
    cnf = tmp_path / "openssl.cnf"
    cnf.write_text(_BROKEN_OPENSSL_CNF)
    env = dict(os.environ, OPENSSL_CONF=str(cnf),
               PYTHONPATH=os.path.dirname(os.path.dirname(s3direct.__file__)))
    # The planted file does break a client that reads it: the system's openssl.
    if shutil.which("openssl") is not None:
        r = subprocess.run(["openssl", "s_client", "-connect", endpoint[len("https://"):],
                            "-CAfile", cert, "-verify_return_error"],
                           env=env, input="", capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-c", _HEAD_IN_A_NEW_PROCESS, endpoint, cert],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    if r.stdout.strip() == "system libcurl":
        pytest.skip("built against the system's libcurl, which reads the system's openssl.cnf")
    # The server's 404 came back: the handshake passed, the planted file was not read.
    assert r.stdout.startswith("S3D_EHTTP 404") or " 404 " in r.stdout, r.stdout
