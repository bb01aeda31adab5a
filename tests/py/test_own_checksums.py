"""Objects s3direct wrote are verified on download on every server (issue 23, item 4): a
single PUT stores its CRC-32C as user metadata (x-amz-meta-s3d-crc32c), a multipart upload
its combined CRC-32C as the tag s3direct-crc32c, bound to its ETag. Ceph RGW 16 stores no
checksum of its own, so these are what a download checks there. A relay that flips one bit
of the body (_flipproxy.FlipProxy) between the server and `s3direct cp` must make the copy
fail with the CRC32C mismatch (S3D_ECHECKSUM), leaving no file; an object another tool wrote
stays unverified, as `--debug` says."""

from __future__ import annotations

import os
import urllib.parse
import uuid

import pytest

from _flipproxy import FlipProxy
from test_cli import MiB, cli, data, one_error_line, run  # noqa: F401  (cli is a fixture)


def _marked(n, at, marker, seed):
    """n bytes of data with marker at offset at."""
    b = bytearray(data(n, seed))
    b[at:at + len(marker)] = marker
    assert bytes(b).count(marker) == 1
    return bytes(b)


def _proxy(s3_env, marker):
    u = urllib.parse.urlsplit(s3_env["AWS_ENDPOINT_URL"])
    if u.scheme != "http":
        pytest.skip("the flipping relay speaks plain http only")
    return FlipProxy(u.hostname, u.port or 80, marker)


# (object size, marker offset): one PUT; multipart with the flip in the first range; multipart
# with the flip in a later range (the per-range CRCs combined).
CASES = {
    "single": (3 * MiB, 2 * MiB + 12345),
    "multipart-first": (20 * MiB, 1 * MiB + 7),
    "multipart-later": (20 * MiB, 17 * MiB + 3),
}


@pytest.fixture(params=sorted(CASES))
def written(request, cli, s3_env, bucket, tmp_path):
    """An object s3direct uploaded straight to the server, with a marker in it."""
    size, at = CASES[request.param]
    marker = b"S3D-FLIP-" + uuid.uuid4().hex.encode()
    body = _marked(size, at, marker, seed=size + at)
    src = tmp_path / "src.bin"
    src.write_bytes(body)
    key = f"own/{request.param}.bin"
    run(cli, "cp", "--part-size", "5MiB", str(src), f"s3://{bucket}/{key}", check=0)
    return key, body, marker, request.param


def test_written_objects_carry_their_crc(written, bucket, boto3_client):
    key, body, _, kind = written
    h = boto3_client.head_object(Bucket=bucket, Key=key)
    tags = boto3_client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    if kind == "single":
        assert "s3d-crc32c" in h["Metadata"], h["Metadata"]
        assert tags == []
    else:
        assert h["ETag"].endswith('-4"'), h["ETag"]
        (t,) = [t for t in tags if t["Key"] == "s3direct-crc32c"]
        crc, etag = t["Value"].split(" ")
        assert len(crc) == 8 and etag == h["ETag"].strip('"')


def test_flipped_byte_into_file_fails(written, cli, s3_env, bucket, tmp_path):
    key, body, marker, _ = written
    out = tmp_path / "out.bin"
    with _proxy(s3_env, marker) as p:
        r = run(cli, "cp", f"s3://{bucket}/{key}", str(out), env={"AWS_ENDPOINT_URL": p.url})
        assert p.flips >= 1
    line = one_error_line(r)
    assert r.returncode == 1
    assert "CRC32C mismatch" in line, line
    assert not out.exists()
    assert [n for n in os.listdir(tmp_path) if n != "src.bin"] == []  # no temporary file left


def test_flipped_byte_to_stdout_fails(written, cli, s3_env, bucket):
    key, body, marker, _ = written
    with _proxy(s3_env, marker) as p:
        r = run(cli, "cp", f"s3://{bucket}/{key}", "-", env={"AWS_ENDPOINT_URL": p.url})
        assert p.flips >= 1
    line = one_error_line(r)
    assert r.returncode == 1
    assert "CRC32C mismatch" in line, line


