"""A reader over an S3 object keeps to the version it opened: reads after another writer
replaced the object fail with TransferError (S3D_ECHANGED) instead of returning bytes of the
new version after bytes of the old one."""

from __future__ import annotations

import os

import pytest

import s3direct
from s3direct import errors


def test_reader_refuses_a_replaced_object(s3_env, bucket, boto3_client):
    old, new = os.urandom(1 << 20), os.urandom(1 << 20)
    boto3_client.put_object(Bucket=bucket, Key="v", Body=old)
    r = s3direct.reader(f"s3://{bucket}/v", read_ahead=64 * 1024)
    assert r.read(1000) == old[:1000]
    boto3_client.put_object(Bucket=bucket, Key="v", Body=new)
    with pytest.raises(errors.TransferError) as ei:
        r.read()
    assert ei.value.code == errors._CODES["ECHANGED"]
    assert "changed during the download" in str(ei.value)
    # A new reader sees the new version whole.
    assert s3direct.reader(f"s3://{bucket}/v").read() == new


def test_local_writer_mode_and_leftovers(tmp_path, lib_path):
    """The local writer (torch.save into s3direct.writer(path)) follows the umask, keeps an
    overwritten file's mode, and removes the temporary files of killed writers."""
    import subprocess
    import stat
    import sys

    p = tmp_path / "obj.pt"
    old = os.umask(0o077)
    try:
        with s3direct.writer(str(p)) as f:
            f.write(b"one")
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    p.chmod(0o640)
    # A writer killed mid-write leaves its temporary file, named for the target and its PID.
    code = ("import os, s3direct, sys; f = s3direct.writer(sys.argv[1]); f.write(b'x'); "
            "f.flush(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(p)], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    left = [n for n in os.listdir(tmp_path) if n.startswith(".obj.pt.s3d-tmp-")]
    assert len(left) == 1
    # Its lock died with it; once older than the age bound (60 s) the next writer removes it.
    past = os.stat(tmp_path / left[0]).st_mtime - 120
    os.utime(tmp_path / left[0], (past, past))
    with s3direct.writer(str(p)) as f:
        f.write(b"two")
    assert p.read_bytes() == b"two"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["obj.pt"]


def test_local_writer_is_the_c_file_stream(tmp_path, lib_path):
    """The local writer commits through the C library (s3d_file_stream_*): its errors are the
    library's (a missing folder is NoSuchFile, a FileNotFoundError, with the C message), the
    file is seekable and appears only on close, and abort() leaves nothing."""
    with pytest.raises(errors.NoSuchFile) as ei:
        s3direct.writer(str(tmp_path / "no" / "x.bin"))
    assert isinstance(ei.value, FileNotFoundError)
    assert "does not exist" in str(ei.value)
    p = tmp_path / "x.bin"
    f = s3direct.writer(str(p))
    f.write(b"hello world")
    f.seek(0)
    f.write(b"J")
    assert not p.exists()
    f.close()
    f.close()  # idempotent
    assert p.read_bytes() == b"Jello world"
    f = s3direct.writer(str(p))
    f.write(b"discarded")
    f.abort()
    assert p.read_bytes() == b"Jello world"
    assert sorted(os.listdir(tmp_path)) == ["x.bin"]


def _hold_lock(path):
    """A process that holds an flock on path (a live writer in another PID namespace or on
    another NFS client: its PID means nothing here) until killed."""
    import subprocess
    import sys

    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def _dead_pid():
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("writer", ["python", "c"])
def test_sweep_keeps_a_live_writers_file_whatever_its_pid(tmp_path, lib_path, writer):
    """The temporary file of a live download whose PID runs nothing here (another PID
    namespace, another NFS client) is kept: its writer's flock says it is live. Before, the
    sweep went by the PID alone and removed it. One without a lock, older than 60 s, goes."""
    import torch

    target = tmp_path / "obj.pt"
    dead = _dead_pid()
    live = tmp_path / f".obj.pt.s3d-tmp-{dead}-0badf00d"
    stale = tmp_path / f".obj.pt.s3d-tmp-{dead}-1badf00d"
    for f in (live, stale):
        f.write_bytes(b"partial")
        past = f.stat().st_mtime - 3600
        os.utime(f, (past, past))
    holder = _hold_lock(live)
    try:
        if writer == "python":
            with s3direct.writer(str(target)) as f:
                f.write(b"x")
        else:  # the C library's save to a local file
            s3direct.save({"a": torch.ones(2)}, str(target))
        assert live.exists(), "a live writer's temporary file was removed"
        assert not stale.exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("n", [230, 240, 250, 255])
def test_long_names(tmp_path, lib_path, n):
    """Legal names of 230-255 bytes: the temporary name beside them is shortened; before, it
    passed 255 bytes and the write failed with "File name too long"."""
    import torch

    name = "é" * 10 + "x" * (n - 20)  # 20 bytes of 2-byte characters first
    assert len(name.encode()) == n
    p = tmp_path / name
    with s3direct.writer(str(p)) as f:
        f.write(b"abc")
    assert p.read_bytes() == b"abc"
    # A killed Python writer's leftover of that name is found by the sweep of a later save.
    import subprocess
    import sys

    code = ("import os, s3direct, sys; f = s3direct.writer(sys.argv[1]); f.write(b'x'); "
            "f.flush(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(p)], check=True)
    left = [x for x in os.listdir(tmp_path) if x != name]
    assert len(left) == 1 and len(left[0].encode()) <= 255, left
    past = os.stat(tmp_path / left[0]).st_mtime - 120
    os.utime(tmp_path / left[0], (past, past))
    s3direct.save({"a": torch.arange(3)}, str(p))
    assert torch.equal(s3direct.load(str(p))["a"], torch.arange(3))
    assert os.listdir(tmp_path) == [name]
