"""Incomplete multipart uploads from the CLI (issue 9): `s3direct s3api list-multipart-uploads`
and `s3direct s3api abort-multipart-upload` as `aws s3api` spells and prints them, and
`s3direct abort-uploads s3://b/prefix --older-than DURATION [--dryrun]`. Checked against
boto3's view of the server."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from test_cli import MiB, cli, data, one_error_line, run  # noqa: F401  (cli is a fixture)


def _uploads(boto3_client, bucket, prefix=""):
    r = boto3_client.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    return {(u["Key"], u["UploadId"]): u for u in r.get("Uploads", [])}


def _start(boto3_client, bucket, key):
    return boto3_client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]


def test_list_multipart_uploads_json(cli, s3_env, bucket, boto3_client):
    ids = {k: _start(boto3_client, bucket, k) for k in ("ck/a.bin", "ck/b\tc.bin", "x/c.bin")}
    boto3_client.upload_part(Bucket=bucket, Key="ck/a.bin", UploadId=ids["ck/a.bin"],
                             PartNumber=1, Body=b"x" * 1024)
    r = run(cli, "s3api", "list-multipart-uploads", "--bucket", bucket, "--prefix", "ck/",
            check=0)
    doc = json.loads(r.stdout)
    assert doc["Bucket"] == bucket and doc["Prefix"] == "ck/"
    want = _uploads(boto3_client, bucket, "ck/")
    got = {(u["Key"], u["UploadId"]): u for u in doc["Uploads"]}
    assert set(got) == set(want) and len(got) == 2
    for k, u in got.items():
        t = time.strptime(u["Initiated"], "%Y-%m-%dT%H:%M:%S+00:00")
        assert abs(time.mktime(t) - time.mktime(want[k]["Initiated"].utctimetuple())) <= 1
        assert u["StorageClass"] == want[k].get("StorageClass", u["StorageClass"])
    r = run(cli, "s3api", "list-multipart-uploads", "--bucket", bucket, check=0)
    assert {u["Key"] for u in json.loads(r.stdout)["Uploads"]} == set(ids)
    # none: an empty list, still valid JSON
    r = run(cli, "s3api", "list-multipart-uploads", "--bucket", bucket, "--prefix", "none/",
            check=0)
    assert json.loads(r.stdout)["Uploads"] == []


def test_abort_multipart_upload(cli, s3_env, bucket, boto3_client):
    uid = _start(boto3_client, bucket, "k.bin")
    keep = _start(boto3_client, bucket, "k2.bin")
    r = run(cli, "s3api", "abort-multipart-upload", "--bucket", bucket, "--key", "k.bin",
            "--upload-id", uid, check=0)
    assert r.stdout == b"" and r.stderr == b""
    assert set(_uploads(boto3_client, bucket)) == {("k2.bin", keep)}
    r = run(cli, "s3api", "abort-multipart-upload", "--bucket", bucket, "--key", "k.bin",
            "--upload-id", uid)
    assert r.returncode == 1
    assert "NoSuchUpload" in one_error_line(r) or "upload" in one_error_line(r).lower()


@pytest.mark.parametrize("args,needle", [
    (["s3api", "list-buckets"], "unknown operation"),
    (["s3api", "list-multipart-uploads"], "needs --bucket"),
    (["s3api", "abort-multipart-upload", "--bucket", "b", "--key", "k"], "--upload-id"),
    (["abort-uploads", "s3://b/p"], "--older-than is required"),
    (["abort-uploads", "s3://b/p", "--older-than", "10"], "not a duration"),
    (["abort-uploads", "s3://b/p", "--older-than", "3x"], "not a duration"),
    (["abort-uploads", "/tmp/p", "--older-than", "1d"], "not an s3:// URI"),
])
def test_usage_errors(cli, args, needle):
    r = run(cli, *args)
    assert r.returncode == 2, r
    assert needle in r.stderr.decode()


def test_abort_uploads_age_filter_and_dryrun(cli, s3_env, bucket, boto3_client):
    old = {k: _start(boto3_client, bucket, k) for k in ("ck/old1", "ck/old2", "x/old3")}
    time.sleep(3)
    new = _start(boto3_client, bucket, "ck/new")
    # Nothing is that old.
    r = run(cli, "abort-uploads", f"s3://{bucket}/ck/", "--older-than", "1h", check=0)
    assert r.stdout == b""
    assert len(_uploads(boto3_client, bucket)) == 4
    # --dryrun names them and aborts nothing.
    r = run(cli, "abort-uploads", f"s3://{bucket}/ck/", "--older-than", "2s", "--dryrun",
            check=0)
    lines = sorted(r.stdout.decode().splitlines())
    assert [ln.split(" (")[0] for ln in lines] == [f"(dryrun) abort: s3://{bucket}/ck/old1",
                                                   f"(dryrun) abort: s3://{bucket}/ck/old2"]
    assert old["ck/old1"] in lines[0] and old["ck/old2"] in lines[1]
    assert len(_uploads(boto3_client, bucket)) == 4
    # The real thing: the two old ones under ck/ go; the new one and the one outside stay.
    r = run(cli, "abort-uploads", f"s3://{bucket}/ck/", "--older-than", "2s", check=0)
    assert len(r.stdout.decode().splitlines()) == 2
    assert set(_uploads(boto3_client, bucket)) == {("x/old3", old["x/old3"]), ("ck/new", new)}
    # 0: every upload of the bucket.
    r = run(cli, "abort-uploads", f"s3://{bucket}", "--older-than", "0", check=0)
    assert len(r.stdout.decode().splitlines()) == 2
    assert _uploads(boto3_client, bucket) == {}


def test_abort_uploads_cleans_a_killed_clients_upload(cli, s3_env, bucket, boto3_client):
    """SIGKILL leaves the upload open (nothing can catch it); abort-uploads removes it."""
    p = subprocess.Popen([cli, "cp", "-", f"s3://{bucket}/killed.bin", "--part-size", "5M"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(data(7 * MiB, seed=7))
        p.stdin.flush()
        deadline = time.monotonic() + 20
        while not _uploads(boto3_client, bucket) and time.monotonic() < deadline:
            time.sleep(0.1)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    left = _uploads(boto3_client, bucket)
    assert len(left) == 1
    (key, uid), = left
    r = run(cli, "s3api", "list-multipart-uploads", "--bucket", bucket, check=0)
    assert [(u["Key"], u["UploadId"]) for u in json.loads(r.stdout)["Uploads"]] == [(key, uid)]
    r = run(cli, "abort-uploads", f"s3://{bucket}/", "--older-than", "0", check=0)
    assert r.stdout.decode().startswith(f"abort: s3://{bucket}/killed.bin (upload {uid}")
    assert _uploads(boto3_client, bucket) == {}
    assert boto3_client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
