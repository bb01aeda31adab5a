"""s3d_copy_object copies on the server (UploadPartCopy) and proves the bytes by their MD5
ETags (issue 37): the copy of a single-part source is one UploadPartCopy whose ETag must be the
source's; the CLI's s3-to-s3 `cp` and the fsspec filesystem's `cp_file` go through it. A
counting relay (_relay.HttpRelay) between the client and Ceph RGW measures what crosses the
client: a few KB instead of the object. A relay that rewrites the part's ETag (a source
replaced mid-copy, as Ceph RGW 16 ignores x-amz-copy-source-if-match) must make the copy fail
with the destination unchanged and no upload left; one that refuses UploadPartCopy (501) makes
it go through the client, as before. Ceph RGW 16 ignores HEAD ?partNumber, so a multipart
source's part sizes are guessed from its ETag's part count (s3direct's and the AWS CLI's part
sizes), the ETag checked before Complete proving the guess; a wrong guess is aborted and the
copy goes through the client. test_moto.py copies uneven parts on a server that tells them."""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import time
import urllib.parse

import pytest

import s3direct
from _relay import HttpRelay
from test_cli import MiB, cli, data, run  # noqa: F401  (cli is a fixture)


class Counter:
    """A relay to the server that counts the body bytes crossing it both ways; fail_copy:
    answer UploadPartCopy with 501 NotImplemented; copy_etag: the ETag UploadPartCopy
    answers are rewritten to (a source replaced after the HEAD, on a server that ignores
    x-amz-copy-source-if-match); precondition: answer it with 412 (one that honours it);
    copy_delay: seconds UploadPartCopy is held before it is forwarded (a server copying a
    big part, no byte flowing meanwhile)."""

    def __init__(self, endpoint, fail_copy=False, copy_etag=None, precondition=False,
                 copy_delay=0.0):
        u = urllib.parse.urlsplit(endpoint)
        if u.scheme != "http":
            pytest.skip("the counting relay speaks plain http only")
        self.up = self.down = self.copies = 0
        self.fail_copy, self.copy_etag, self.precondition = fail_copy, copy_etag, precondition
        self.copy_delay = copy_delay
        self.relay = HttpRelay(endpoint, intercept=self._intercept, rewrite=self._rewrite)
        self.url = self.relay.url

    def _intercept(self, h, body):
        self.up += len(body)
        if "x-amz-copy-source" in h.headers:
            self.copies += 1
            if self.fail_copy:
                err = (b"<?xml version=\"1.0\"?><Error><Code>NotImplemented</Code><Message>"
                       b"no UploadPartCopy here</Message></Error>")
                return 501, [("Content-Type", "application/xml")], err
            if self.precondition:
                err = (b"<?xml version=\"1.0\"?><Error><Code>PreconditionFailed</Code>"
                       b"<Message>At least one of the pre-conditions you specified did not "
                       b"hold</Message></Error>")
                return 412, [("Content-Type", "application/xml")], err
            time.sleep(self.copy_delay)
        return None

    def _rewrite(self, h, status, body):
        self.down += len(body)
        if self.copy_etag and "x-amz-copy-source" in h.headers and status == 200:
            text = body.decode()
            a, b = text.index("<ETag>") + 6, text.index("</ETag>")
            body = (text[:a] + self.copy_etag + text[b:]).encode()
        return body

    @property
    def total(self):
        return self.up + self.down

    def close(self):
        self.relay.close()


@pytest.fixture
def counter(s3_env):
    made = []

    def make(**kw):
        c = Counter(s3_env["AWS_ENDPOINT_URL"], **kw)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


def _client(url):
    return s3direct.Client(endpoint_url=url, part_size=8 * MiB)


def _md5_of_md5(etag):
    """The ETag of a one-part multipart upload of an object whose MD5 is etag."""
    return '"%s-1"' % hashlib.md5(bytes.fromhex(etag.strip('"'))).hexdigest()


def _tag(boto3_client, bucket, key):
    tags = boto3_client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    return {t["Key"]: t["Value"] for t in tags}.get("s3direct-crc32c")


