"""The s3direct command-line tool against the S3 server of the environment.

Runs $S3D_BUILD_DIR/tools/s3direct (else build/tools/s3direct; with S3D_TEST_INSTALLED=1 the
installed `s3direct` command) as a process and checks exit
codes, stdout, the one-line error on stderr, and the bytes on the server through boto3 (an
independent client). Skipped when the tool is not built or no server is configured."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import time
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1 << 20

COMMON_FLAGS = ["--endpoint-url", "--profile", "--region", "--no-sign-request", "--ca-bundle",
                "--no-verify-ssl", "--concurrency", "--part-size", "--progress",
                "--no-progress", "--quiet", "--help"]
COMMAND_FLAGS = {
    "cp": ["--recursive", "--content-type", "--dryrun", "--exclude", "--include",
           "--follow-symlinks", "--no-follow-symlinks", "--only-show-errors"],
    "mv": ["--recursive", "--content-type", "--dryrun", "--exclude", "--include",
           "--follow-symlinks", "--no-follow-symlinks", "--only-show-errors"],
    "sync": ["--delete", "--exact-timestamps", "--size-only", "--exclude", "--include",
             "--dryrun", "--content-type", "--follow-symlinks", "--no-follow-symlinks",
             "--only-show-errors"],
    "ls": ["--recursive", "--human-readable", "--summarize"],
    "rm": ["--recursive", "--dryrun", "--exclude", "--include", "--only-show-errors"],
    "stat": [],
    "mb": [],
    "rb": [],
    "presign": ["--expires-in", "--method"],
    "info": [],
    "verify": ["--batch-size", "--no-verify"],
    "s3api": ["--bucket", "--key", "--upload-id", "--prefix"],
    "abort-uploads": ["--older-than", "--dryrun"],
}


def _cli_path():
    if os.environ.get("S3D_TEST_INSTALLED") == "1":
        # The console script of the installed package (tests/wheel/run.sh).
        return shutil.which("s3direct")
    cands = []
    if os.environ.get("S3D_BUILD_DIR"):
        cands.append(os.path.join(os.environ["S3D_BUILD_DIR"], "tools", "s3direct"))
    cands.append(os.path.join(REPO, "build", "tools", "s3direct"))
    for c in cands:
        if os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


@pytest.fixture(scope="session")
def cli():
    p = _cli_path()
    if p is None:
        pytest.skip("the s3direct CLI is not built (set S3D_BUILD_DIR)")
    return p


def run(cli, *args, input=None, env=None, check=None):
    """Runs the CLI; returns CompletedProcess with bytes stdout/stderr."""
    e = dict(os.environ)
    if env:
        e.update(env)
    r = subprocess.run([cli, *args], input=input, capture_output=True, env=e, timeout=120)
    if check is not None:
        assert r.returncode == check, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def one_error_line(r):
    """The failure contract: non-zero exit and exactly one line 's3direct: ...' on stderr."""
    assert r.returncode != 0
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("s3direct"), lines
    return lines[0]


def data(n, seed=1):
    out = bytearray()
    h = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        h = hashlib.sha256(h).digest()
        out += h * 64
    return bytes(out[:n])


# ---- no server needed -------------------------------------------------------------------

def test_help_mentions_every_flag(cli):
    top = run(cli, "--help", check=0).stdout.decode()
    for cmd in COMMAND_FLAGS:
        assert re.search(rf"^\s+{cmd}\s", top, re.M), cmd
    for cmd, flags in COMMAND_FLAGS.items():
        h = run(cli, cmd, "--help", check=0).stdout.decode()
        assert h.startswith(f"usage: s3direct {cmd}"), h[:80]
        assert "Example" in h, cmd
        for f in COMMON_FLAGS + flags:
            assert f in h, (cmd, f)
        # flags of other commands are refused by this one
        if cmd not in ("cp", "mv", "sync"):
            r = run(cli, cmd, "--content-type", "x", "s3://b/k")
            assert r.returncode == 2 and b"unknown option --content-type" in r.stderr


def test_version(cli):
    out = run(cli, "--version", check=0).stdout.decode()
    assert re.fullmatch(r"s3direct \d+\.\d+\.\d+ \(library \d+\.\d+\.\d+\)\n", out), out


@pytest.mark.parametrize("args,needle", [
    ([], "usage"),
    (["frobnicate"], 'unknown command "frobnicate"'),
    (["cp", "s3://b/k"], "missing argument"),
    (["cp", "a", "b"], "must be an s3:// URI"),
    (["cp", "s3://b/k", "x", "--part-size", "8Q"], '"8Q" is not a valid size'),
    (["cp", "s3://b/k", "x", "--concurrency", "0"], "--concurrency"),
    (["presign", "s3://b/k", "--expires-in", "604801"], "--expires-in"),
    (["ls", "--recursive"], "--recursive and --summarize need s3://BUCKET"),
    (["ls", "s3://b", "--bogus"], "unknown option --bogus"),
    (["rm", "s3://bkt/dir/"], "use --recursive"),
    (["stat", "s3://bkt"], "names a bucket"),
])
def test_usage_errors_exit_2(cli, args, needle):
    r = run(cli, *args)
    assert r.returncode == 2, r
    assert needle in r.stderr.decode(), r.stderr
    assert r.stdout == b""


@pytest.mark.parametrize("size,ok", [
    ("8M", True), ("64MiB", True), ("5242880", True), ("1.5G", True), ("512k", True),
    ("8mb", True), ("8Q", False), ("-1", False), ("1.5", False), ("", False), ("0", False),
    ("8MiBs", False), ("99999999999T", False),
])
def test_part_size_syntax(cli, tmp_path, size, ok):
    # --dryrun: the command line is parsed and the client built, nothing is sent
    r = run(cli, "cp", "--dryrun", "--part-size", size, "s3://bkt/k", str(tmp_path / "x"),
            env={"AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
    if ok:
        assert r.returncode == 0, r.stderr
        assert r.stdout.decode().startswith("(dryrun) download: s3://bkt/k to ")
    else:
        assert r.returncode == 2 and b"--part-size" in r.stderr, r
    assert not (tmp_path / "x").exists()


def test_recursive_upload_dryrun_follows_links(cli, tmp_path):
    """Links to files and to folders are followed, as the AWS CLI does by default; with
    --no-follow-symlinks every link is left out (test_cli_links.py compares with aws)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"x")
    os.symlink("real/f", tmp_path / "link")
    os.symlink("real", tmp_path / "dirlink")
    os.symlink("nowhere", tmp_path / "dangling")
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}
    r = run(cli, "cp", "-r", "--dryrun", str(tmp_path), "s3://bkt/up", env=env)
    assert sorted(r.stdout.decode().splitlines()) == [
        f"(dryrun) upload: {tmp_path}/{k} to s3://bkt/up/{k}"
        for k in ("dirlink/f", "link", "real/f")]
    # The dangling link is skipped with the AWS CLI's warning and its exit status 2.
    assert r.returncode == 2
    assert r.stderr.decode() == \
        f"warning: Skipping file {tmp_path}/dangling. File does not exist.\n"
    r = run(cli, "cp", "-r", "--dryrun", "--no-follow-symlinks", str(tmp_path), "s3://bkt/up",
            env=env, check=0)
    assert r.stdout.decode() == f"(dryrun) upload: {tmp_path}/real/f to s3://bkt/up/real/f\n"
    assert r.stderr == b""
    # one file: a link given with --no-follow-symlinks is skipped (aws: silently, exit 0)
    r = run(cli, "cp", "--dryrun", "--no-follow-symlinks", str(tmp_path / "link"), "s3://bkt/k",
            env=env)
    assert r.returncode == 2 and r.stdout == b"" and b"Skipping file" in r.stderr, r
    r = run(cli, "cp", "--dryrun", "--no-follow-symlinks", "--follow-symlinks",
            str(tmp_path / "link"), "s3://bkt/k", env=env, check=0)
    assert r.stdout.decode() == f"(dryrun) upload: {tmp_path}/link to s3://bkt/k\n"


