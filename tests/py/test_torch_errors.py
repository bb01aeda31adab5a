"""Errors: each failure raises the matching exception with a message a person can act on."""

from __future__ import annotations

import os

import pytest
import torch

import s3direct


def test_wrong_credentials(bucket, s3_env):
    good = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    s3direct.save({"a": torch.ones(2)}, f"s3://{bucket}/a.safetensors", client=good)
    bad_secret = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"],
                                 access_key_id=s3_env["AWS_ACCESS_KEY_ID"],
                                 secret_access_key="not-the-secret", max_attempts=1)
    with pytest.raises(s3direct.AccessDenied) as ei:
        s3direct.load(f"s3://{bucket}/a.safetensors", client=bad_secret)
    assert ei.value.http_status == 403
    assert ei.value.bucket == bucket or bucket in str(ei.value)
    bad_key = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"],
                              access_key_id="AKIANOSUCHKEY0000000",
                              secret_access_key="whatever", max_attempts=1)
    with pytest.raises(s3direct.AccessDenied) as ei:
        s3direct.save({"a": torch.ones(2)}, f"s3://{bucket}/b.safetensors", client=bad_key)
    assert ei.value.http_status == 403


def test_missing_key_and_bucket(bucket):
    with pytest.raises(s3direct.NoSuchKey) as ei:
        s3direct.load(f"s3://{bucket}/does/not/exist.safetensors")
    assert ei.value.http_status == 404
    assert "does/not/exist.safetensors" in str(ei.value) or \
        ei.value.key == "does/not/exist.safetensors"
    # A HEAD 404 has no body, so a missing bucket may read as a missing key.
    with pytest.raises((s3direct.NoSuchBucket, s3direct.NoSuchKey)) as ei:
        s3direct.load(f"s3://{bucket}-nope/x.safetensors")
    assert ei.value.http_status == 404


def test_missing_local_file(tmp_path, lib_path):
    with pytest.raises(s3direct.NoSuchKey, match="absent.safetensors"):
        s3direct.load(os.path.join(tmp_path, "absent.safetensors"))


def test_load_into_lists_every_problem(tmp_path, lib_path):
    path = os.path.join(tmp_path, "m.safetensors")
    s3direct.save({"w": torch.zeros(4, 4), "b": torch.zeros(4), "extra": torch.zeros(1),
                   "i": torch.zeros(3, dtype=torch.int32)}, path)
    target = {"w": torch.empty(4, 5), "b": torch.empty(4), "gone": torch.empty(2),
              "i": torch.empty(3, dtype=torch.int64)}
    before = target["b"].clone()
    with pytest.raises(s3direct.StateMismatch) as ei:
        s3direct.load_into(target, path)
    msg = str(ei.value)
    for needle in ("w:", "[4, 4]", "[4, 5]", "i:", "int64", "gone", "extra"):
        assert needle in msg, (needle, msg)
    assert ei.value.missing == ["gone"] and ei.value.unexpected == ["extra"]
    assert len(ei.value.mismatched) == 2
    assert torch.equal(target["b"], before), "nothing may be written when the check fails"
    # strict=False tolerates missing/unexpected names but never a shape mismatch
    with pytest.raises(s3direct.StateMismatch, match="w:"):
        s3direct.load_into(target, path, strict=False)
    ok = {"b": torch.empty(4), "gone": torch.full((2,), 9.0)}
    s3direct.load_into(ok, path, strict=False)
    assert torch.equal(ok["b"], torch.zeros(4)) and torch.equal(ok["gone"], torch.full((2,), 9.))


class Opaque:
    pass


def test_non_json_leaf_names_its_path(tmp_path, lib_path):
    state = {"optim": {"state": {3: {"foo": Opaque(), "exp_avg": torch.zeros(2)}}}}
    path = os.path.join(tmp_path, "x.safetensors")
    with pytest.raises(s3direct.InvalidArgument, match=r"optim\.state\.3\.foo"):
        s3direct.save(state, path)
    with pytest.raises(s3direct.InvalidArgument, match=r"cfg\.1"):
        s3direct.save({"cfg": [1, {1, 2}]}, path)
    with pytest.raises(s3direct.InvalidArgument, match=r"t\.x.*complex128"):
        s3direct.save({"t": {"x": torch.zeros(2, dtype=torch.complex128)}}, path)
    # Even with allow_pickle, an unpicklable leaf is refused by path.
    with pytest.raises(s3direct.InvalidArgument, match=r"hooks\.0.*cannot be pickled"):
        s3direct.save({"hooks": [lambda x: x]}, path, allow_pickle=True)
    assert not os.path.exists(path)


def test_pickle_only_when_allowed(tmp_path, lib_path):
    path = os.path.join(tmp_path, "p.safetensors")
    state = {"w": torch.ones(2), "misc": {"s": {1, 2, 3}}}
    s3direct.save(state, path, allow_pickle=True)
    with pytest.raises(s3direct.PickleRefused, match=r"misc\.s"):
        s3direct.load(path)
    back = s3direct.load(path, allow_pickle=True)
    assert back["misc"]["s"] == {1, 2, 3} and torch.equal(back["w"], state["w"])


def test_truncated_object(bucket, boto3_client):
    uri = f"s3://{bucket}/full.safetensors"
    s3direct.save({"a": torch.randn(1000), "b": torch.randn(1000)}, uri)
    body = boto3_client.get_object(Bucket=bucket, Key="full.safetensors")["Body"].read()
    boto3_client.put_object(Bucket=bucket, Key="cut.safetensors", Body=body[:len(body) - 100])
    with pytest.raises((s3direct.FormatError, s3direct.TransferError)) as ei:
        s3direct.load(f"s3://{bucket}/cut.safetensors")
    assert "cut.safetensors" in str(ei.value) or ei.value.key == "cut.safetensors"
    boto3_client.put_object(Bucket=bucket, Key="head.safetensors", Body=body[:20])
    with pytest.raises((s3direct.FormatError, s3direct.TransferError)):
        s3direct.load(f"s3://{bucket}/head.safetensors")


def test_truncated_local_file(tmp_path, lib_path):
    path = os.path.join(tmp_path, "t.safetensors")
    s3direct.save({"a": torch.randn(1000)}, path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-10])
    with pytest.raises(s3direct.FormatError, match="t.safetensors"):
        s3direct.load(path)


def test_corrupted_data_fails_checksum(tmp_path, lib_path):
    path = os.path.join(tmp_path, "c.safetensors")
    s3direct.save({"a": torch.zeros(1000)}, path)
    data = bytearray(open(path, "rb").read())
    data[-5] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(s3direct.ChecksumMismatch, match="a"):
        s3direct.load(path)
    back = s3direct.load(path, verify=False)
    assert back["a"].count_nonzero() == 1


def test_load_into_optimizer_with_other_param_groups(tmp_path, lib_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    path = os.path.join(tmp_path, "o.safetensors")
    s3direct.save({"optim": opt.state_dict()}, path)
    other = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1, momentum=0.9)
    with pytest.raises(s3direct.StateMismatch, match="optimizer at optim"):
        s3direct.load_into({"optim": other}, path)