def _no_uploads(boto3_client, bucket):
    return boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def _copy_logged(url, caplog, bucket, src, dst):
    """Copies through a client of url; the info lines that say why a copy went through the
    client."""
    with caplog.at_level(logging.INFO, logger="s3direct"):
        _client(url).copy_object(bucket, src, bucket, dst)
    return [r.getMessage() for r in caplog.records if "goes through the client" in r.getMessage()]


SIZE = 40 * MiB


def test_single_part_copy_stays_on_the_server(s3_env, bucket, boto3_client, counter):
    body = data(SIZE, seed=11)
    # s3direct's own single PUT: its CRC-32C travels as metadata, and must reach the copy.
    s3direct.Client(multipart_threshold=64 * MiB).upload_bytes(bucket, "src.bin", body)
    src = boto3_client.head_object(Bucket=bucket, Key="src.bin")
    crc_hex = base64.b64decode(src["Metadata"]["s3d-crc32c"]).hex()
    relay = counter()
    _client(relay.url).copy_object(bucket, "src.bin", bucket, "dst.bin")
    assert relay.copies == 1
    assert relay.total < 64 << 10, (relay.up, relay.down)  # 40 MiB stayed on the server
    got = boto3_client.get_object(Bucket=bucket, Key="dst.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == _md5_of_md5(src["ETag"])
    # The source's CRC-32C, bound to the copy's ETag: a later download is still checked.
    assert _tag(boto3_client, bucket, "dst.bin") == f"{crc_hex} {got['ETag'].strip(chr(34))}"
    assert s3direct.Client().download_bytes(bucket, "dst.bin") == body


def test_source_replaced_mid_copy_fails_and_keeps_the_destination(s3_env, bucket, boto3_client,
                                                                  counter):
    boto3_client.put_object(Bucket=bucket, Key="src.bin", Body=data(SIZE, seed=13))
    boto3_client.put_object(Bucket=bucket, Key="dst.bin", Body=b"previous")
    # The server copied another version: its part ETag is not the source's.
    relay = counter(copy_etag='"%s"' % hashlib.md5(b"another version").hexdigest())
    with pytest.raises(s3direct.TransferError) as e:
        _client(relay.url).copy_object(bucket, "src.bin", bucket, "dst.bin")
    msg = str(e.value)
    assert "replaced during the copy" in msg and "nothing was written" in msg, msg
    assert boto3_client.get_object(Bucket=bucket, Key="dst.bin")["Body"].read() == b"previous"
    assert _no_uploads(boto3_client, bucket)


def test_copy_refused_by_its_if_match_fails_as_changed(s3_env, bucket, boto3_client, counter):
    """A server that honours x-amz-copy-source-if-match (AWS, moto) answers 412 for a replaced
    source: the copy fails as changed, not as an HTTP error, and is not tried again."""
    boto3_client.put_object(Bucket=bucket, Key="src.bin", Body=data(SIZE, seed=18))
    boto3_client.put_object(Bucket=bucket, Key="dst.bin", Body=b"previous")
    relay = counter(precondition=True)
    with pytest.raises(s3direct.TransferError) as e:
        _client(relay.url).copy_object(bucket, "src.bin", bucket, "dst.bin")
    msg = str(e.value)
    assert "replaced during the copy" in msg and "nothing was written" in msg, msg
    assert relay.copies == 1
    assert boto3_client.get_object(Bucket=bucket, Key="dst.bin")["Body"].read() == b"previous"
    assert _no_uploads(boto3_client, bucket)


def test_refused_part_copy_goes_through_the_client(s3_env, bucket, boto3_client, counter,
                                                   caplog):
    body = data(SIZE, seed=14)
    boto3_client.put_object(Bucket=bucket, Key="src.bin", Body=body)
    relay = counter(fail_copy=True)
    why = _copy_logged(relay.url, caplog, bucket, "src.bin", "dst.bin")
    assert len(why) == 1 and "refused UploadPartCopy" in why[0] and "501" in why[0], why
    assert relay.copies == 1  # not retried: 501 is an answer
    assert relay.total >= 2 * SIZE  # read and written by the client
    assert boto3_client.get_object(Bucket=bucket, Key="dst.bin")["Body"].read() == body
    assert _no_uploads(boto3_client, bucket)


def _multipart_source(boto3_client, bucket, key, sizes, seed):
    """An object boto3 uploads in parts of the given sizes; its bytes."""
    body = data(sum(sizes), seed=seed)
    u = boto3_client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts, off = [], 0
    for i, n in enumerate(sizes):
        r = boto3_client.upload_part(Bucket=bucket, Key=key, UploadId=u, PartNumber=i + 1,
                                     Body=body[off:off + n])
        parts.append({"PartNumber": i + 1, "ETag": r["ETag"]})
        off += n
    boto3_client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=u,
                                           MultipartUpload={"Parts": parts})
    return body