# ---- against the server -----------------------------------------------------------------

@pytest.fixture
def tmp(tmp_path):
    return tmp_path


def test_cp_up_and_down_multipart(cli, s3_env, bucket, boto3_client, tmp):
    body = data(12 * MiB + 3)
    src = tmp / "src.bin"
    src.write_bytes(body)
    # 4 MiB parts: a multipart upload of 4 parts and 4 ranged GETs
    r = run(cli, "cp", str(src), f"s3://{bucket}/up/", "--part-size", "4M", check=0)
    assert r.stdout.decode() == f"upload: {src} to s3://{bucket}/up/src.bin\n"
    got = boto3_client.get_object(Bucket=bucket, Key="up/src.bin")["Body"].read()
    assert got == body
    dst = tmp / "back.bin"
    r = run(cli, "cp", f"s3://{bucket}/up/src.bin", str(dst), "--part-size", "4MiB", check=0)
    assert r.stdout.decode() == f"download: s3://{bucket}/up/src.bin to {dst}\n"
    assert dst.read_bytes() == body
    # into an existing folder: the key's base name
    d = tmp / "folder"
    d.mkdir()
    run(cli, "cp", "-q", f"s3://{bucket}/up/src.bin", str(d), check=0)
    assert (d / "src.bin").read_bytes() == body
    # leaves no temporary files behind
    assert sorted(os.listdir(d)) == ["src.bin"]


