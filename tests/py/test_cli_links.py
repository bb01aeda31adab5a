"""Links in local trees, as `aws s3 sync` and `aws s3 cp --recursive` treat them (issue 35,
item 9): the AWS CLI's file generator (awscli/customizations/s3/filegenerator.py) follows links
to files and to folders unless --no-follow-symlinks is given, and with it skips every link. So a
sync into a destination holding a linked folder sees the files behind it (a second sync copies
nothing, --delete deletes there), and an upload takes the files of a linked folder under the
link's name. Each scenario runs s3direct and, where installed, the AWS CLI on trees and
prefixes of their own and compares what they leave."""

from __future__ import annotations

import os
import shutil
import subprocess

from test_cli import cli, run  # noqa: F401  (cli is a fixture)


def _tools(s3_env):
    runs = [("s3d", None)]
    if shutil.which("aws"):
        runs.append(("aws", ["aws", "--endpoint-url", s3_env["AWS_ENDPOINT_URL"], "s3"]))
    return runs


def _run(cli, who, cmd, s3_env, *args, cwd=None):
    """One command by one tool; stdout lines sorted (aws prints them in completion order, and
    local paths relative to the working folder: the tests give relative paths to both)."""
    argv = [cli, *args] if who == "s3d" else [*cmd, *args, "--no-progress"]
    r = subprocess.run(argv, capture_output=True, env=dict(os.environ, **s3_env), timeout=120,
                       cwd=cwd)
    return r.returncode, sorted(r.stdout.decode().splitlines()), r.stderr.decode()


def _keys(boto3_client, bucket, prefix):
    r = boto3_client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix):] for o in r.get("Contents", []))


def _put(root, files):
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)


