"""The AWS credential chain, with botocore as the oracle.

For each provider the same environment and files are resolved by botocore
(Session.get_credentials: .method and the access key) and by s3direct (Client.config():
credential_source and access_key_id); they must agree. STS and instance metadata are served on
loopback by moto's server (an independent implementation); the container endpoint and the SSO
portal, which moto does not serve, by small servers here that follow the AWS documentation.
Ceph RGW stays the S3 server: the refresh test saves a checkpoint through it with credentials
from the loopback container endpoint that expire during the multipart upload.

moto's STS answers carry random keys (new ones per call), so against moto the two sides are
compared on the provider and the shape of the key (ASIA...); a loopback server with a fixed
STS answer then checks the exact key and what s3direct sent (form fields, the signature's
key and scope, no signature for web identity). Every other provider is compared on the exact
key.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import stat
import sys
import threading
import time
import datetime

import pytest

botocore_session = pytest.importorskip("botocore.session")
moto_server = pytest.importorskip("moto.server")

import s3direct  # noqa: E402
from s3direct import errors  # noqa: E402

ROLE = "arn:aws:iam::123456789012:role/s3direct-test"


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


@pytest.fixture(scope="module")
def moto_url(lib_path):
    port = _free_port()
    srv = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    srv.start()
    yield f"http://127.0.0.1:{port}"
    srv.stop()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        srv.requests.append((self.path, dict(self.headers)))
        status, body = srv.respond(self.path, self.headers)
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


    def do_PUT(self):
        srv = self.server
        srv.requests.append((self.path, dict(self.headers)))
        status, data = srv.respond_put(self.path, self.headers)
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        srv = self.server
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode()
        srv.requests.append((self.path, dict(self.headers), body))
        status, data = srv.respond_post(self.path, self.headers, body)
        self.send_response(status)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def json_server():
    """A loopback HTTP server whose answers the test sets: srv.respond(path, headers)."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.requests = []
    srv.respond = lambda path, headers: (404, {})
    srv.respond_post = lambda path, headers, body: (404, b"")
    srv.respond_put = lambda path, headers: (404, b"")
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def env(tmp_path, monkeypatch, moto_url):
    """A clean environment: no AWS_* variable, HOME in tmp_path, IMDS off, STS on moto."""
    saved = dict(os.environ)
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    yield tmp_path
    assert saved is not None


def botocore_resolve(profile=None, _tries=2):
    from botocore.exceptions import ClientError

    s = botocore_session.Session(profile=profile)
    c = s.get_credentials()
    if c is None:
        return None, None
    try:
        return c.method, c.get_frozen_credentials().access_key
    except ClientError:
        # Once in a full-suite run under load, moto's server answered botocore's
        # AssumeRoleWithWebIdentity with an error body botocore could not parse ("Unknown");
        # the oracle asks once more rather than fail the comparison on the mock's hiccup.
        if _tries <= 1:
            raise
        time.sleep(0.5)
        return botocore_resolve(profile, _tries - 1)


def s3direct_resolve(profile=None, _tries=2):
    with s3direct.Client(endpoint_url="http://127.0.0.1:9", profile=profile) as c:
        cfg = c.config()
    if cfg["credential_source"] == "none" and _tries > 1:
        # config() reports "none" when the chosen provider's call failed; under load moto's
        # STS has failed such a call (2026-12-03 clean-clone run: web identity, s3direct side;
        # the botocore oracle above met the same). Asked once more, as the oracle is; a real
        # resolution bug answers "none" both times.
        time.sleep(0.5)
        return s3direct_resolve(profile, _tries - 1)
    return cfg["credential_source"], cfg["access_key_id"]


def agree(profile=None, exact=True):
    b = botocore_resolve(profile)
    s = s3direct_resolve(profile)
    assert s[0] == b[0], f"provider: s3direct {s} botocore {b}"
    if exact:
        assert s[1] == b[1], f"key: s3direct {s} botocore {b}"
    else:
        assert s[1].startswith("ASIA") and b[1].startswith("ASIA"), (s, b)
    return s