def test_profile_s3_transfer_settings(cli, s3_env, bucket, boto3_client, tmp):
    """The AWS CLI's s3 settings in ~/.aws/config (multipart_chunksize, multipart_threshold,
    max_concurrent_requests) apply, as `aws s3 cp` applies them; flags win over them."""
    body = data(12 * MiB - 5)  # 3 parts of 5 MiB, 2 of 6 MiB
    src = tmp / "p.bin"
    src.write_bytes(body)
    conf = tmp / "aws-config"
    conf.write_text("[default]\ns3 =\n  max_concurrent_requests = 3\n"
                    "  multipart_chunksize = 5MB\n  multipart_threshold = 5MiB\n")
    env = {"AWS_CONFIG_FILE": str(conf), "AWS_PROFILE": ""}
    r = run(cli, "--debug", "cp", str(src), f"s3://{bucket}/p.bin", env=env, check=0)
    assert "concurrency adaptive up to 3, part size 5242880, multipart threshold 5242880" in \
        r.stderr.decode()
    assert boto3_client.head_object(Bucket=bucket, Key="p.bin")["ETag"].endswith('-3"')
    r = run(cli, "cp", str(src), f"s3://{bucket}/p.bin", "--part-size", "6M", env=env,
            check=0)
    assert boto3_client.head_object(Bucket=bucket, Key="p.bin")["ETag"].endswith('-2"')
    assert boto3_client.get_object(Bucket=bucket, Key="p.bin")["Body"].read() == body
    conf.write_text("[default]\ns3 =\n  multipart_chunksize = 5M\n")
    line = one_error_line(run(cli, "ls", f"s3://{bucket}/", env=env))
    assert "multipart_chunksize" in line and '"5M"' in line, line


def test_cp_stdin_stdout(cli, s3_env, bucket, boto3_client):
    body = data(9 * MiB + 5, seed=2)
    r = run(cli, "cp", "-", f"s3://{bucket}/stream.bin", input=body, check=0)
    assert boto3_client.get_object(Bucket=bucket, Key="stream.bin")["Body"].read() == body
    r = run(cli, "cp", f"s3://{bucket}/stream.bin", "-", check=0)
    assert r.stdout == body
    # stdin needs a full key
    r = run(cli, "cp", "-", f"s3://{bucket}/dir/", input=b"x")
    assert r.returncode == 2


