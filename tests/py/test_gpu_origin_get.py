"""The C read origin carried to the GPU machine (tests/gpu/s3origin_get.c): the S3 -> GPU rates
of scripts/gpu-check.sh are measured against it, so it must answer HEAD and GET as
s3origin.py does (same ETags, Range, If-Match, If-None-Match), for boto3 and for s3direct, on
objects s3origin.py wrote. No S3 server needed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
import s3origin  # noqa: E402

boto3 = pytest.importorskip("boto3")


def _binary(lib_path):
    p = os.path.join(os.path.dirname(lib_path), "tests", "bin", "s3origin_get")
    if not os.access(p, os.X_OK):
        pytest.skip(f"s3origin_get not built next to {lib_path}")
    return p


@pytest.fixture
def origins(tmp_path, lib_path):
    root = tmp_path / "root"
    srv, url = s3origin.serve(str(root))
    proc = subprocess.Popen([_binary(lib_path), str(root)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("s3origin_get: http://"), line
    yield url, line.split(": ", 1)[1], root
    proc.kill()
    proc.wait()
    srv.shutdown()
    srv.server_close()


def _client(url):
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="k", aws_secret_access_key="s",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def test_reads_what_the_python_origin_wrote(origins, tmp_path):
    from boto3.s3.transfer import TransferConfig

    w, r = _client(origins[0]), _client(origins[1])
    w.create_bucket(Bucket="b")
    w.put_object(Bucket="b", Key="a/one", Body=b"hello world")
    head = r.head_object(Bucket="b", Key="a/one")
    assert head["ContentLength"] == 11
    assert head["ETag"] == w.head_object(Bucket="b", Key="a/one")["ETag"]
    assert r.get_object(Bucket="b", Key="a/one")["Body"].read() == b"hello world"
    assert r.get_object(Bucket="b", Key="a/one", Range="bytes=6-")["Body"].read() == b"world"
    assert r.get_object(Bucket="b", Key="a/one", Range="bytes=2-4")["Body"].read() == b"llo"
    assert r.get_object(Bucket="b", Key="a/one", Range="bytes=-3")["Body"].read() == b"rld"
    assert r.get_object(Bucket="b", Key="a/one", Range="bytes=6-99")["ContentRange"] == \
        "bytes 6-10/11"
    assert r.get_object(Bucket="b", Key="a/one", IfMatch=head["ETag"])["Body"].read() == \
        b"hello world"
    with pytest.raises(r.exceptions.ClientError) as e:
        r.get_object(Bucket="b", Key="a/one", IfMatch='"other"')
    assert e.value.response["Error"]["Code"] == "PreconditionFailed"
    with pytest.raises(r.exceptions.ClientError) as e:
        r.get_object(Bucket="b", Key="a/one", IfNoneMatch=head["ETag"])
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    with pytest.raises(r.exceptions.ClientError) as e:
        r.get_object(Bucket="b", Key="a/one", Range="bytes=20-")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    with pytest.raises(r.exceptions.NoSuchKey):
        r.get_object(Bucket="b", Key="missing")
    # writes and listings are the Python origin's
    with pytest.raises(r.exceptions.ClientError) as e:
        r.put_object(Bucket="b", Key="x", Body=b"x")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501
    # a multipart object, downloaded in ranged parts over kept-alive connections
    data = os.urandom(3 * (5 << 20) + 1)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    w.upload_file(str(src), "b", "big", Config=cfg)
    assert r.head_object(Bucket="b", Key="big")["ETag"] == \
        w.head_object(Bucket="b", Key="big")["ETag"]
    dst = tmp_path / "dst.bin"
    r.download_file("b", "big", str(dst), Config=cfg)
    assert dst.read_bytes() == data


def test_an_object_placed_on_disk_has_the_python_origins_etag(origins):
    w, r = _client(origins[0]), _client(origins[1])
    w.create_bucket(Bucket="bench")
    (origins[2] / "bench" / "direct.bin").write_bytes(b"x" * 12345)  # as bench_gpu writes it
    assert r.head_object(Bucket="bench", Key="direct.bin")["ETag"] == \
        w.head_object(Bucket="bench", Key="direct.bin")["ETag"]


def test_s3direct_loads_through_it(origins, lib_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import s3direct

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    _client(origins[0]).create_bucket(Bucket="tensors")
    g = torch.Generator().manual_seed(11)
    state = {"w": torch.randn(5 << 20, generator=g), "b": torch.arange(10)}
    s3direct.save(state, "s3://tensors/ckpt.safetensors",
                  client=s3direct.Client(endpoint_url=origins[0], part_size=5 << 20))
    got = s3direct.load("s3://tensors/ckpt.safetensors",
                        client=s3direct.Client(endpoint_url=origins[1], part_size=5 << 20))
    assert set(got) == set(state)
    for k in state:
        assert torch.equal(got[k], state[k])