UNEVEN = [5 * MiB, 7 * MiB, 8 * MiB, 6 * MiB, 9 * MiB, 5 * MiB, 123457]


def _untold(boto3_client, bucket, key):
    h = boto3_client.head_object(Bucket=bucket, Key=key, PartNumber=1)
    if "PartsCount" in h:
        pytest.skip("this server tells part sizes: test_moto.py's cases apply")


def _boto3_upload(boto3_client, bucket, key, size, chunk, seed):
    from boto3.s3.transfer import TransferConfig

    body = data(size, seed=seed)
    cfg = TransferConfig(multipart_threshold=chunk, multipart_chunksize=chunk)
    boto3_client.upload_fileobj(io.BytesIO(body), bucket, key, Config=cfg)
    return body


def _s3direct_upload(boto3_client, bucket, key, size, part_size, seed):
    body = data(size, seed=seed)
    kw = {"part_size": part_size} if part_size else {}
    s3direct.Client(multipart_threshold=8 * MiB, **kw).upload_bytes(bucket, key, body)
    return body


# (how the source is written, its size, its parts): the AWS CLI's (boto3's) 8 MiB parts,
# s3direct's default (8 MiB) and 6 MiB parts (the only MiB multiple that cuts 31 MiB into 6),
# and a multipart upload of one part.
GUESSED = [
    ("boto3-8MiB", lambda s3, b, k: _boto3_upload(s3, b, k, 43 * MiB + 77, 8 * MiB, 31), 6),
    ("s3direct", lambda s3, b, k: _s3direct_upload(s3, b, k, 41 * MiB + 5, 0, 32), 6),
    ("s3direct-6MiB", lambda s3, b, k: _s3direct_upload(s3, b, k, 31 * MiB, 6 * MiB, 33), 6),
    ("one-part", lambda s3, b, k: _multipart_source(s3, b, k, [SIZE], 34), 1),
]