def write(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


# ---- static providers and the order -------------------------------------------------------

def test_env_then_files(env, monkeypatch):
    write(env / "credentials", "[default]\naws_access_key_id = AKIDFILE\n"
          "aws_secret_access_key = s\n")
    write(env / "config", "[default]\naws_access_key_id = AKIDCONF\naws_secret_access_key = s\n")
    assert agree() == ("shared-credentials-file", "AKIDFILE")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert agree() == ("env", "AKIDENV")
    write(env / "credentials", "")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    assert agree() == ("config-file", "AKIDCONF")


def test_explicit_profile_skips_env(env, monkeypatch):
    write(env / "credentials", "[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = s\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert agree("dev") == ("shared-credentials-file", "AKIDDEV")
    # AWS_PROFILE does not skip them (botocore's rule).
    monkeypatch.setenv("AWS_PROFILE", "dev")
    assert agree() == ("env", "AKIDENV")


# ---- credential_process -------------------------------------------------------------------

def _process_script(env, name, body, code=0, stderr=""):
    p = env / name
    write(p, "#!/bin/sh\n" + (f"echo '{stderr}' >&2\n" if stderr else "") +
          f"cat <<'EOF'\n{body}\nEOF\nexit {code}\n", 0o700)
    return p


def test_credential_process(env, capfd):
    exp = iso(time.time() + 3600)
    script = _process_script(env, "proc.sh", json.dumps({
        "Version": 1, "AccessKeyId": "AKIDPROC", "SecretAccessKey": "s",
        "SessionToken": "tok", "Expiration": exp}), stderr="hello from the process")
    write(env / "config", f"[profile p]\ncredential_process = {script} --arg 'with space'\n")
    assert agree("p") == ("custom-process", "AKIDPROC")
    assert "hello from the process" in capfd.readouterr().err
    # Keys in the credentials file come first; config-file keys come after the process.
    write(env / "credentials", "[p]\naws_access_key_id = AKIDFILE\naws_secret_access_key = s\n")
    assert agree("p") == ("shared-credentials-file", "AKIDFILE")
    write(env / "credentials", "")
    write(env / "config", f"[profile p]\ncredential_process = {script}\n"
          "aws_access_key_id = AKIDCONF\naws_secret_access_key = s\n")
    assert agree("p") == ("custom-process", "AKIDPROC")


def test_cli_debug_names_the_provider(env):
    """`s3direct --debug` says which provider supplied which key (never the secret)."""
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.path.join(os.environ.get("S3D_BUILD_DIR", os.path.join(repo, "build")), "tools",
                       "s3direct")
    if not os.path.exists(exe):
        pytest.skip("the s3direct CLI is not built")
    script = _process_script(env, "proc.sh", json.dumps({
        "Version": 1, "AccessKeyId": "AKIDPROC", "SecretAccessKey": "very-secret"}))
    write(env / "config", f"[profile p]\ncredential_process = {script}\n")
    r = subprocess.run([exe, "--debug", "--profile", "p", "--endpoint-url", "http://127.0.0.1:9",
                        "ls", "s3://bucket/"], capture_output=True, text=True, timeout=60)
    assert "credentials from custom-process key AKIDPROC" in r.stderr, r.stderr
    assert "very-secret" not in r.stderr + r.stdout


def test_credential_process_failures(env, monkeypatch):
    bad = _process_script(env, "bad.sh", "{}", code=3)
    write(env / "config", f"[profile p]\ncredential_process = {bad}\n")
    with pytest.raises(errors.NoCredentials, match="exit status 3"):
        s3direct_resolve_and_sign("p")
    nover = _process_script(env, "nover.sh", json.dumps({"AccessKeyId": "A",
                                                          "SecretAccessKey": "s"}))
    write(env / "config", f"[profile p]\ncredential_process = {nover}\n")
    with pytest.raises(errors.NoCredentials, match="Version"):
        s3direct_resolve_and_sign("p")
    if os.environ.get("S3D_TEST_INSTALLED") == "1":
        return  # the wheel is built without the S3D_TEST_* hooks (src/common/env.h)
    slow = env / "slow.sh"
    write(slow, "#!/bin/sh\nsleep 5\n", 0o700)
    write(env / "config", f"[profile p]\ncredential_process = {slow}\n")
    monkeypatch.setenv("S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS", "300")
    t0 = time.monotonic()
    with pytest.raises(errors.NoCredentials, match="did not finish within 300 ms"):
        s3direct_resolve_and_sign("p")
    assert time.monotonic() - t0 < 3


def s3direct_resolve_and_sign(profile=None):
    """Creates a client and makes a signed request, so a provider failure surfaces."""
    with s3direct.Client(endpoint_url="http://127.0.0.1:9", profile=profile,
                         max_attempts=1) as c:
        c.head("bucket", "key")


# ---- STS ----------------------------------------------------------------------------------

def test_web_identity_env(env, monkeypatch):
    tok = env / "token"
    write(tok, "eyJ.test.token\n")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tok))
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE)
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "irsa")
    assert agree(exact=False)[0] == "assume-role-with-web-identity"
    # It comes before the credentials file (botocore order).
    write(env / "credentials", "[default]\naws_access_key_id = AKIDFILE\n"
          "aws_secret_access_key = s\n")
    assert agree(exact=False)[0] == "assume-role-with-web-identity"


