"""The CLI as `aws s3` users expect it (issue 11): `ls` without an argument lists buckets,
control bytes in key names are escaped when printed. Checked against boto3."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
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


# ---- --exclude / --include --------------------------------------------------------------

def _tree(root, files):
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)


def _keys(boto3_client, bucket, prefix=""):
    r = boto3_client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in r.get("Contents", []))


FILES = {"a.json": b"{}", "b.bin": b"bb", "sub/c.json": b"[]", "sub/d.txt": b"dd"}


def test_filters_follow_the_aws_order_rules(cli, s3_env, bucket, boto3_client, tmp_path):
    src = tmp_path / "src"
    _tree(src, FILES)
    run(cli, "cp", "-r", str(src), f"s3://{bucket}/j/", "--exclude", "*", "--include", "*.json",
        check=0)
    assert _keys(boto3_client, bucket) == ["j/a.json", "j/sub/c.json"]
    # the last matching filter wins: include-then-exclude keeps nothing
    r = run(cli, "cp", "-r", str(src), f"s3://{bucket}/n/", "--include", "*.json", "--exclude",
            "*", check=0)
    assert r.stdout == b"" and _keys(boto3_client, bucket, "n/") == []
    # '*' matches across '/', as Python's fnmatch does in the AWS CLI
    run(cli, "cp", "-r", str(src), f"s3://{bucket}/s/", "--exclude", "sub/*", check=0)
    assert _keys(boto3_client, bucket, "s/") == ["s/a.json", "s/b.bin"]
    run(cli, "cp", "-r", str(src), f"s3://{bucket}/all/", check=0)
    # S3 -> local with a filter
    out = tmp_path / "out"
    run(cli, "cp", "-r", f"s3://{bucket}/all", str(out), "--exclude", "*.json", check=0)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == \
        ["b.bin", "sub/d.txt"]
    # rm: excluded keys are kept
    run(cli, "rm", "-r", f"s3://{bucket}/all", "--exclude", "*.json", check=0)
    assert _keys(boto3_client, bucket, "all/") == ["all/a.json", "all/sub/c.json"]
    # a filter without --recursive is a usage error
    assert run(cli, "cp", str(src / "a.json"), f"s3://{bucket}/x", "--exclude", "*").returncode == 2


def test_recursive_upload_puts_the_index_last(cli, s3_env, bucket, boto3_client, tmp_path):
    """A reader that sees the index must find its shards: *.index.json goes after them, even
    when its name sorts first. --dryrun lists the plan in path order; a real copy runs
    several files at once, so only the index's place is fixed."""
    src = tmp_path / "hf"
    _tree(src, {"a.safetensors.index.json": b"{}", "b-00001-of-00002.safetensors": b"1",
                "b-00002-of-00002.safetensors": b"2", "config.json": b"{}"})
    for extra in (["--dryrun"], []):
        r = run(cli, "cp", "-r", str(src), f"s3://{bucket}/m/", *extra, check=0)
        names = [ln.rsplit("/", 1)[1] for ln in r.stdout.decode().splitlines()]
        if extra:
            assert names == ["b-00001-of-00002.safetensors", "b-00002-of-00002.safetensors",
                             "config.json", "a.safetensors.index.json"], names
        else:
            assert sorted(names[:-1]) == ["b-00001-of-00002.safetensors",
                                          "b-00002-of-00002.safetensors", "config.json"], names
            assert names[-1] == "a.safetensors.index.json", names
    r = run(cli, "cp", "-r", f"s3://{bucket}/m/", f"s3://{bucket}/m2/", check=0)
    assert r.stdout.decode().splitlines()[-1].endswith("/m2/a.safetensors.index.json")


