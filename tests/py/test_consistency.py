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