def test_cp_to_dev_null_keeps_it(cli, s3_env, bucket, boto3_client):
    boto3_client.put_object(Bucket=bucket, Key="n.bin", Body=data(3 * MiB))
    run(cli, "cp", f"s3://{bucket}/n.bin", "/dev/null", check=0)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_cp_s3_to_s3_and_content_type(cli, s3_env, bucket, boto3_client):
    body = data(11 * MiB, seed=3)
    boto3_client.put_object(Bucket=bucket, Key="a/src.bin", Body=body)
    r = run(cli, "cp", f"s3://{bucket}/a/src.bin", f"s3://{bucket}/b/", "--part-size", "5M",
            check=0)
    assert r.stdout.decode() == f"copy: s3://{bucket}/a/src.bin to s3://{bucket}/b/src.bin\n"
    assert boto3_client.get_object(Bucket=bucket, Key="b/src.bin")["Body"].read() == body
    run(cli, "cp", "-", f"s3://{bucket}/t.json", "--content-type", "application/json",
        input=b"{}", check=0)
    assert boto3_client.head_object(Bucket=bucket, Key="t.json")["ContentType"] == \
        "application/json"


def test_cp_recursive_both_ways_and_rm_recursive(cli, s3_env, bucket, boto3_client, tmp):
    src = tmp / "tree"
    files = {"a.bin": data(1000, 4), "sub/b.bin": data(6 * MiB + 1, 5), "sub/deep/c.txt": b""}
    for rel, body in files.items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)
    r = run(cli, "cp", "--recursive", str(src), f"s3://{bucket}/data", check=0)
    assert len(r.stdout.decode().splitlines()) == 3
    # a key that shares the prefix string but is not under the folder
    boto3_client.put_object(Bucket=bucket, Key="database.bin", Body=b"keep")
    listed = {o["Key"]: o["Size"] for o in
              boto3_client.list_objects_v2(Bucket=bucket, Prefix="data/")["Contents"]}
    assert listed == {f"data/{k}": len(v) for k, v in files.items()}

    back = tmp / "back"
    run(cli, "cp", "-r", f"s3://{bucket}/data/", str(back), "-q", check=0)
    for rel, body in files.items():
        assert (back / rel).read_bytes() == body

    run(cli, "cp", "-r", f"s3://{bucket}/data", f"s3://{bucket}/copy/", "-q", check=0)
    assert boto3_client.get_object(Bucket=bucket, Key="copy/sub/b.bin")["Body"].read() == \
        files["sub/b.bin"]

    r = run(cli, "rm", "--recursive", "--dryrun", f"s3://{bucket}/data", check=0)
    assert len(r.stdout.decode().splitlines()) == 3
    assert boto3_client.list_objects_v2(Bucket=bucket, Prefix="data/")["KeyCount"] == 3
    r = run(cli, "rm", "--recursive", f"s3://{bucket}/data", check=0)
    assert sorted(r.stdout.decode().splitlines()) == sorted(
        f"delete: s3://{bucket}/data/{k}" for k in files)
    keys = {o["Key"] for o in boto3_client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"database.bin", "copy/a.bin", "copy/sub/b.bin", "copy/sub/deep/c.txt"}


def test_cp_recursive_refuses_keys_escaping_the_folder(cli, s3_env, bucket, boto3_client, tmp):
    boto3_client.put_object(Bucket=bucket, Key="p/../../evil.txt", Body=b"x")
    r = run(cli, "cp", "-r", f"s3://{bucket}/p", str(tmp / "out"))
    line = one_error_line(r)
    assert "refusing key" in line
    assert not (tmp.parent / "evil.txt").exists()


