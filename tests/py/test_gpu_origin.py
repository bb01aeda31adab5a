"""The S3 origin carried to the GPU machine (tests/gpu/s3origin.py) against boto3 and s3direct:
if it misbehaved, the GPU check's S3 rows would prove nothing. No S3 server needed."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
import s3origin  # noqa: E402

boto3 = pytest.importorskip("boto3")


@pytest.fixture
def origin(tmp_path):
    srv, url = s3origin.serve(str(tmp_path / "root"))
    yield url, tmp_path / "root"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def s3(origin):
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=origin[0], region_name="us-east-1",
                        aws_access_key_id="k", aws_secret_access_key="s",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def test_objects_with_boto3(s3, tmp_path):
    from boto3.s3.transfer import TransferConfig

    s3.create_bucket(Bucket="b")
    s3.put_object(Bucket="b", Key="a/one", Body=b"hello world")
    head = s3.head_object(Bucket="b", Key="a/one")
    assert head["ContentLength"] == 11
    assert head["ETag"].startswith('"') and head["ETag"].endswith('"')
    s3.put_object(Bucket="b", Key="a/one", Body=b"hello world")  # an overwrite: a new ETag
    assert s3.head_object(Bucket="b", Key="a/one")["ETag"] != head["ETag"]
    assert s3.get_object(Bucket="b", Key="a/one", Range="bytes=6-")["Body"].read() == b"world"
    assert s3.get_object(Bucket="b", Key="a/one", Range="bytes=-3")["Body"].read() == b"rld"
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.get_object(Bucket="b", Key="a/one", IfMatch='"other"')
    assert e.value.response["Error"]["Code"] == "PreconditionFailed"
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="b", Key="missing")
    # multipart through boto3's transfer manager: 3 parts of 5 MiB + 1 byte
    data = os.urandom(3 * (5 << 20) + 1)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    s3.upload_file(str(src), "b", "big", Config=cfg)
    assert s3.head_object(Bucket="b", Key="big")["ETag"].endswith('-4"')
    dst = tmp_path / "dst.bin"
    s3.download_file("b", "big", str(dst), Config=cfg)
    assert dst.read_bytes() == data
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="b")["Contents"]]
    assert keys == ["a/one", "big"]
    page = s3.list_objects_v2(Bucket="b", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["a/"]
    assert [o["Key"] for o in page["Contents"]] == ["big"]
    up = s3.create_multipart_upload(Bucket="b", Key="aborted")
    s3.abort_multipart_upload(Bucket="b", Key="aborted", UploadId=up["UploadId"])
    s3.delete_object(Bucket="b", Key="big")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="b")["Contents"]] == ["a/one"]


def test_a_bad_part_etag_is_refused(s3):
    s3.create_bucket(Bucket="b")
    up = s3.create_multipart_upload(Bucket="b", Key="k")
    s3.upload_part(Bucket="b", Key="k", UploadId=up["UploadId"], PartNumber=1, Body=b"x")
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket="b", Key="k", UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1,
                                                                 "ETag": '"00"'}]})
    assert e.value.response["Error"]["Code"] == "InvalidPart"


def test_s3direct_save_and_load_through_it(s3, origin, lib_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import s3direct

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    s3.create_bucket(Bucket="tensors")
    c = s3direct.Client(endpoint_url=origin[0], part_size=5 << 20,
                        multipart_threshold=5 << 20) if _takes_threshold(s3direct) else \
        s3direct.Client(endpoint_url=origin[0], part_size=5 << 20)
    g = torch.Generator().manual_seed(7)
    state = {"w": torch.randn(3 << 20, generator=g), "b": torch.arange(10),
             "h": torch.randn(17, generator=g).to(torch.bfloat16)}
    s3direct.save(state, "s3://tensors/ckpt.safetensors", client=c)
    got = s3direct.load("s3://tensors/ckpt.safetensors", client=c)
    assert set(got) == set(state)
    for k in state:
        assert torch.equal(got[k], state[k])
    # and an independent reader of the object the origin stored
    safetensors = pytest.importorskip("safetensors.torch")
    body = s3.get_object(Bucket="tensors", Key="ckpt.safetensors")["Body"].read()
    assert torch.equal(safetensors.load(body)["w"], state["w"])


def _takes_threshold(mod):
    import inspect

    return "multipart_threshold" in inspect.signature(mod.Client.__init__).parameters