def test_recursive_goes_on_after_a_failure_but_not_to_the_index(cli, s3_env, bucket,
                                                                 boto3_client, tmp_path):
    """As aws s3: a file that fails does not stop the others (exit 1); a skipped one (a FIFO)
    gives exit 2. The index is not copied when a shard failed or was skipped."""
    for k in ("a.safetensors.index.json", "b-1.safetensors", "b-2.safetensors"):
        boto3_client.put_object(Bucket=bucket, Key=f"m/{k}", Body=k.encode())
    dst = tmp_path / "dst"
    (dst / "b-1.safetensors").mkdir(parents=True)  # the download cannot replace a folder
    (dst / "b-1.safetensors" / "x").write_bytes(b"x")
    r = run(cli, "cp", "-r", f"s3://{bucket}/m", str(dst))
    assert r.returncode == 1, r
    assert (dst / "b-2.safetensors").read_bytes() == b"b-2.safetensors"
    assert not (dst / "a.safetensors.index.json").exists()
    assert "not copying a.safetensors.index.json" in r.stderr.decode()
    # a skipped file: the others copied, the index held back (that is a failure: exit 1)
    src = tmp_path / "src"
    _tree(src, {"a.safetensors.index.json": b"{}", "b-1.safetensors": b"1"})
    os.mkfifo(src / "b-2.safetensors")
    r = run(cli, "cp", "-r", str(src), f"s3://{bucket}/u/")
    assert r.returncode == 1, r
    assert f"warning: Skipping file {src}/b-2.safetensors. File is character special device" \
        in r.stderr.decode()
    assert _keys(boto3_client, bucket, "u/") == ["u/b-1.safetensors"]
    # skipped without an index: exit 2, as aws s3
    (src / "a.safetensors.index.json").unlink()
    r = run(cli, "cp", "-r", str(src), f"s3://{bucket}/v/")
    assert r.returncode == 2, r
    assert _keys(boto3_client, bucket, "v/") == ["v/b-1.safetensors"]


# ---- mv ---------------------------------------------------------------------------------

def test_mv(cli, s3_env, bucket, boto3_client, tmp_path):
    f = tmp_path / "one.bin"
    f.write_bytes(b"one")
    r = run(cli, "mv", str(f), f"s3://{bucket}/d/", "--dryrun", check=0)
    assert r.stdout.decode() == f"(dryrun) move: {f} to s3://{bucket}/d/one.bin\n"
    assert f.exists() and _keys(boto3_client, bucket) == []
    r = run(cli, "mv", str(f), f"s3://{bucket}/d/", check=0)
    assert r.stdout.decode() == f"move: {f} to s3://{bucket}/d/one.bin\n"
    assert not f.exists() and _keys(boto3_client, bucket) == ["d/one.bin"]
    # S3 -> S3, recursive
    boto3_client.put_object(Bucket=bucket, Key="d/sub/two.bin", Body=b"two")
    run(cli, "mv", "-r", f"s3://{bucket}/d", f"s3://{bucket}/e/", check=0)
    assert _keys(boto3_client, bucket) == ["e/one.bin", "e/sub/two.bin"]
    # S3 -> local
    run(cli, "mv", f"s3://{bucket}/e/one.bin", str(tmp_path / "back.bin"), check=0)
    assert (tmp_path / "back.bin").read_bytes() == b"one"
    assert _keys(boto3_client, bucket) == ["e/sub/two.bin"]
    # a failed copy keeps its source
    r = run(cli, "mv", f"s3://{bucket}/e/nope.bin", str(tmp_path / "nope.bin"))
    assert r.returncode == 1 and _keys(boto3_client, bucket) == ["e/sub/two.bin"]
    assert run(cli, "mv", "-", f"s3://{bucket}/x").returncode == 2


# ---- sync -------------------------------------------------------------------------------

def _lines(r):
    return sorted(r.stdout.decode().splitlines())


