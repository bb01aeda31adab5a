"""The CLI as `aws s3` users expect it (issue 11): `ls` without an argument lists buckets,
control bytes in key names are escaped when printed. Checked against boto3."""

from __future__ import annotations

import uuid

from test_cli import cli, run  # noqa: F401  (cli is a fixture)


def test_ls_without_argument_lists_buckets(cli, s3_env, bucket, boto3_client):
    r = run(cli, "ls", check=0)
    lines = r.stdout.decode().splitlines()
    want = {b["Name"]: b["CreationDate"] for b in boto3_client.list_buckets()["Buckets"]}
    assert bucket in want
    got = {}
    for ln in lines:
        date, clock, name = ln.split(" ", 2)
        got[name] = f"{date} {clock}"
    assert set(got) == set(want)
    assert got[bucket] == want[bucket].strftime("%Y-%m-%d %H:%M:%S")


def test_ls_buckets_error_is_one_line(cli, s3_env):
    r = run(cli, "ls", env={"AWS_SECRET_ACCESS_KEY": "wrong" + uuid.uuid4().hex})
    assert r.returncode == 1
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and "ListBuckets" in lines[0], lines


def test_control_bytes_in_keys_are_escaped(cli, s3_env, bucket, boto3_client, tmp_path):
    key = "evil\x1b[2J\rname\x7f\u009b.bin"
    boto3_client.put_object(Bucket=bucket, Key=key, Body=b"x")
    esc = "evil\\x1b[2J\\x0dname\\x7f\\xc2\\x9b.bin"
    out = run(cli, "ls", f"s3://{bucket}/", check=0).stdout.decode()
    assert "\x1b" not in out and "\r" not in out and "\x7f" not in out and "\u009b" not in out
    assert out.rstrip("\n").endswith(" " + esc)
    out = run(cli, "ls", "-r", f"s3://{bucket}", check=0).stdout.decode()
    assert out.rstrip("\n").endswith(" " + esc)
    out = run(cli, "cp", "-r", f"s3://{bucket}", str(tmp_path / "d"), "--dryrun",
              check=0).stdout.decode()
    assert esc in out and "\x1b" not in out
    out = run(cli, "rm", "-r", f"s3://{bucket}", "--dryrun", check=0).stdout.decode()
    assert out == f"(dryrun) delete: s3://{bucket}/{esc}\n"
    out = run(cli, "rm", f"s3://{bucket}/{key}", check=0).stdout.decode()
    assert out == f"delete: s3://{bucket}/{esc}\n"