def test_web_identity_profile(env):
    tok = env / "token"
    write(tok, "eyJ.test.token")
    write(env / "config", f"[profile w]\nrole_arn = {ROLE}\nweb_identity_token_file = {tok}\n")
    assert agree("w", exact=False)[0] == "assume-role-with-web-identity"


def test_assume_role_source_profile(env):
    write(env / "credentials", "[base]\naws_access_key_id = AKIDBASE\n"
          "aws_secret_access_key = s\n")
    write(env / "config", f"[profile r]\nrole_arn = {ROLE}\nsource_profile = base\n"
          "role_session_name = s3d\nexternal_id = ext\nduration_seconds = 1200\n"
          # chained: a role whose source is a role
          f"[profile r2]\nrole_arn = {ROLE}\nsource_profile = r\n")
    assert agree("r", exact=False)[0] == "assume-role"
    assert agree("r2", exact=False)[0] == "assume-role"


def test_assume_role_request(env, json_server, monkeypatch):
    """What goes to STS (moto checks neither parameters nor signatures): the form fields of
    the profile, signed for service sts in the client's region with the source profile's
    key, and the credentials of the answer used."""
    from urllib.parse import parse_qs

    answer = ("<AssumeRoleResponse><AssumeRoleResult><Credentials>"
              "<AccessKeyId>ASIAFROMSTS</AccessKeyId><SecretAccessKey>s</SecretAccessKey>"
              "<SessionToken>tok&amp;en</SessionToken>"
              f"<Expiration>{iso(time.time() + 3600)}</Expiration>"
              "</Credentials></AssumeRoleResult></AssumeRoleResponse>").encode()
    json_server.respond_post = lambda path, h, body: (200, answer)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", json_server.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    write(env / "credentials", "[base]\naws_access_key_id = AKIDBASE\n"
          "aws_secret_access_key = s\n")
    write(env / "config", f"[profile r]\nrole_arn = {ROLE}\nsource_profile = base\n"
          "role_session_name = s3d\nexternal_id = ext/1\nduration_seconds = 1200\n")
    assert agree("r") == ("assume-role", "ASIAFROMSTS")  # botocore asked the same server
    path, headers, body = json_server.requests[-1]
    form = {k: v[0] for k, v in parse_qs(body).items()}
    assert form == {"Action": "AssumeRole", "Version": "2011-06-15", "RoleArn": ROLE,
                    "RoleSessionName": "s3d", "ExternalId": "ext/1",
                    "DurationSeconds": "1200"}, form
    assert "Credential=AKIDBASE/" in headers["Authorization"]
    assert "/eu-west-1/sts/aws4_request" in headers["Authorization"]


