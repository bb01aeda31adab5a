"""The CLI as `aws s3` scripts use it (issue 37): exit statuses, the order and layout of `ls`,
`mb` of a bucket one already owns, `--only-show-errors`, `info`/`verify` of a model folder,
the total progress of `cp -r` and `sync`. Where the AWS CLI is installed, each behaviour is
compared with it on the same objects (TZ=UTC: aws prints local times, s3direct UTC)."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
import uuid
from urllib.parse import parse_qs, urlparse

import pytest

from test_cli import _cli_path, cli, run  # noqa: F401  (cli is a fixture)

AWS = shutil.which("aws")


def aws(env, *args, endpoint=None):
    """Runs `aws s3 ARGS` against the test server (or endpoint); None without the AWS CLI."""
    if AWS is None:
        return None
    e = dict(os.environ)
    e.update(env)
    e.update(TZ="UTC", AWS_PAGER="")
    return subprocess.run([AWS, "--endpoint-url", endpoint or env["AWS_ENDPOINT_URL"], "s3",
                           *args], capture_output=True, env=e, timeout=120)


def same_as_aws(cli, s3_env, *args):
    """Runs s3direct ARGS, and aws s3 ARGS when installed: the same exit status and stdout."""
    r = run(cli, *args)
    a = aws(s3_env, *args)
    if a is not None:
        assert (r.returncode, r.stdout.decode()) == (a.returncode, a.stdout.decode()), \
            (args, r.stderr, a.stderr)
    return r


# ---- ls ---------------------------------------------------------------------------------

def test_ls_exit_status_of_an_empty_listing(cli, s3_env, bucket, boto3_client):
    """aws s3 ls: a PREFIX that matches nothing is exit status 1 with nothing printed; an
    empty bucket (no PREFIX) is 0."""
    for args in (["ls", f"s3://{bucket}"], ["ls", f"s3://{bucket}/"]):
        r = same_as_aws(cli, s3_env, *args)
        assert r.returncode == 0 and r.stdout == b"" and r.stderr == b"", args
    for args in (["ls", f"s3://{bucket}/nope"], ["ls", f"s3://{bucket}/nope/"],
                 ["ls", "--recursive", f"s3://{bucket}/nope"]):
        r = same_as_aws(cli, s3_env, *args)
        assert r.returncode == 1 and r.stdout == b"" and r.stderr == b"", args
    # --summarize still prints its totals
    r = same_as_aws(cli, s3_env, "ls", "--summarize", f"s3://{bucket}/nope")
    assert r.returncode == 1 and b"Total Objects: 0" in r.stdout
    boto3_client.put_object(Bucket=bucket, Key="nope-not/x", Body=b"1")
    boto3_client.put_object(Bucket=bucket, Key="nopex", Body=b"1")
    # a prefix, not a folder: "nope" matches nopex and nope-not/
    r = same_as_aws(cli, s3_env, "ls", f"s3://{bucket}/nope")
    assert r.returncode == 0 and r.stdout.decode().splitlines()[0].split() == ["PRE", "nope-not/"]
    r = same_as_aws(cli, s3_env, "ls", f"s3://{bucket}/nope-not/")
    assert r.returncode == 0


def test_ls_layout_as_aws(cli, s3_env, bucket, boto3_client):
    """PRE lines before the objects of their page, the columns, --human-readable sizes and
    --summarize totals exactly as aws s3 ls prints them."""
    for k, n in [("a.bin", 1), ("b/c.bin", 5), ("d.bin", 1536), ("e/f/g.bin", 3 << 20),
                 ("z.bin", 10)]:
        boto3_client.put_object(Bucket=bucket, Key=k, Body=b"q" * n)
    r = same_as_aws(cli, s3_env, "ls", f"s3://{bucket}")
    assert [ln.split()[-1] for ln in r.stdout.decode().splitlines()] == \
        ["b/", "e/", "a.bin", "d.bin", "z.bin"]
    assert r.stdout.decode().splitlines()[0] == " " * 27 + "PRE b/"
    r = same_as_aws(cli, s3_env, "ls", "--human-readable", "--summarize", f"s3://{bucket}/")
    out = r.stdout.decode()
    assert "    1 Byte a.bin" in out and "1.5 KiB d.bin" in out and "10 Bytes z.bin" in out
    assert "Total Size: 1.5 KiB" in out
    same_as_aws(cli, s3_env, "ls", "--recursive", "--human-readable", "--summarize",
                f"s3://{bucket}/")
    same_as_aws(cli, s3_env, "ls", f"s3://{bucket}/e/")


# A listing of three pages, as a server may cut it: objects and prefixes in each page.
PAGES = [
    (["a1", "a2"], ["p1/"]),
    (["b1"], ["q1/", "q2/"]),
    (["c1", "c2"], []),
]


class _Pages(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _PagesHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        q = parse_qs(urlparse(self.path).query)
        if "list-type" not in q:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        n = int(q.get("continuation-token", ["0"])[0])
        objs, pres = PAGES[n]
        more = n + 1 < len(PAGES)
        body = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
                'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name>'
                f'<Prefix></Prefix><Delimiter>/</Delimiter><MaxKeys>1000</MaxKeys>'
                f'<IsTruncated>{"true" if more else "false"}</IsTruncated>'
                + (f"<NextContinuationToken>{n + 1}</NextContinuationToken>" if more else "")
                + "".join(f"<Contents><Key>{k}</Key><Size>{len(k)}</Size><LastModified>"
                          "2026-12-01T10:20:30.000Z</LastModified><ETag>\"e\"</ETag>"
                          "</Contents>" for k in objs)
                + "".join(f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>"
                          for p in pres)
                + "</ListBucketResult>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_ls_prints_each_pages_prefixes_first(lib_path):
    """aws s3 ls prints each page as it comes, its PRE lines first: over several pages the
    PRE lines are not all at the top. Checked on a loopback server that cuts the listing
    into three pages (RGW's pages hold 1,000 keys)."""
    cli_path = _cli_path()
    if cli_path is None:
        pytest.skip("the s3direct CLI is not built")
    srv = _Pages(("127.0.0.1", 0), _PagesHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{srv.server_address[1]}",
               "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
        r = run(cli_path, "ls", "s3://bkt/", env=env, check=0)
        names = [ln.split()[-1] for ln in r.stdout.decode().splitlines()]
        assert names == ["p1/", "a1", "a2", "q1/", "q2/", "b1", "c1", "c2"], names
        assert r.stdout.decode().splitlines()[1] == "2026-12-01 10:20:30          2 a1"
        a = aws(env, "ls", "s3://bkt/")
        if a is not None:
            assert a.returncode == 0, a.stderr
            assert r.stdout.decode() == a.stdout.decode()
    finally:
        srv.shutdown()


# ---- mb ---------------------------------------------------------------------------------

OTHER = {"AWS_ACCESS_KEY_ID": "S3DOTHEROWNER0000001",
         "AWS_SECRET_ACCESS_KEY": "s3dotherownersecret00000000000000000000001"}


def _other_owner(s3_env):
    """A second RGW user (radosgw-admin, idempotent); skips where there is none to make."""
    admin, conf = shutil.which("radosgw-admin"), os.environ.get("CEPH_CONF")
    if admin is None or not conf:
        pytest.skip("a second owner needs radosgw-admin and CEPH_CONF (Ceph RGW)")
    r = subprocess.run([admin, "-c", conf, "-n", "client.admin", "user", "create",
                        "--uid=s3d-other-owner", "--display-name=s3direct other owner",
                        f"--access-key={OTHER['AWS_ACCESS_KEY_ID']}",
                        f"--secret-key={OTHER['AWS_SECRET_ACCESS_KEY']}"],
                       capture_output=True, timeout=60)
    if r.returncode != 0 and b"exists" not in r.stderr:
        pytest.skip(f"radosgw-admin user create failed: {r.stderr[-300:]!r}")
    return {**s3_env, **OTHER}


def test_mb_of_a_bucket_one_owns_succeeds_as_aws(cli, s3_env, bucket):
    """aws s3 mb of one's own bucket prints make_bucket and exits 0 (RGW and AWS us-east-1
    answer 200); so does s3direct mb."""
    r = same_as_aws(cli, s3_env, "mb", f"s3://{bucket}")
    assert r.returncode == 0 and r.stdout.decode() == f"make_bucket: {bucket}\n", r.stderr
    assert r.stderr == b""


def test_mb_of_another_owners_bucket_fails(cli, s3_env, boto3_client):
    other = _other_owner(s3_env)
    name = f"s3d-other-{uuid.uuid4().hex[:12]}"
    assert run(cli, "mb", f"s3://{name}", env=other).returncode == 0
    try:
        r = run(cli, "mb", f"s3://{name}")
        assert r.returncode == 1 and r.stdout == b""
        assert r.stderr.decode().splitlines() == [
            f"s3direct: CreateBucket {name}: the bucket already exists (owned by another "
            "account)"], r.stderr
        a = aws(s3_env, "mb", f"s3://{name}")
        if a is not None:
            assert a.returncode == 1 and b"make_bucket failed" in a.stderr
    finally:
        run(cli, "rb", f"s3://{name}", env=other)


# ---- --only-show-errors -----------------------------------------------------------------

def test_only_show_errors(cli, s3_env, bucket, boto3_client, tmp_path):
    """aws s3 cp/mv/rm/sync --only-show-errors: no line per file and no progress, but the
    warnings and errors, and --dryrun's lines. Same stdout and exit status as aws."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(b"a" * 100)
    (src / "sub" / "b.bin").write_bytes(b"b" * 200)
    os.mkfifo(src / "fifo")  # skipped with a warning: exit status 2
    for who, cmd in (("s3direct", None), ("aws", aws)):
        if who == "aws" and AWS is None:
            continue
        dst = f"s3://{bucket}/{who}/"

        def go(*args):
            if cmd is not None:
                return cmd(s3_env, *args, "--only-show-errors")
            # --progress asks for the bar on a pipe: --only-show-errors wins, as in aws
            return run(cli, *args, "--only-show-errors", "--progress")

        r = go("cp", "--recursive", str(src), dst)
        assert (r.returncode, r.stdout) == (2, b""), (who, r.stderr)
        err = r.stderr.decode()
        assert "warning: Skipping file" in err and "fifo" in err, (who, err)
        assert "Completed" not in err and "\r" not in err, (who, err)
        assert sorted(o["Key"] for o in boto3_client.list_objects_v2(
            Bucket=bucket, Prefix=f"{who}/")["Contents"]) == [f"{who}/a.bin", f"{who}/sub/b.bin"]
        (src / "fifo").unlink()
        (src / "a.bin").write_bytes(b"A" * 101)
        (src / "sub" / "b.bin").unlink()
        r = go("sync", "--delete", str(src), dst)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), who
        # --dryrun's lines are what was asked for: printed
        r = go("rm", "--recursive", "--dryrun", dst)
        assert (r.returncode, r.stdout.decode()) == (0, f"(dryrun) delete: {dst}a.bin\n"), who
        r = go("rm", "--recursive", dst)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), who
        # an error is still printed
        r = go("cp", f"{dst}nope.bin", str(tmp_path / "nope.bin"))
        assert r.returncode == 1 and r.stdout == b"" and b"404" in r.stderr, who
        os.mkfifo(src / "fifo")
        (src / "sub" / "b.bin").write_bytes(b"b" * 200)
    r = run(cli, "ls", f"s3://{bucket}", "--only-show-errors")
    assert r.returncode == 2 and b"unknown option --only-show-errors" in r.stderr


# ---- info / verify of a model folder ----------------------------------------------------

def _safetensors(path, tensors):
    """A safetensors file of float32 tensors {name: count} (no library needed)."""
    import json
    import struct

    hdr, data = {}, b""
    for name, n in tensors.items():
        hdr[name] = {"dtype": "F32", "shape": [n], "data_offsets": [len(data), len(data) + 4 * n]}
        data += struct.pack(f"<{n}f", *range(n))
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def _model_folders(root):
    """root/one: model.safetensors; root/sharded: two shards and their index; root/other:
    safetensors files under other names (load() does not guess among them)."""
    import json

    _safetensors(root / "one" / "model.safetensors", {"a": 4, "b": 8})
    (root / "one" / "config.json").write_text("{}")
    _safetensors(root / "sharded" / "model-00001-of-00002.safetensors", {"a": 4})
    _safetensors(root / "sharded" / "model-00002-of-00002.safetensors", {"b": 8})
    (root / "sharded" / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 48},
         "weight_map": {"a": "model-00001-of-00002.safetensors",
                        "b": "model-00002-of-00002.safetensors"}}))
    _safetensors(root / "other" / "adapter.safetensors", {"a": 4})
    (root / "other" / "notes.txt").write_text("x")


def test_info_and_verify_of_a_model_folder(cli, s3_env, bucket, tmp_path):
    """info and verify take what s3direct.load() takes: a model folder (s3://b/m/, a local
    folder, or s3://b/m with no object of that name) means its model.safetensors, else its
    model.safetensors.index.json; the file read is the first line of info. A folder holding
    neither is an error naming what it holds, as load() refuses it."""
    import s3direct
    from s3direct._reader import CheckpointReader

    _model_folders(tmp_path)
    run(cli, "cp", "--recursive", str(tmp_path), f"s3://{bucket}/", check=0)
    client = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    s3 = f"s3://{bucket}"
    cases = [(f"{s3}/one/", f"{s3}/one/model.safetensors"),
             (f"{s3}/one", f"{s3}/one/model.safetensors"),
             (f"{s3}/sharded/", f"{s3}/sharded/model.safetensors.index.json"),
             (f"{s3}/sharded", f"{s3}/sharded/model.safetensors.index.json"),
             (f"{s3}/sharded/model.safetensors.index.json",
              f"{s3}/sharded/model.safetensors.index.json"),
             (str(tmp_path / "one"), str(tmp_path / "one" / "model.safetensors")),
             (str(tmp_path / "sharded") + "/",
              str(tmp_path / "sharded" / "model.safetensors.index.json"))]
    try:
        for given, opened in cases:
            r = run(cli, "info", given, check=0)
            lines = r.stdout.decode().splitlines()
            assert lines[0] == opened, (given, lines[:3])
            assert "tensors: 2, data: 48 bytes" in r.stdout.decode(), given
            r = run(cli, "verify", given, check=0)
            assert r.stdout.decode().startswith(f"{opened}: 2 tensors, 48 B read"), r.stdout
            with CheckpointReader(given, client) as cr:
                assert cr.uri == opened, given
        for given in (f"{s3}/other/", f"{s3}/other", str(tmp_path / "other")):
            for cmd in ("info", "verify"):
                r = run(cli, cmd, given)
                assert r.returncode == 1 and r.stdout == b"", (cmd, given)
                err = r.stderr.decode()
                assert err.count("\n") == 1 and "neither model.safetensors nor " \
                    "model.safetensors.index.json" in err and "adapter.safetensors" in err, err
            with pytest.raises((s3direct.NoSuchKey, s3direct.NoSuchFile)):
                CheckpointReader(given, client)
        # no object and no folder: the object's own 404
        r = run(cli, "info", f"{s3}/nothing")
        assert r.returncode == 1 and b"404" in r.stderr and b"nothing" in r.stderr
    finally:
        client.close()


# ---- the total progress of cp -r and sync -----------------------------------------------

def _totals(stderr):
    """The "Completed D/T (R/s) with N file(s) remaining" states drawn on stderr."""
    import re

    return re.findall(r"\rCompleted ([^/\r]+)/([^(\r]+) \(([^)]+)/s\) with (\d+) file\(s\) "
                      r"remaining\x1b\[K", stderr)


def test_recursive_progress_shows_totals(cli, s3_env, bucket, tmp_path):
    """cp -r and sync list everything first, then show one line for the whole run, as aws s3
    does: bytes done of the total, the rate, the files remaining (on stderr, where a terminal
    or --progress asks for it; taken off the screen at the end and before each file's line)."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    sizes = {"a.bin": 3 << 20, "b.bin": 5 << 20, "sub/c.bin": 1 << 20, "sub/d.bin": 100}
    for rel, n in sizes.items():
        (src / rel).write_bytes(os.urandom(n))
    total = "9.0 MiB"  # 9 MiB + 100 bytes, as awscli's human_readable_size says it
    r = run(cli, "cp", "--recursive", str(src), f"s3://{bucket}/t/", "--progress", check=0)
    err = r.stderr.decode()
    states = _totals(err)
    assert states and all(t == total for _, t, _, _ in states), err[-500:]
    assert int(states[0][3]) <= 4 and states[-1][3] in ("1", "0"), states
    assert err.endswith("\r\x1b[K"), err[-100:]  # nothing left on the screen
    out = r.stdout.decode().splitlines()
    assert sorted(ln.split()[1] for ln in out) == sorted(str(src / k) for k in sizes), out
    a = aws(s3_env, "cp", "--recursive", str(src), f"s3://{bucket}/aws/")
    if a is not None:  # aws prints its progress on stdout, a pipe or not
        assert f"/{total} (" in a.stdout.decode(), a.stdout[-300:]
    # sync: the total is what differs; nothing to do, nothing drawn
    (src / "a.bin").write_bytes(os.urandom(2 << 20))
    r = run(cli, "sync", str(src), f"s3://{bucket}/t/", "--progress", check=0)
    states = _totals(r.stderr.decode())
    assert states and {t for _, t, _, _ in states} == {"2.0 MiB"}, r.stderr[-300:]
    assert r.stdout.decode().count("upload: ") == 1
    r = run(cli, "sync", f"s3://{bucket}/t/", str(tmp_path / "down"), "--progress", check=0)
    assert {t for _, t, _, _ in _totals(r.stderr.decode())} == {"8.0 MiB"}
    r = run(cli, "sync", str(src), f"s3://{bucket}/t/", "--progress", check=0)
    assert (r.stdout, r.stderr) == (b"", b"")
    # not on a pipe unless asked; never with --dryrun or --quiet
    for extra in ([], ["--progress", "--dryrun"], ["--progress", "--quiet"]):
        r = run(cli, "cp", "--recursive", str(src), f"s3://{bucket}/u/", *extra, check=0)
        assert b"Completed" not in r.stderr and b"\r" not in r.stderr, extra