def test_clean_relay_verifies(written, cli, s3_env, bucket, tmp_path):
    key, body, _, kind = written
    out = tmp_path / "out.bin"
    # The same relay, looking for a marker that is not in the object: nothing is flipped.
    with _proxy(s3_env, b"S3D-NOT-THERE-" + uuid.uuid4().hex.encode()) as p:
        r = run(cli, "--debug", "cp", f"s3://{bucket}/{key}", str(out),
                env={"AWS_ENDPOINT_URL": p.url}, check=0)
        assert p.flips == 0
        s = run(cli, "--debug", "cp", f"s3://{bucket}/{key}", "-",
                env={"AWS_ENDPOINT_URL": p.url}, check=0)
    assert out.read_bytes() == body and s.stdout == body
    for e in (r.stderr.decode(), s.stderr.decode()):
        assert "verified" in e and "unverified" not in e, e


def test_python_download_verifies(written, s3_env, bucket):
    import s3direct

    key, body, marker, _ = written
    with _proxy(s3_env, marker) as p:
        with s3direct.Client(endpoint_url=p.url) as c:
            with pytest.raises(s3direct.errors.ChecksumMismatch):
                c.download_bytes(bucket, key)
        assert p.flips >= 1
    with s3direct.Client() as c:
        assert c.download_bytes(bucket, key) == body


def test_other_tools_objects_stay_unverified(cli, s3_env, bucket, boto3_client, tmp_path):
    body = data(3 * MiB, 7)
    boto3_client.put_object(Bucket=bucket, Key="boto/one.bin", Body=body)
    r = run(cli, "--debug", "cp", f"s3://{bucket}/boto/one.bin", str(tmp_path / "o"), check=0)
    assert (tmp_path / "o").read_bytes() == body
    e = r.stderr.decode()
    if "(the server's) verified" in e:
        pytest.skip("this server stores checksums of its own")
    assert "download unverified" in e, e


def test_tag_of_another_version_is_ignored(cli, s3_env, bucket, boto3_client, tmp_path):
    # A tag naming another ETag (the object was replaced by a tool that kept the tags) is not
    # this version's: the download is unverified, not failed.
    src = tmp_path / "src.bin"
    body = data(12 * MiB, 9)
    src.write_bytes(body)
    run(cli, "cp", "--part-size", "5MiB", str(src), f"s3://{bucket}/k.bin", check=0)
    boto3_client.put_object_tagging(
        Bucket=bucket, Key="k.bin",
        Tagging={"TagSet": [{"Key": "s3direct-crc32c",
                             "Value": "00000000 0123456789abcdef0123456789abcdef-3"}]})
    r = run(cli, "--debug", "cp", f"s3://{bucket}/k.bin", str(tmp_path / "o"), check=0)
    assert (tmp_path / "o").read_bytes() == body
    e = r.stderr.decode()
    if "(the server's) verified" in e:
        pytest.skip("this server stores full-object checksums of its own")
    assert "is not of this version" in e, e


def test_flipped_byte_into_copy_fails(written, cli, s3_env, bucket, boto3_client):
    # An S3-to-S3 copy reads the source through the client: the bytes read are checked against
    # the source's CRC-32C before the copy is stored with a CRC of its own.
    key, body, marker, _ = written
    with _proxy(s3_env, marker) as p:
        r = run(cli, "cp", f"s3://{bucket}/{key}", f"s3://{bucket}/copy.bin",
                env={"AWS_ENDPOINT_URL": p.url})
        assert p.flips >= 1
    line = one_error_line(r)
    assert "CRC32C mismatch" in line, line
    assert "Contents" not in boto3_client.list_objects_v2(Bucket=bucket, Prefix="copy")
    assert boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    run(cli, "cp", f"s3://{bucket}/{key}", f"s3://{bucket}/copy.bin", check=0)
    assert boto3_client.get_object(Bucket=bucket, Key="copy.bin")["Body"].read() == body
