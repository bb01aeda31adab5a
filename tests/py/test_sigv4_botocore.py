"""Randomized cross-check of the C SigV4 signer against botocore's S3 signers.

A few hundred random requests (methods, unicode keys with reserved characters, repeated and
empty query parameters, extra headers with odd spacing, signed and unsigned payloads, session
tokens, presigned URLs) are described to tests/bin/sigv4_tool, which builds the URL with
s3d_config_build_url and signs with s3d_sigv4_sign / s3d_sigv4_presign. The same requests are
signed by botocore's S3SigV4Auth / S3SigV4QueryAuth at the same fixed time; canonical
requests, signatures, Authorization headers and URLs must agree exactly. The expected URL is
built here independently (urllib.parse.quote), so the path encoding and addressing are checked
too. botocore's S3 signer takes the path as sent (no double encoding, no normalization).
"""
import datetime
import json
import os
import random
import subprocess
from unittest import mock
from urllib.parse import parse_qs, quote, urlsplit

import pytest

botocore = pytest.importorskip("botocore")
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

N_REQUESTS = 400


def tool_path():
    build = os.environ.get("S3D_BUILD_DIR")
    if not build:
        pytest.skip("S3D_BUILD_DIR is not set (run through tests/run-tests.sh BUILD_DIR)")
    path = os.path.join(build, "tests", "bin", "sigv4_tool")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (cmake --build BUILD_DIR --target sigv4_tool)")
    return path


ENDPOINTS = [
    # (url, scheme, host as in a URL, port or None, base path)
    ("http://127.0.0.1:8000", "http", "127.0.0.1", 8000, ""),
    ("https://s3.us-west-2.amazonaws.com", "https", "s3.us-west-2.amazonaws.com", None, ""),
    ("http://s3.eu-west-1.amazonaws.com", "http", "s3.eu-west-1.amazonaws.com", None, ""),
    ("http://[::1]:9000", "http", "[::1]", 9000, ""),
    ("https://minio.example.com:443", "https", "minio.example.com", None, ""),
    ("https://minio.example.com:8443", "https", "minio.example.com", 8443, ""),
    ("http://gw.local/s3/base", "http", "gw.local", None, "/s3/base"),
]
# (name, dns-compatible)
BUCKETS = [("examplebucket", True), ("my.dotted.bucket", True), ("b-1-2", True),
           ("Legacy_Bucket", False), ("abc", True), ("10.1.2.3", False)]
KEY_ALPHABET = (list("abcXYZ019-_.~") + [" ", "+", "%", "=", "&", "/", "?", "#", "!", "*",
                "'", "(", ")", ",", ";", ":", "@", "$", "[", "]", "\u00e9", "\u65e5",
                "\U0001F600", "//", "../", "%20", "~user"])
QUERY_NAMES = ["prefix", "list-type", "continuation-token", "uploadId", "partNumber",
               "max-keys", "delimiter", "x-id", "a b", "k=v", "\u00fc", "uploads", "Z", "a"]
HEADER_NAMES = ["Content-Type", "x-amz-meta-Note", "Range", "Content-MD5",
                "x-amz-checksum-crc32c", "x-amz-storage-class", "Cache-Control"]


def rand_text(rng, alphabet, lo, hi):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def is_virtual(addressing, host, scheme, bucket, dns_ok):
    if bucket is None or not dns_ok or host.startswith("[") or host[0].isdigit():
        return False
    if addressing == "virtual":
        return True
    if addressing == "path":
        return False
    if host.startswith("[") or not host.endswith("amazonaws.com"):
        return False
    return not (scheme == "https" and "." in bucket)