def test_ls(cli, s3_env, bucket, boto3_client):
    for k, n in [("top.bin", 10), ("dir/a.bin", 2048), ("dir/sub/b.bin", 3), ("dirx", 1)]:
        boto3_client.put_object(Bucket=bucket, Key=k, Body=b"z" * n)
    out = run(cli, "ls", f"s3://{bucket}", check=0).stdout.decode().splitlines()
    pre = [l.split()[-1] for l in out if l.split()[0] == "PRE"]
    objs = {l.split()[-1]: int(l.split()[-2]) for l in out if l.split()[0] != "PRE"}
    assert pre == ["dir/"]
    assert objs == {"top.bin": 10, "dirx": 1}
    # inside a folder: names relative to it
    out = run(cli, "ls", f"s3://{bucket}/dir/", check=0).stdout.decode().splitlines()
    assert [l.split()[-1] for l in out] == ["sub/", "a.bin"] or \
        sorted(l.split()[-1] for l in out) == ["a.bin", "sub/"]
    out = run(cli, "ls", "-r", f"s3://{bucket}/dir", "--summarize", check=0).stdout.decode()
    keys = [l.split()[-1] for l in out.splitlines() if re.match(r"\d{4}-\d\d-\d\d ", l)]
    assert sorted(keys) == ["dir/a.bin", "dir/sub/b.bin", "dirx"]
    assert "Total Objects: 3" in out and "Total Size: 2052" in out
    out = run(cli, "ls", "-r", f"s3://{bucket}/dir/", "--human-readable",
              check=0).stdout.decode()
    assert "2.0 KiB" in out


def test_stat(cli, s3_env, bucket, boto3_client):
    boto3_client.put_object(Bucket=bucket, Key="s.bin", Body=b"q" * 12345,
                            ContentType="text/plain")
    h = boto3_client.head_object(Bucket=bucket, Key="s.bin")
    out = run(cli, "stat", f"s3://{bucket}/s.bin", check=0).stdout.decode()
    f = dict(l.split(":", 1) for l in out.splitlines())
    assert f["Size"].split()[0] == "12345"
    assert f["ETag"].strip() == h["ETag"]
    assert f["Content-Type"].strip() == "text/plain"
    lm = h["LastModified"].strftime("%Y-%m-%d %H:%M:%S")
    assert f["Last-Modified"].strip() == lm + " UTC"


def test_mb_rb(cli, s3_env, boto3_client):
    name = f"s3d-cli-{uuid.uuid4().hex[:12]}"
    try:
        r = run(cli, "mb", f"s3://{name}", check=0)
        assert r.stdout.decode() == f"make_bucket: {name}\n"
        boto3_client.head_bucket(Bucket=name)
        # (creating it again succeeds on RGW as on AWS us-east-1: not checked)
        boto3_client.put_object(Bucket=name, Key="k", Body=b"1")
        line = one_error_line(run(cli, "rb", f"s3://{name}"))
        assert name in line and "BucketNotEmpty" in line
        boto3_client.delete_object(Bucket=name, Key="k")
        run(cli, "rb", f"s3://{name}", check=0)
        with pytest.raises(Exception):
            boto3_client.head_bucket(Bucket=name)
    finally:
        try:
            boto3_client.delete_bucket(Bucket=name)
        except Exception:
            pass


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_presign_works_and_tampered_is_refused(cli, s3_env, bucket, boto3_client):
    body = data(70000, seed=6)
    boto3_client.put_object(Bucket=bucket, Key="p/k y.bin", Body=body)
    url = run(cli, "presign", f"s3://{bucket}/p/k y.bin", "--expires-in", "120",
              check=0).stdout.decode().strip()
    assert "X-Amz-Expires=120" in url and "X-Amz-Signature=" in url
    ok = subprocess.run(["curl", "-sf", url], capture_output=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout == body
    sig = re.search(r"X-Amz-Signature=([0-9a-f]+)", url).group(1)
    bad_sig = ("0" if sig[0] != "0" else "1") + sig[1:]
    for tampered in (url.replace(sig, bad_sig),
                     url.replace("X-Amz-Expires=120", "X-Amz-Expires=7200")):
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", tampered],
                           capture_output=True, timeout=60)
        assert r.stdout == b"403", (tampered, r.stdout)
    # PUT through a presigned URL
    put = run(cli, "presign", "--method", "PUT", f"s3://{bucket}/p/put.bin",
              check=0).stdout.decode().strip()
    r = subprocess.run(["curl", "-sf", "-X", "PUT", "--data-binary", "@-", put], input=b"hello",
                       capture_output=True, timeout=60)
    assert r.returncode == 0
    assert boto3_client.get_object(Bucket=bucket, Key="p/put.bin")["Body"].read() == b"hello"