def test_web_identity_request(env, json_server, monkeypatch):
    answer = ("<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
              "<Credentials><AccessKeyId>ASIAWEBID</AccessKeyId>"
              "<SecretAccessKey>s</SecretAccessKey><SessionToken>t</SessionToken>"
              f"<Expiration>{iso(time.time() + 3600)}</Expiration></Credentials>"
              "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>").encode()
    json_server.respond_post = lambda path, h, body: (200, answer)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", json_server.url)
    tok = env / "token"
    write(tok, "eyJ.k8s.token")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tok))
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE)
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "pod")
    assert agree() == ("assume-role-with-web-identity", "ASIAWEBID")
    from urllib.parse import parse_qs
    path, headers, body = json_server.requests[-1]
    form = {k: v[0] for k, v in parse_qs(body).items()}
    assert form["WebIdentityToken"] == "eyJ.k8s.token" and form["RoleSessionName"] == "pod"
    assert "Authorization" not in headers  # unsigned, as botocore sends it


def test_assume_role_credential_source_env(env, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    write(env / "config", f"[profile r]\nrole_arn = {ROLE}\ncredential_source = Environment\n")
    assert agree("r", exact=False)[0] == "assume-role"


def test_assume_role_mfa_refused(env):
    write(env / "credentials", "[base]\naws_access_key_id = A\naws_secret_access_key = s\n")
    write(env / "config", f"[profile r]\nrole_arn = {ROLE}\nsource_profile = base\n"
          "mfa_serial = arn:aws:iam::123456789012:mfa/me\n")
    with pytest.raises(errors.ConfigError, match="MFA"):
        s3direct_resolve_and_sign("r")


def test_sts_error_is_clear(env, json_server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", json_server.url)  # answers 404 to everything
    tok = env / "token"
    write(tok, "t")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tok))
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE)
    with pytest.raises(errors.NoCredentials, match="AssumeRoleWithWebIdentity.*HTTP"):
        s3direct_resolve_and_sign()


# ---- container and instance metadata ------------------------------------------------------

def _creds_json(key, lifetime=3600, token="tok"):
    return {"AccessKeyId": key, "SecretAccessKey": "s", "Token": token,
            "Expiration": iso(time.time() + lifetime)}


def test_container_full_uri(env, json_server, monkeypatch):
    json_server.respond = lambda path, h: ((200, _creds_json("AKIDCONT"))
                                           if h.get("Authorization") == "secret-token"
                                           else (401, {}))
    tokfile = env / "ctoken"
    write(tokfile, "secret-token")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", json_server.url + "/creds")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(tokfile))
    assert agree() == ("container-role", "AKIDCONT")
    monkeypatch.delenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "secret-token")
    assert agree() == ("container-role", "AKIDCONT")
    assert json_server.requests[-1][0] == "/creds"


def test_container_full_uri_refuses_remote_http(env, monkeypatch):
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/creds")
    with pytest.raises(errors.NoCredentials, match="loopback"):
        s3direct_resolve_and_sign()


def test_imds(env, moto_url, monkeypatch):
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", moto_url + "/")
    assert agree() == ("iam-role", "test-key")


def test_curl_verbose_redacts_provider_tokens(env, json_server, monkeypatch, capfd):
    # S3D_CURL_VERBOSE prints every header line; the IMDSv2 session token (issue 23 item 5)
    # is a credential and must not be among them.
    tok = b"imds-SECRET-" + os.urandom(8).hex().encode()
    json_server.respond_put = lambda path, h: ((200, tok) if path == "/latest/api/token"
                                               else (404, b""))

    def respond(path, h):
        if h.get("x-aws-ec2-metadata-token") != tok.decode():
            return 401, {}
        if path == "/latest/meta-data/iam/security-credentials/":
            return 200, b"role-x"
        return 200, dict(_creds_json("AKIDIMDS"), Code="Success")
    json_server.respond = respond
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", json_server.url + "/")
    monkeypatch.setenv("S3D_CURL_VERBOSE", "1")
    assert s3direct_resolve() == ("iam-role", "AKIDIMDS")
    err = capfd.readouterr().err
    assert "x-aws-ec2-metadata-token: [redacted]" in err.lower(), err[-3000:]
    assert tok.decode() not in err


