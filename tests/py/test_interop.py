"""Objects written by s3direct read by `aws s3 cp` and boto3, and the reverse, byte for byte.

Sizes 0 B, 1 B, 5 MiB + 1 and 20 MiB; multipart both ways: s3direct with 5 MiB parts (so
5 MiB + 1 is two parts) and with its default parts, boto3 and the AWS CLI with a 5 MiB
multipart threshold and chunk size. Skipped when the CLI is not built or no server is set."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

import pytest

from test_cli import _cli_path

MiB = 1 << 20
SIZES = [0, 1, 5 * MiB + 1, 20 * MiB]


@pytest.fixture(scope="module")
def cli():
    p = _cli_path()
    if p is None:
        pytest.skip("the s3direct CLI is not built (set S3D_BUILD_DIR)")
    return p


@pytest.fixture(scope="module")
def aws_env(tmp_path_factory):
    """Environment for the AWS CLI: 5 MiB multipart threshold and chunks, via its config."""
    if shutil.which("aws") is None:
        pytest.skip("the AWS CLI is not installed")
    d = tmp_path_factory.mktemp("awscfg")
    cfg = d / "config"
    cfg.write_text("[default]\ns3 =\n  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n"
                   "  addressing_style = path\n")
    env = dict(os.environ)
    env["AWS_CONFIG_FILE"] = str(cfg)
    return env


def payload(n, seed):
    out = bytearray()
    h = hashlib.sha256(f"interop-{seed}".encode()).digest()
    while len(out) < n:
        h = hashlib.sha256(h).digest()
        out += h * 128
    return bytes(out[:n])


def sh(args, env=None, input=None):
    r = subprocess.run(args, env=env, input=input, capture_output=True, timeout=180)
    assert r.returncode == 0, (args, r.stderr.decode()[-2000:])
    return r


def boto3_transfer_config():
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("part", ["5M", "default"])
def test_s3direct_writes_others_read(cli, aws_env, s3_env, bucket, boto3_client, tmp_path,
                                     size, part):
    body = payload(size, size)
    src = tmp_path / "src.bin"
    src.write_bytes(body)
    key = f"from-s3direct/{size}.bin"
    args = [cli, "cp", "-q", str(src), f"s3://{bucket}/{key}"]
    if part != "default":
        args += ["--part-size", part]
    sh(args)
    etag = boto3_client.head_object(Bucket=bucket, Key=key)["ETag"]
    if part == "5M" and size > 5 * MiB:
        assert etag.strip('"').endswith(f"-{(size + 5 * MiB - 1) // (5 * MiB)}"), etag

    via_aws = tmp_path / "aws.bin"
    sh(["aws", "s3", "cp", "--quiet", f"s3://{bucket}/{key}", str(via_aws)], env=aws_env)
    assert via_aws.read_bytes() == body

    via_boto3 = tmp_path / "boto3.bin"
    boto3_client.download_file(bucket, key, str(via_boto3), Config=boto3_transfer_config())
    assert via_boto3.read_bytes() == body


@pytest.mark.parametrize("size", SIZES)
def test_others_write_s3direct_reads(cli, aws_env, s3_env, bucket, boto3_client, tmp_path,
                                     size):
    body = payload(size, size + 7)
    src = tmp_path / "src.bin"
    src.write_bytes(body)

    sh(["aws", "s3", "cp", "--quiet", str(src), f"s3://{bucket}/aws/{size}.bin"], env=aws_env)
    boto3_client.upload_file(str(src), bucket, f"boto3/{size}.bin",
                             Config=boto3_transfer_config())
    if size > 5 * MiB:  # both really wrote multipart objects
        for k in (f"aws/{size}.bin", f"boto3/{size}.bin"):
            assert "-" in boto3_client.head_object(Bucket=bucket, Key=k)["ETag"]

    for writer in ("aws", "boto3"):
        uri = f"s3://{bucket}/{writer}/{size}.bin"
        dst = tmp_path / f"{writer}.bin"
        sh([cli, "cp", "-q", uri, str(dst), "--part-size", "5M"])
        assert dst.read_bytes() == body, writer
        out = sh([cli, "cp", "-q", uri, "-"]).stdout
        assert out == body, writer