def test_sync_local_to_s3(cli, s3_env, bucket, boto3_client, tmp_path):
    src = tmp_path / "src"
    _tree(src, FILES)
    r = run(cli, "sync", str(src), f"s3://{bucket}/p", "--dryrun", check=0)
    assert _lines(r) == sorted(f"(dryrun) upload: {src}/{k} to s3://{bucket}/p/{k}"
                               for k in FILES)
    assert _keys(boto3_client, bucket) == []
    r = run(cli, "sync", str(src), f"s3://{bucket}/p", check=0)
    assert _lines(r) == sorted(f"upload: {src}/{k} to s3://{bucket}/p/{k}" for k in FILES)
    # nothing changed: nothing copied
    assert run(cli, "sync", str(src), f"s3://{bucket}/p", check=0).stdout == b""
    # a changed size is copied; a same-sized file newer than the object is copied too
    (src / "b.bin").write_bytes(b"bigger")
    future = time.time() + 120
    os.utime(src / "sub/d.txt", (future, future))
    r = run(cli, "sync", str(src), f"s3://{bucket}/p", check=0)
    assert _lines(r) == [f"upload: {src}/b.bin to s3://{bucket}/p/b.bin",
                         f"upload: {src}/sub/d.txt to s3://{bucket}/p/sub/d.txt"]
    # --size-only ignores the time
    os.utime(src / "a.json", (future + 60, future + 60))
    assert run(cli, "sync", str(src), f"s3://{bucket}/p", "--size-only", check=0).stdout == b""
    past = time.time() - 3600
    for k in ("a.json", "sub/d.txt"):
        os.utime(src / k, (past, past))
    assert run(cli, "sync", str(src), f"s3://{bucket}/p", check=0).stdout == b""
    # --delete removes what the source lacks, but not what the filters exclude
    boto3_client.put_object(Bucket=bucket, Key="p/extra.bin", Body=b"x")
    boto3_client.put_object(Bucket=bucket, Key="p/keep.tmp", Body=b"x")
    (src / "a.json").unlink()
    r = run(cli, "sync", str(src), f"s3://{bucket}/p", "--delete", "--exclude", "*.tmp",
            "--dryrun", check=0)
    assert _lines(r) == [f"(dryrun) delete: s3://{bucket}/p/a.json",
                         f"(dryrun) delete: s3://{bucket}/p/extra.bin"]
    run(cli, "sync", str(src), f"s3://{bucket}/p", "--delete", "--exclude", "*.tmp", check=0)
    assert _keys(boto3_client, bucket) == ["p/b.bin", "p/keep.tmp", "p/sub/c.json",
                                           "p/sub/d.txt"]


def test_sync_delete_with_a_dangling_link_as_aws(cli, s3_env, bucket, boto3_client, tmp_path):
    """sync --delete with a dangling symlink in the source: the link is skipped with a
    warning, the copies and the deletes still run, exit status 2 (issue 24.3: s3direct
    deleted nothing). The AWS CLI, where installed, does the same on a prefix of its own."""
    src = tmp_path / "src"
    _tree(src, FILES)
    os.symlink("nowhere", src / "dangling")
    runs = [("s3d", [cli])]
    if shutil.which("aws"):
        runs.append(("aws", ["aws", "--endpoint-url", s3_env["AWS_ENDPOINT_URL"]]))
    got = {}
    for who, cmd in runs:
        for k in ("old.bin", "a.json"):
            boto3_client.put_object(Bucket=bucket, Key=f"{who}/{k}", Body=b"x")
        r = subprocess.run([*cmd, *(["s3"] if who == "aws" else []), "sync", "--delete",
                            str(src), f"s3://{bucket}/{who}/"], capture_output=True,
                           env=dict(os.environ, **s3_env))
        assert r.returncode == 2, (who, r.stderr[-2000:])
        assert b"Skipping file" in r.stderr and b"dangling" in r.stderr, (who, r.stderr)
        got[who] = [k.split("/", 1)[1] for k in _keys(boto3_client, bucket, f"{who}/")]
    assert got["s3d"] == sorted(FILES), got
    if "aws" in got:
        assert got["aws"] == got["s3d"], got
    assert boto3_client.get_object(Bucket=bucket, Key="s3d/a.json")["Body"].read() == b"{}"


