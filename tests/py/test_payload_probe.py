"""payload_signing "auto" over plain http (issue 34): bodies are hashed into the signature
(SHA-256, about 0.6 CPU-s per GB on this CPU) until the server has shown that it refuses a
body whose x-amz-checksum-crc32c is wrong; from then on the bodies that carry a CRC-32C go as
UNSIGNED-PAYLOAD, protected by a checksum the server checks. The client learns it once, at its
first multipart upload, with one signed 1-byte UploadPart carrying the CRC-32C of another byte,
as part 1 (the upload's own part 1 replaces it: RGW 16 fails a completion that leaves an
uploaded part out).

- Ceph RGW 16 stores that probe (it does not check checksums): every part stays signed.
- A relay in front of RGW that refuses a wrong checksum as AWS S3 does (400 BadDigest) stands
  for a server that checks: after the probe the parts go unsigned, each with its CRC-32C,
  and the checkpoint loads exactly.
- "signed" and "unsigned" send no probe and sign every body, or none.
"""

from __future__ import annotations

import re
import threading

import pytest

from _relay import HttpRelay

torch = pytest.importorskip("torch")

MiB = 1 << 20
UNSIGNED = "UNSIGNED-PAYLOAD"


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _b64(crc: int) -> str:
    import base64

    return base64.b64encode(crc.to_bytes(4, "big")).decode()


class Recorder:
    """Records (part number, x-amz-content-sha256, x-amz-checksum-crc32c) of each UploadPart
    and PutObject; with checks=True answers a small body whose checksum is wrong with 400
    BadDigest, as AWS S3 does (large bodies go on to RGW: the C test test_part_checksums checks
    every part's CRC-32C)."""

    def __init__(self, checks: bool):
        self.checks = checks
        self.seen: list[tuple[int, str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, h, body):
        if h.command != "PUT":
            return None
        m = re.search(r"[?&]partNumber=(\d+)", h.path)
        crc = h.headers.get("x-amz-checksum-crc32c", "")
        with self.lock:
            self.seen.append((int(m.group(1)) if m else 0,
                              h.headers.get("x-amz-content-sha256", ""), crc))
        if self.checks and crc and len(body) < 1024 and _b64(_crc32c(body)) != crc:
            xml = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>BadDigest</Code>"
                   b"<Message>The CRC32C you specified did not match the calculated checksum."
                   b"</Message><RequestId>probe</RequestId></Error>")
            return 400, [("Content-Type", "application/xml")], xml
        return None

    def parts(self):
        return [s for s in self.seen if s[0] != 0 and not self.is_probe(s)]

    def probes(self):
        return [s for s in self.seen if self.is_probe(s)]

    @staticmethod
    def is_probe(s):
        return s[0] == 1 and s[2] == _b64(_crc32c(b"t"))


def _state():
    g = torch.Generator().manual_seed(3)
    return {f"w{i}": torch.randn(1 << 20, generator=g) for i in range(6)}  # 24 MiB: 3 parts


def _save_twice(s3_env, bucket, checks, signing=None):
    import s3direct

    rec = Recorder(checks)
    relay = HttpRelay(s3_env["AWS_ENDPOINT_URL"], intercept=rec)
    state = _state()
    try:
        with s3direct.Client(endpoint_url=relay.url, payload_signing=signing) as c:
            for k in ("a", "b"):
                uri = f"s3://{bucket}/probe/{k}.safetensors"
                s3direct.save(state, uri, client=c)
                got = s3direct.load(uri, client=c)
                assert sorted(got) == sorted(state)
                assert all(torch.equal(got[n], state[n]) for n in state)
                c.delete(uri)
    finally:
        relay.close()
    return rec


def _signed(h):
    return re.fullmatch(r"[0-9a-f]{64}", h) is not None


def test_server_that_ignores_checksums_keeps_every_part_signed(s3_env, bucket):
    rec = _save_twice(s3_env, bucket, checks=False)
    # One probe for the client (the second save asks nothing), stored by RGW 16.
    assert len(rec.probes()) == 1, rec.seen
    parts = rec.parts()
    assert len(parts) >= 6, rec.seen
    assert all(_signed(sha) and crc for _, sha, crc in parts), parts


def test_server_that_checks_checksums_gets_unsigned_parts(s3_env, bucket):
    rec = _save_twice(s3_env, bucket, checks=True)
    assert len(rec.probes()) == 1, rec.seen
    assert _signed(rec.probes()[0][1])  # the probe itself is signed: only its CRC can fail
    parts = rec.parts()
    assert len(parts) >= 6, rec.seen
    # Every part after the probe's answer: UNSIGNED-PAYLOAD with its CRC-32C.
    assert all(sha == UNSIGNED and crc for _, sha, crc in parts), parts


@pytest.mark.parametrize("signing", ["signed", "unsigned"])
def test_explicit_signing_sends_no_probe(s3_env, bucket, signing):
    rec = _save_twice(s3_env, bucket, checks=True, signing=signing)
    assert rec.probes() == [], rec.seen
    parts = rec.parts()
    assert len(parts) >= 6
    if signing == "signed":
        assert all(_signed(sha) for _, sha, _ in parts), parts
    else:
        assert all(sha == UNSIGNED for _, sha, _ in parts), parts