def test_presign_expires(cli, s3_env, bucket, boto3_client):
    boto3_client.put_object(Bucket=bucket, Key="e.bin", Body=b"e")
    url = run(cli, "presign", f"s3://{bucket}/e.bin", "--expires-in", "1",
              check=0).stdout.decode().strip()
    time.sleep(2.5)
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url],
                       capture_output=True, timeout=60)
    assert r.stdout == b"403"


def test_errors_are_one_line(cli, s3_env, bucket):
    line = one_error_line(run(cli, "cp", f"s3://{bucket}/no/such.key", "-"))
    assert bucket in line and "no/such.key" in line and "404" in line
    line = one_error_line(run(cli, "stat", f"s3://{bucket}/missing"))
    assert bucket in line and "missing" in line
    line = one_error_line(run(cli, "ls", f"s3://{bucket}-nope-{uuid.uuid4().hex[:6]}/"))
    assert "NoSuchBucket" in line or "no such bucket" in line
    line = one_error_line(run(cli, "ls", f"s3://{bucket}",
                              env={"AWS_SECRET_ACCESS_KEY": "wrong-secret"}))
    assert "403" in line and "SignatureDoesNotMatch" in line
    line = one_error_line(run(cli, "ls", f"s3://{bucket}", "--endpoint-url",
                              "http://127.0.0.1:1"))
    assert "127.0.0.1:1" in line and "connect" in line.lower()
    line = one_error_line(run(cli, "cp", "/nonexistent/file.bin", f"s3://{bucket}/x"))
    assert "/nonexistent/file.bin" in line


def test_progress_only_when_asked(cli, s3_env, bucket, boto3_client, tmp):
    boto3_client.put_object(Bucket=bucket, Key="g.bin", Body=data(4 * MiB, seed=7))
    dst = tmp / "g.bin"
    r = run(cli, "cp", f"s3://{bucket}/g.bin", str(dst), check=0)
    assert r.stderr == b""  # stderr is a pipe: no bar
    r = run(cli, "cp", f"s3://{bucket}/g.bin", str(dst), "--progress", check=0)
    err = r.stderr.decode()
    assert "\r" in err and "100%" in err and "4.0 MiB / 4.0 MiB" in err
    r = run(cli, "cp", f"s3://{bucket}/g.bin", str(dst), "--progress", "--quiet", check=0)
    assert r.stderr == b"" and r.stdout == b""


# ---- info and verify (checkpoints written by the Python layer over the same library) ------

@pytest.fixture
def ckpt(cli, s3_env, bucket, lib_path):
    torch = pytest.importorskip("torch")
    import s3direct

    g = torch.Generator().manual_seed(0)
    tensors = {"w": torch.randn(256, 128, generator=g), "b": torch.zeros(7, dtype=torch.bfloat16),
               "step": torch.tensor(3, dtype=torch.int64)}
    s3direct.save(tensors, f"s3://{bucket}/m.safetensors", metadata={"epoch": "10"})
    s3direct.save(tensors, f"s3://{bucket}/sh/model.safetensors.index.json", shard_size=100000)
    return tensors


def tensor_rows(out):
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+)\s+([A-Z0-9_]+)\s+(\[[^\]]*\])\s+(\d+)(?:\s+(\d+))?$", line)
        if m and m.group(1) != "tensor":
            rows[m.group(1)] = (m.group(2), m.group(3), int(m.group(4)), m.group(5))
    return rows