def test_sync_s3_to_local_and_s3(cli, s3_env, bucket, boto3_client, tmp_path):
    for k, v in FILES.items():
        boto3_client.put_object(Bucket=bucket, Key=f"q/{k}", Body=v)
    dst = tmp_path / "dst"
    r = run(cli, "sync", f"s3://{bucket}/q/", str(dst), check=0)
    assert len(r.stdout.decode().splitlines()) == 4
    # downloaded files take the object's time, so the next sync copies nothing
    head = boto3_client.head_object(Bucket=bucket, Key="q/a.json")
    assert int(os.stat(dst / "a.json").st_mtime) == int(head["LastModified"].timestamp())
    assert run(cli, "sync", f"s3://{bucket}/q/", str(dst), check=0).stdout == b""
    # a same-sized object that is newer: kept by default, replaced with --exact-timestamps
    time.sleep(1.2)
    boto3_client.put_object(Bucket=bucket, Key="q/b.bin", Body=b"BB")
    assert run(cli, "sync", f"s3://{bucket}/q/", str(dst), check=0).stdout == b""
    r = run(cli, "sync", f"s3://{bucket}/q/", str(dst), "--exact-timestamps", check=0)
    assert _lines(r) == [f"download: s3://{bucket}/q/b.bin to {dst}/b.bin"]
    assert (dst / "b.bin").read_bytes() == b"BB"
    # a local file newer than the object is replaced (the S3 copy is the source)
    future = time.time() + 120
    (dst / "sub/d.txt").write_bytes(b"DD")
    os.utime(dst / "sub/d.txt", (future, future))
    r = run(cli, "sync", f"s3://{bucket}/q/", str(dst), check=0)
    assert _lines(r) == [f"download: s3://{bucket}/q/sub/d.txt to {dst}/sub/d.txt"]
    assert (dst / "sub/d.txt").read_bytes() == b"dd"
    # --delete on a local folder
    (dst / "stray.txt").write_bytes(b"s")
    r = run(cli, "sync", f"s3://{bucket}/q/", str(dst), "--delete", check=0)
    assert _lines(r) == [f"delete: {dst}/stray.txt"] and not (dst / "stray.txt").exists()
    # S3 -> S3
    r = run(cli, "sync", f"s3://{bucket}/q/", f"s3://{bucket}/r/", check=0)
    assert len(r.stdout.decode().splitlines()) == 4
    assert _keys(boto3_client, bucket, "r/") == sorted(f"r/{k}" for k in FILES)
    assert run(cli, "sync", f"s3://{bucket}/q/", f"s3://{bucket}/r/", check=0).stdout == b""


def test_recursive_download_through_links_in_the_destination_as_aws(cli, s3_env, bucket,
                                                                    boto3_client, tmp_path):
    """cp --recursive into a folder holding links (issue 35, item 9): as `aws s3 cp
    --recursive` (s3transfer writes a temporary file next to the destination and renames it
    over it; awscli creates missing parent folders with os.makedirs), a link to a folder is
    followed, the file landing in the folder it names, and a link to a file is replaced by the
    downloaded file, the file it named left as it was. Keys with "..", which could leave the
    destination, are refused before (test_cli.py). The AWS CLI, where installed, is run the same
    way and must leave the same tree."""
    for k, v in {"p/sub/a.txt": b"A", "p/top.txt": b"TOP"}.items():
        boto3_client.put_object(Bucket=bucket, Key=k, Body=v)
    runs = [("s3d", [cli])]
    if shutil.which("aws"):
        runs.append(("aws", ["aws", "--endpoint-url", s3_env["AWS_ENDPOINT_URL"], "s3"]))
    trees = {}
    for who, cmd in runs:
        root = tmp_path / who
        (root / "dest").mkdir(parents=True)
        (root / "outside").mkdir()
        (root / "outside" / "target.txt").write_bytes(b"OUT")
        os.symlink("../outside", root / "dest" / "sub")
        os.symlink("../outside/target.txt", root / "dest" / "top.txt")
        r = subprocess.run([*cmd, "cp", "--recursive", f"s3://{bucket}/p/", f"{root}/dest/"],
                           capture_output=True, env=dict(os.environ, **s3_env))
        assert r.returncode == 0, (who, r.stderr[-2000:])
        tree = {}
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                rel = os.path.relpath(p, root)
                tree[rel] = ("link " + os.readlink(p) if os.path.islink(p)
                             else "folder" if os.path.isdir(p) else open(p, "rb").read())
        trees[who] = tree
    assert trees["s3d"] == {"dest": "folder", "outside": "folder", "dest/sub": "link ../outside",
                            "dest/top.txt": b"TOP", "outside/target.txt": b"OUT",
                            "outside/a.txt": b"A"}, trees["s3d"]
    if "aws" in trees:
        assert trees["aws"] == trees["s3d"], trees