@pytest.mark.parametrize("write,parts", [g[1:] for g in GUESSED], ids=[g[0] for g in GUESSED])
def test_multipart_source_in_usual_parts_stays_on_the_server(s3_env, bucket, boto3_client,
                                                             counter, write, parts):
    """Ceph RGW 16 does not tell a multipart source's part sizes (HEAD ?partNumber=k answers
    for the whole object): they are guessed from the ETag's part count and the size, and the
    copied parts' combined ETag, checked before Complete, proves the guess and the bytes."""
    body = write(boto3_client, bucket, "src.bin")
    _untold(boto3_client, bucket, "src.bin")
    etag = boto3_client.head_object(Bucket=bucket, Key="src.bin")["ETag"]
    assert etag.endswith(f'-{parts}"'), etag
    relay = counter()
    _client(relay.url).copy_object(bucket, "src.bin", bucket, "dst.bin")
    assert relay.copies == parts
    assert relay.total < 64 << 10, (relay.up, relay.down)  # the bytes stayed on the server
    got = boto3_client.get_object(Bucket=bucket, Key="dst.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == etag
    assert _no_uploads(boto3_client, bucket)


def test_multipart_source_in_uneven_parts_goes_through_the_client(s3_env, bucket,
                                                                  boto3_client, counter,
                                                                  caplog):
    """Uneven parts (5 to 9 MiB): the guess (7 parts of 6 MiB, the one MiB multiple that
    fits) is copied, its ETag is not the source's, so the upload is aborted before Complete
    and the copy goes through the client, which checks the bytes itself."""
    body = _multipart_source(boto3_client, bucket, "src.bin", UNEVEN, seed=15)
    _untold(boto3_client, bucket, "src.bin")
    boto3_client.put_object(Bucket=bucket, Key="dst.bin", Body=b"previous")
    relay = counter()
    why = _copy_logged(relay.url, caplog, bucket, "src.bin", "dst.bin")
    assert len(why) == 1, why
    assert "does not tell the source's part sizes" in why[0], why
    assert f"the 7 parts of {6 * MiB} bytes guessed from its ETag are not its parts" in why[0]
    assert "the upload was aborted" in why[0], why
    assert relay.copies == len(UNEVEN)  # the guess, copied on the server, then rejected
    assert relay.total >= 2 * len(body)
    assert boto3_client.get_object(Bucket=bucket, Key="dst.bin")["Body"].read() == body
    assert _no_uploads(boto3_client, bucket)


def test_multipart_source_with_no_likely_part_size_goes_through_the_client(
        s3_env, bucket, boto3_client, counter, caplog):
    """30 MiB in 3 parts: 10 to 14 MiB parts all fit, none is a usual size: no guess (a
    wrong one would cost a whole copy on the server), the copy goes through the client."""
    body = _boto3_upload(boto3_client, bucket, "src.bin", 30 * MiB, 10 * MiB, 35)
    _untold(boto3_client, bucket, "src.bin")
    relay = counter()
    why = _copy_logged(relay.url, caplog, bucket, "src.bin", "dst.bin")
    assert len(why) == 1 and "no usual part size" in why[0], why
    assert relay.copies == 0
    assert boto3_client.get_object(Bucket=bucket, Key="dst.bin")["Body"].read() == body


def test_cli_cp_s3_to_s3_copies_on_the_server(cli, s3_env, bucket, boto3_client, counter):
    body = data(SIZE, seed=16)
    boto3_client.put_object(Bucket=bucket, Key="a/src.bin", Body=body, ContentType="text/x-a")
    relay = counter()
    run(cli, "cp", f"s3://{bucket}/a/src.bin", f"s3://{bucket}/b/dst.bin", "-q",
        env={"AWS_ENDPOINT_URL": relay.url}, check=0)
    assert relay.copies == 1 and relay.total < 64 << 10, (relay.up, relay.down)
    got = boto3_client.get_object(Bucket=bucket, Key="b/dst.bin")
    assert got["Body"].read() == body
    assert got["ContentType"] == "text/x-a"


def test_fsspec_cp_file_copies_on_the_server(s3_env, bucket, boto3_client, counter):
    pytest.importorskip("fsspec")
    from s3direct.fs import S3DirectFileSystem

    body = data(SIZE, seed=17)
    boto3_client.put_object(Bucket=bucket, Key="src.bin", Body=body)
    relay = counter()
    fs = S3DirectFileSystem(endpoint_url=relay.url, skip_instance_cache=True)
    fs.cp_file(f"{bucket}/src.bin", f"{bucket}/d/dst.bin")
    assert relay.copies == 1 and relay.total < 64 << 10, (relay.up, relay.down)
    assert boto3_client.get_object(Bucket=bucket, Key="d/dst.bin")["Body"].read() == body


def test_small_objects_still_stream(s3_env, bucket, boto3_client, counter):
    """Below the multipart threshold a copy stays one GET and one PUT (a plain object)."""
    body = os.urandom(100_000)
    boto3_client.put_object(Bucket=bucket, Key="s.bin", Body=body)
    relay = counter()
    _client(relay.url).copy_object(bucket, "s.bin", bucket, "t.bin")
    assert relay.copies == 0
    got = boto3_client.get_object(Bucket=bucket, Key="t.bin")
    assert got["Body"].read() == body and "-" not in got["ETag"]


def test_a_slow_part_copy_is_not_taken_for_a_stall(s3_env, bucket, boto3_client, counter):
    """No byte flows while the server copies a part (up to 5 GiB: minutes): the stall
    detection (low_speed_time_s, here 1 s) must not end and resend that request. The relay
    holds the UploadPartCopy 3 s before the server gets it."""
    body = data(SIZE, seed=19)
    boto3_client.put_object(Bucket=bucket, Key="src.bin", Body=body)
    relay = counter(copy_delay=3.0)
    c = s3direct.Client(endpoint_url=relay.url, part_size=8 * MiB, low_speed_time_s=1)
    c.copy_object(bucket, "src.bin", bucket, "dst.bin")
    assert relay.copies == 1  # not resent
    assert relay.total < 64 << 10, (relay.up, relay.down)
    assert boto3_client.get_object(Bucket=bucket, Key="dst.bin")["Body"].read() == body