def test_info(cli, ckpt, bucket, tmp):
    out = run(cli, "info", f"s3://{bucket}/m.safetensors", check=0).stdout.decode()
    assert tensor_rows(out) == {"w": ("F32", "[256, 128]", 131072, None),
                                "b": ("BF16", "[7]", 14, None),
                                "step": ("I64", "[]", 8, None)}
    assert "tensors: 3, data: 131094 bytes" in out
    assert "checksums: all (3 of 3" in out
    assert re.search(r"^  epoch: 10$", out, re.M)
    out = run(cli, "info", f"s3://{bucket}/sh/model.safetensors.index.json",
              check=0).stdout.decode()
    assert "shards: 2" in out
    # Each save names its shards with a token of its own (docs/internals/checkpoint.md).
    shard2 = r"model-[0-9a-f]{16}-00002-of-00002\.safetensors"
    assert re.search(rf"^shard 1: s3://{bucket}/sh/{shard2} ", out, re.M)
    assert {r[3] for r in tensor_rows(out).values()} == {"0", "1"}
    st = pytest.importorskip("safetensors.torch")
    p = tmp / "plain.safetensors"
    st.save_file({"x": ckpt["w"][:2]}, str(p))
    out = run(cli, "info", str(p), check=0).stdout.decode()
    assert tensor_rows(out) == {"x": ("F32", "[2, 128]", 1024, None)}
    assert "checksums: none (0 of 1" in out
    line = one_error_line(run(cli, "info", f"s3://{bucket}/nothing.safetensors"))
    assert "nothing.safetensors" in line


def test_verify_ok_and_mismatch(cli, ckpt, bucket, boto3_client):
    for uri in (f"s3://{bucket}/m.safetensors", f"s3://{bucket}/sh/model.safetensors.index.json"):
        r = run(cli, "verify", uri, "--batch-size", "64k", check=0)
        assert "3 ok, 0 not stored, 0 mismatches" in r.stdout.decode()
    # flip one byte inside tensor "w" (the largest: the middle of the data region is in it)
    body = bytearray(boto3_client.get_object(Bucket=bucket, Key="m.safetensors")["Body"].read())
    hdr = 8 + int.from_bytes(body[:8], "little")
    body[hdr + 65536] ^= 0x01
    boto3_client.put_object(Bucket=bucket, Key="m.safetensors", Body=bytes(body))
    r = run(cli, "verify", f"s3://{bucket}/m.safetensors")
    assert r.returncode == 1
    out = r.stdout.decode()
    assert re.search(r"^MISMATCH  w: ", out, re.M) and "MISMATCH  b" not in out
    assert "2 ok, 0 not stored, 1 mismatch" in out
    line = one_error_line(r)
    assert "1 tensor of" in line and "CRC32C" in line
    # --no-verify reads without comparing
    run(cli, "verify", "--no-verify", f"s3://{bucket}/m.safetensors", check=0)


def test_verify_header_bit_flip(cli, ckpt, bucket, boto3_client, tmp):
    # One bit flipped in a metadata value of the header ("epoch": "10" -> "11") is caught by
    # the header's own CRC-32C: verify fails naming the object, as does info (the open).
    body = bytearray(boto3_client.get_object(Bucket=bucket, Key="m.safetensors")["Body"].read())
    hdr = 8 + int.from_bytes(body[:8], "little")
    at = body.index(b'"epoch":"10"', 0, hdr) + len(b'"epoch":"1')
    body[at] ^= 0x01
    assert body[at:at + 1] == b"1"
    boto3_client.put_object(Bucket=bucket, Key="m.safetensors", Body=bytes(body))
    for cmd in ("verify", "info"):
        r = run(cli, cmd, f"s3://{bucket}/m.safetensors")
        assert r.returncode == 1, r.stdout.decode()
        line = one_error_line(r)
        assert f"s3://{bucket}/m.safetensors" in line and "header CRC32C mismatch" in line
    # A file written by the safetensors library itself has no header CRC and verifies as before.
    st = pytest.importorskip("safetensors.torch")
    p = tmp / "plain.safetensors"
    st.save_file({"x": ckpt["w"][:2]}, str(p), metadata={"epoch": "10"})
    r = run(cli, "verify", str(p), check=0)
    assert "0 ok, 1 not stored, 0 mismatches" in r.stdout.decode()