def _tree(root):
    """Every path under root: "link TARGET", "folder", or the file's bytes."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            tree[os.path.relpath(p, root)] = ("link " + os.readlink(p) if os.path.islink(p)
                                              else "folder" if os.path.isdir(p)
                                              else open(p, "rb").read())
    return tree


def _upload_tree(root):
    """src/ with a link to a folder outside it and a link to a file inside it."""
    _put(root, {"src/a.txt": b"A", "src/real/b.txt": b"B", "outside/x.txt": b"X",
                "outside/deep/y.txt": b"Y"})
    os.symlink("../outside", root / "src" / "linked")
    os.symlink("real/b.txt", root / "src" / "b.lnk")


FOLLOWED = ["a.txt", "b.lnk", "linked/deep/y.txt", "linked/x.txt", "real/b.txt"]


def test_sync_upload_follows_links_as_aws(cli, s3_env, bucket, boto3_client, tmp_path):
    got = {}
    for who, cmd in _tools(s3_env):
        root = tmp_path / who
        _upload_tree(root)
        src, up = str(root / "src"), f"s3://{bucket}/{who}/up/"
        rc, out, err = _run(cli, who, cmd, s3_env, "sync", src, up)
        assert rc == 0, (who, err)
        keys = _keys(boto3_client, bucket, f"{who}/up/")
        # a second sync finds nothing to do
        rc, again, err = _run(cli, who, cmd, s3_env, "sync", src, up)
        assert rc == 0 and again == [], (who, again, err)
        # --delete sees the files behind the link: one removed there is deleted in S3
        (root / "outside" / "x.txt").unlink()
        boto3_client.put_object(Bucket=bucket, Key=f"{who}/up/extra.bin", Body=b"e")
        rc, deleted, err = _run(cli, who, cmd, s3_env, "sync", "--delete", src, up)
        assert rc == 0, (who, err)
        after_delete = _keys(boto3_client, bucket, f"{who}/up/")
        # --no-follow-symlinks: every link is left out, and --delete removes what was behind
        rc, out_nf, err = _run(cli, who, cmd, s3_env, "sync", "--no-follow-symlinks",
                               "--delete", src, up)
        assert rc == 0, (who, err)
        no_follow = _keys(boto3_client, bucket, f"{who}/up/")
        # cp --recursive takes the same files as sync; --follow-symlinks is the default spelled
        rc, _, err = _run(cli, who, cmd, s3_env, "cp", "--recursive", "--follow-symlinks", src,
                          f"s3://{bucket}/{who}/cp/")
        assert rc == 0, (who, err)
        cp_keys = _keys(boto3_client, bucket, f"{who}/cp/")
        got[who] = (keys, [ln.replace(f"/{who}/", "/W/") for ln in deleted], after_delete,
                    no_follow, cp_keys)
    keys, deleted, after_delete, no_follow, cp_keys = got["s3d"]
    assert keys == FOLLOWED, keys
    assert deleted == [f"delete: s3://{bucket}/W/up/extra.bin",
                       f"delete: s3://{bucket}/W/up/linked/x.txt"], deleted
    assert after_delete == ["a.txt", "b.lnk", "linked/deep/y.txt", "real/b.txt"], after_delete
    assert cp_keys == after_delete, cp_keys
    assert no_follow == ["a.txt", "real/b.txt"], no_follow
    if "aws" in got:
        for a, b in zip(got["aws"], got["s3d"]):
            assert a == b, (a, b)


def test_sync_download_sees_a_linked_folder_in_the_destination_as_aws(cli, s3_env, bucket,
                                                                      boto3_client, tmp_path):
    """The colleague's case: a destination folder holding a link to a folder. Before, s3direct
    did not list what was behind the link, downloaded it again on every run, and --delete left
    the files there that S3 no longer has."""
    objects = {"a.txt": b"A", "linked/x.txt": b"X", "linked/new.txt": b"N"}
    trees, outs = {}, {}
    for who, cmd in _tools(s3_env):
        for k, v in objects.items():
            boto3_client.put_object(Bucket=bucket, Key=f"{who}/down/{k}", Body=v)
        root = tmp_path / who
        _put(root, {"dst/keep.txt": b"K", "store/stray.txt": b"S"})
        os.symlink("../store", root / "dst" / "linked")
        src = f"s3://{bucket}/{who}/down/"
        rc, first, err = _run(cli, who, cmd, s3_env, "sync", src, "dst", cwd=root)
        assert rc == 0, (who, err)
        rc, again, err = _run(cli, who, cmd, s3_env, "sync", src, "dst", cwd=root)
        assert rc == 0 and again == [], (who, again, err)
        rc, deleted, err = _run(cli, who, cmd, s3_env, "sync", "--delete", src, "dst", cwd=root)
        assert rc == 0, (who, err)
        rc, again, err = _run(cli, who, cmd, s3_env, "sync", "--delete", src, "dst", cwd=root)
        assert rc == 0 and again == [], (who, again, err)
        trees[who] = _tree(root)
        outs[who] = [ln.replace(f"/{who}/", "/W/") for ln in first + deleted]
    assert trees["s3d"] == {"dst": "folder", "store": "folder", "dst/linked": "link ../store",
                            "dst/a.txt": b"A", "store/x.txt": b"X", "store/new.txt": b"N"}, \
        trees["s3d"]
    assert sorted(outs["s3d"]) == sorted(
        [f"download: s3://{bucket}/W/down/{k} to dst/{k}" for k in objects] +
        ["delete: dst/keep.txt", "delete: dst/linked/stray.txt"]), outs["s3d"]
    if "aws" in trees:
        assert trees["aws"] == trees["s3d"], trees
        assert sorted(outs["aws"]) == sorted(outs["s3d"]), outs


def test_links_that_loop_are_listed_once(cli, tmp_path):
    """A link to a folder above it would list the tree again and again (the AWS CLI goes on
    until the kernel's 40-link limit): s3direct lists it once, skips the link with a warning
    and exit status 2. Two links to one folder that is not above them are both listed, as
    aws lists them."""
    src = tmp_path / "src"
    _put(tmp_path, {"src/a.txt": b"A", "src/sub/b.txt": b"B", "other/o.txt": b"O"})
    os.symlink(".", src / "self")
    os.symlink("..", src / "sub" / "up")
    os.symlink("../other", src / "l1")
    os.symlink("../../other", src / "sub" / "l2")
    r = run(cli, "cp", "-r", "--dryrun", str(src), "s3://bkt/up",
            env={"AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
    assert sorted(r.stdout.decode().splitlines()) == [
        f"(dryrun) upload: {src}/{k} to s3://bkt/up/{k}"
        for k in ("a.txt", "l1/o.txt", "sub/b.txt", "sub/l2/o.txt")]
    assert r.returncode == 2, r
    assert sorted(r.stderr.decode().splitlines()) == [
        f"warning: Skipping file {src}/{k}. File system loop: a link to a folder above it."
        for k in ("self", "sub/up")]