def test_nothing_found_is_quick(env, monkeypatch):
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    # A closed port stands for a laptop with no metadata service.
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
    assert botocore_resolve() == (None, None)
    t0 = time.monotonic()
    with pytest.raises(errors.NoCredentials, match="no credentials found") as ei:
        s3direct_resolve_and_sign()
    print(ei.value)
    assert time.monotonic() - t0 < 2.5


# ---- SSO ----------------------------------------------------------------------------------

def _sso_cache(env, key, expires):
    d = env / ".aws" / "sso" / "cache"
    d.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha1(key.encode()).hexdigest() + ".json"
    (d / name).write_text(json.dumps({"startUrl": "https://example.awsapps.com/start",
                                      "region": "us-east-1", "accessToken": "sso-access",
                                      "expiresAt": iso(expires)}))


def test_sso(env, json_server, monkeypatch):
    def respond(path, h):
        if h.get("x-amz-sso_bearer_token") != "sso-access":
            return 401, {"message": "bad token"}
        return 200, {"roleCredentials": {"accessKeyId": "AKIDSSO", "secretAccessKey": "s",
                                         "sessionToken": "t",
                                         "expiration": int(time.time() + 3600) * 1000}}
    json_server.respond = respond
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSO", json_server.url)
    # botocore fixes its cache folder from HOME at import time: point it at this HOME.
    cache = str(env / ".aws" / "sso" / "cache")
    monkeypatch.setattr("botocore.credentials.SSOProvider._SSO_TOKEN_CACHE_DIR", cache)
    monkeypatch.setattr("botocore.tokens.SSOTokenProvider._SSO_TOKEN_CACHE_DIR", cache)
    write(env / "config", "[profile s]\nsso_session = corp\nsso_account_id = 111122223333\n"
          "sso_role_name = Dev\n[sso-session corp]\nsso_region = us-east-1\n"
          "sso_start_url = https://example.awsapps.com/start\n"
          "[profile legacy]\nsso_start_url = https://example.awsapps.com/start\n"
          "sso_region = us-east-1\nsso_account_id = 111122223333\nsso_role_name = Dev\n")
    _sso_cache(env, "corp", time.time() + 3600)
    _sso_cache(env, "https://example.awsapps.com/start", time.time() + 3600)
    assert agree("s") == ("sso", "AKIDSSO")
    assert agree("legacy") == ("sso", "AKIDSSO")
    assert "account_id=111122223333" in json_server.requests[-1][0]
    _sso_cache(env, "corp", time.time() - 60)
    with pytest.raises(errors.NoCredentials, match="aws sso login"):
        s3direct_resolve_and_sign("s")


# ---- refresh during a transfer ------------------------------------------------------------

def test_refresh_during_multipart_save(s3_env, bucket, env, json_server, monkeypatch):
    """Credentials that live 4 s, a save slowed to about 8 s: the container endpoint is asked
    again during the upload and the save completes."""
    torch = pytest.importorskip("torch")
    key_id, secret = s3_env["AWS_ACCESS_KEY_ID"], s3_env["AWS_SECRET_ACCESS_KEY"]
    json_server.respond = lambda path, h: (200, {"AccessKeyId": key_id, "SecretAccessKey": secret,
                                                 "Token": "", "Expiration":
                                                 iso(time.time() + 4)})
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", json_server.url + "/creds")
    c = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"], part_size=5 << 20,
                        max_concurrency=2)
    calls = []

    def slow(done, total):
        calls.append(done)
        if time.monotonic() - t0 < 7:
            time.sleep(0.1)

    arr = torch.arange(12 << 20, dtype=torch.int32).to(torch.uint8)
    t0 = time.monotonic()
    s3direct.save({"w": arr}, f"s3://{bucket}/refresh.safetensors", client=c, progress=slow)
    elapsed = time.monotonic() - t0
    fetches = len(json_server.requests)
    back = s3direct.load(f"s3://{bucket}/refresh.safetensors", client=c)
    assert torch.equal(back["w"], arr)
    c.close()
    print(f"save took {elapsed:.1f} s with 4 s credentials; {fetches} fetches")
    assert elapsed > 4.5, "the save was not slowed enough to outlive the credentials"
    assert fetches >= 2