def test_ctrl_c_aborts_the_upload(cli, s3_env, bucket, boto3_client):
    import signal

    p = subprocess.Popen([cli, "cp", "-", f"s3://{bucket}/int.bin", "--part-size", "5M"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(data(7 * MiB, seed=9))  # one part gets uploaded, then stdin stalls
        p.stdin.flush()
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        p.stdin.close()  # EOF after the interrupt: must not complete the upload
        p.wait(timeout=60)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, (p.returncode, err)
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("s3direct: interrupted"), lines
    assert boto3_client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert not boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_wrong_credentials_name_the_cause(cli, s3_env, bucket, boto3_client, tmp):
    """stat (a HEAD, whose 403 has no body), cp down and info (which start with a ranged GET)
    say SignatureDoesNotMatch / InvalidAccessKeyId, not just "access denied"."""
    boto3_client.put_object(Bucket=bucket, Key="c.bin", Body=b"c" * 1000)
    uri = f"s3://{bucket}/c.bin"
    for env, code in (({"AWS_SECRET_ACCESS_KEY": "wrong-secret"}, "SignatureDoesNotMatch"),
                      ({"AWS_ACCESS_KEY_ID": "NOSUCHKEYID000000000"}, "InvalidAccessKeyId")):
        for args in (("stat", uri), ("cp", uri, str(tmp / "c.bin")), ("info", uri)):
            line = one_error_line(run(cli, *args, env=env))
            assert code in line and "403" in line, (args, line)
    assert not (tmp / "c.bin").exists()


def test_debug_says_download_unverified(cli, s3_env, bucket, boto3_client, tmp):
    """Ceph RGW 16 returns no checksum: --debug says the download was not verified."""
    boto3_client.put_object(Bucket=bucket, Key="u.bin", Body=b"u" * 1000)
    r = run(cli, "--debug", "cp", f"s3://{bucket}/u.bin", str(tmp / "u.bin"), check=0)
    assert b"download unverified" in r.stderr
    r = run(cli, "cp", f"s3://{bucket}/u.bin", str(tmp / "u2.bin"), check=0)
    assert r.stderr == b""


def test_curl_verbose_redacts_secrets(cli, s3_env, bucket, boto3_client):
    """S3D_CURL_VERBOSE shows the requests but neither the signature nor a session token."""
    boto3_client.put_object(Bucket=bucket, Key="r.bin", Body=b"r" * 10)
    r = run(cli, "stat", f"s3://{bucket}/r.bin", env={"S3D_CURL_VERBOSE": "1"}, check=0)
    err = r.stderr.decode(errors="replace")
    assert "> HEAD /" in err and "Signature=[redacted]" in err
    assert not re.search(r"Signature=[0-9a-f]{64}", err)
    token = "SESSIONTOKENSECRET" + uuid.uuid4().hex
    r = run(cli, "stat", f"s3://{bucket}/r.bin",
            env={"S3D_CURL_VERBOSE": "1", "AWS_SESSION_TOKEN": token})
    err = r.stderr.decode(errors="replace")
    assert "X-Amz-Security-Token: [redacted]" in err or "x-amz-security-token: [redacted]" in err
    assert token not in err


def test_unreachable_proxy_is_named(cli, s3_env, bucket):
    """A proxy from the environment that does not answer is named as the proxy."""
    env = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "no_proxy": "", "NO_PROXY": "", "S3D_TEST_RETRY_BASE_MS": "1"}
    line = one_error_line(run(cli, "ls", f"s3://{bucket}", env=env))
    assert "proxy http://127.0.0.1:9" in line, line