def make_case(rng, i):
    ep_url, scheme, host, port, base = rng.choice(ENDPOINTS)
    mode = "presign" if rng.random() < 0.25 else "header"
    if mode == "presign":
        method = rng.choice(["GET", "PUT", "HEAD", "DELETE"])
    else:
        method = rng.choice(["GET", "PUT", "HEAD", "DELETE", "POST"])
    bucket, dns_ok = rng.choice(BUCKETS)
    if mode == "header" and rng.random() < 0.05:
        bucket, dns_ok = None, False
    key = "" if bucket is None or rng.random() < 0.1 else rand_text(rng, KEY_ALPHABET, 1, 12)
    query = []
    for _ in range(rng.randint(0, 4)):
        name = rng.choice(QUERY_NAMES)
        value = "" if rng.random() < 0.25 else rand_text(rng, KEY_ALPHABET, 1, 8)
        query.append([name, value])
    if mode == "presign":
        # botocore's presigner folds repeated parameters (parse_qs into a dict).
        seen = {}
        for n, v in query:
            seen.setdefault(n, v)
        query = [[n, v] for n, v in seen.items()]
    elif query and rng.random() < 0.3:
        query.append([query[0][0], rand_text(rng, "abc", 0, 3)])  # repeated name
    headers = []
    if mode == "header":
        for name in rng.sample(HEADER_NAMES, rng.randint(0, 3)):
            value = rand_text(rng, list("abcdefXYZ0123=/+;-") + [" ", "  ", "\t"], 1, 16)
            if rng.random() < 0.3:
                value = "  " + value + " \t "
            if not value.strip():
                value = "v"
            headers.append([name, value])
    region = rng.choice(["us-east-1", "us-west-2", "eu-central-1", "default"])
    signed = mode == "header" and rng.random() < 0.6
    body = rand_text(rng, list("hello wrld\u00e9\n"), 0, 40) if signed else None
    token = None
    if rng.random() < 0.3:
        token = rand_text(rng, list("AbZ09+/="), 16, 64)
    when = rng.randint(946684800, 2082758399)  # 2000 .. 2035
    access = "AKID" + rand_text(rng, list("ABCDEFGHIJ0123456789"), 12, 16)
    secret = rand_text(rng, list("abcdefghijABCDEFGHIJ0123456789/+"), 40, 40)
    case = {
        "mode": mode, "method": method, "endpoint": ep_url,
        "addressing": rng.choice(["auto", "path", "virtual"]), "bucket": bucket, "key": key,
        "query": query, "headers": headers, "access_key": access, "secret_key": secret,
        "token": token, "region": region, "time": when,
        "expires": rng.randint(1, 604800),
    }
    if signed:
        case["body"] = body
    else:
        case["payload"] = "UNSIGNED-PAYLOAD"
    meta = {"scheme": scheme, "host": host, "port": port, "base": base, "dns_ok": dns_ok}
    return case, meta


def expected_url_parts(case, meta):
    vhost = is_virtual(case["addressing"], meta["host"], meta["scheme"], case["bucket"],
                       meta["dns_ok"])
    host = (case["bucket"] + "." if vhost else "") + meta["host"]
    if meta["port"] is not None:
        host += f":{meta['port']}"
    path = meta["base"]
    if case["bucket"] is not None and not vhost:
        path += "/" + case["bucket"]
    if case["key"]:
        path += "/" + quote(case["key"].encode("utf-8"), safe="/~")
    elif case["bucket"] is None or vhost:
        path += "/"
    return host, path


class RecordingS3SigV4Auth(S3SigV4Auth):
    def string_to_sign(self, request, canonical_request):
        self.recorded = canonical_request
        return super().string_to_sign(request, canonical_request)


class RecordingS3SigV4QueryAuth(S3SigV4QueryAuth):
    def string_to_sign(self, request, canonical_request):
        self.recorded = canonical_request
        return super().string_to_sign(request, canonical_request)


def botocore_sign(case, meta):
    host, path = expected_url_parts(case, meta)
    enc = lambda s: quote(s.encode("utf-8"), safe="-_.~")  # noqa: E731
    qs = "&".join(f"{enc(n)}={enc(v)}" for n, v in case["query"])
    url = f"{meta['scheme']}://{host}{path}" + (f"?{qs}" if qs else "")
    creds = Credentials(case["access_key"], case["secret_key"], case["token"])
    when = datetime.datetime.fromtimestamp(case["time"], datetime.timezone.utc).replace(
        tzinfo=None)
    if case["mode"] == "presign":
        req = AWSRequest(method=case["method"], url=url)
        auth = RecordingS3SigV4QueryAuth(creds, "s3", case["region"], expires=case["expires"])
    else:
        data = case["body"].encode("utf-8") if "body" in case else b""
        req = AWSRequest(method=case["method"], url=url, data=data,
                         headers={n: v for n, v in case["headers"]})
        req.context["client_config"] = Config(
            s3={"payload_signing_enabled": "body" in case})
        auth = RecordingS3SigV4Auth(creds, "s3", case["region"])
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        auth.add_auth(req)
    return req, auth.recorded, host, path


@pytest.fixture(scope="module")
def signed_pairs():
    tool = tool_path()
    rng = random.Random(20261202)
    cases = [make_case(rng, i) for i in range(N_REQUESTS)]
    stdin = "".join(json.dumps(c) + "\n" for c, _ in cases)
    res = subprocess.run([tool], input=stdin.encode(), capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    outs = [json.loads(line) for line in res.stdout.decode().splitlines()]
    assert len(outs) == len(cases)
    return [(c, m, o) for (c, m), o in zip(cases, outs)]


def test_cases_cover_the_space(signed_pairs):
    cases = [c for c, _, _ in signed_pairs]
    assert sum(c["mode"] == "presign" for c in cases) > 50
    assert sum(c["token"] is not None for c in cases) > 50
    assert sum("body" in c for c in cases) > 50
    assert sum(c["key"] == "" for c in cases) > 5
    assert sum(any(v == "" for _, v in c["query"]) for c in cases) > 20
    assert {c["method"] for c in cases} == {"GET", "PUT", "HEAD", "DELETE", "POST"}


def test_header_signing_matches_botocore(signed_pairs):
    n = 0
    for case, meta, out in signed_pairs:
        if case["mode"] != "header":
            continue
        assert "error" not in out, (case, out)
        req, creq, host, path = botocore_sign(case, meta)
        ctx = json.dumps(case)
        assert out["host"] == host, ctx
        assert urlsplit(out["url"]).path == path, ctx
        assert out["canonical_request"] == creq, ctx
        assert out["headers"]["Authorization"] == req.headers["Authorization"], ctx
        assert out["headers"]["x-amz-date"] == req.headers["X-Amz-Date"], ctx
        assert out["headers"]["x-amz-content-sha256"] == req.headers["X-Amz-Content-SHA256"]
        if case["token"]:
            assert out["headers"]["x-amz-security-token"] == case["token"]
        else:
            assert "x-amz-security-token" not in out["headers"]
        # The query we would send decodes to exactly the parameters given.
        sent = parse_qs(urlsplit(out["url"]).query, keep_blank_values=True)
        want = {}
        for k, v in case["query"]:
            want.setdefault(k, []).append(v)
        assert {k: sorted(v) for k, v in sent.items()} == {k: sorted(v) for k, v in want.items()}
        n += 1
    assert n > 200


def test_presigned_urls_match_botocore(signed_pairs):
    n = 0
    for case, meta, out in signed_pairs:
        if case["mode"] != "presign":
            continue
        assert "error" not in out, (case, out)
        req, creq, host, path = botocore_sign(case, meta)
        ctx = json.dumps(case)
        ours, theirs = urlsplit(out["url"]), urlsplit(req.url)
        assert ours.netloc == theirs.netloc == host, ctx
        assert ours.path == theirs.path == path, ctx
        assert out["canonical_request"] == creq, ctx
        assert parse_qs(ours.query, keep_blank_values=True) == parse_qs(
            theirs.query, keep_blank_values=True), ctx
        assert ours.query.endswith("&X-Amz-Signature=" + out["signature"])
        n += 1
    assert n > 50


def test_sts_assume_role_signing_matches_botocore():
    """The form-encoded STS AssumeRole POST of the credential chain (service "sts"), signed by
    sigv4_tool and by botocore's SigV4Auth at the same time. s3direct also signs
    x-amz-content-sha256 (STS accepts it), so botocore gets that header before signing."""
    import hashlib

    from botocore.auth import SigV4Auth

    tool = tool_path()
    body = ("Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3A"
            "role%2Fr&RoleSessionName=s3direct-session-1&DurationSeconds=1200&ExternalId=e%2Fx")
    ctype = "application/x-www-form-urlencoded; charset=utf-8"
    outs = []
    for token in (None, "FwoGZXIvYXdzEtoken/+="):
        case = {"mode": "header", "method": "POST", "endpoint": "https://sts.eu-west-1.amazonaws.com",
                "addressing": "path", "bucket": None, "key": None, "query": [],
                "headers": [["Content-Type", ctype]], "body": body,
                "access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                "token": token, "region": "eu-west-1", "time": 1796280000, "service": "sts"}
        res = subprocess.run([tool], input=(json.dumps(case) + "\n").encode(),
                             capture_output=True, timeout=60)
        assert res.returncode == 0, res.stderr.decode()
        out = json.loads(res.stdout)
        assert "error" not in out, out
        when = datetime.datetime.fromtimestamp(case["time"], datetime.timezone.utc).replace(
            tzinfo=None)
        req = AWSRequest(method="POST", url="https://sts.eu-west-1.amazonaws.com/",
                         data=body.encode(),
                         headers={"Content-Type": ctype,
                                  "X-Amz-Content-SHA256": hashlib.sha256(body.encode()).hexdigest()})
        auth = SigV4Auth(Credentials(case["access_key"], case["secret_key"], token), "sts",
                         "eu-west-1")
        with mock.patch("botocore.auth.get_current_datetime", return_value=when):
            auth.add_auth(req)
        assert "/eu-west-1/sts/aws4_request" in out["headers"]["Authorization"]
        assert out["headers"]["Authorization"] == req.headers["Authorization"], out
        outs.append(out)
    assert outs[0]["signature"] != outs[1]["signature"]
