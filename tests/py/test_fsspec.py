"""s3direct.fs.S3DirectFileSystem against the S3 server: each method, read/write round trips
with seeks, uploads that appear only on close and leave nothing when aborted, the listings
cache, errors as fsspec expects them, s3fs-style storage options. fsspec's own abstract
suite: test_fsspec_abstract.py; s3fs, torch DCP and Lightning: test_fsspec_interop.py."""

from __future__ import annotations

import gc
import io
import os
import random
import warnings

import pytest

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def fs(s3_env):
    from s3direct.fs import S3DirectFileSystem

    return S3DirectFileSystem(skip_instance_cache=True)


def _uploads(boto3_client, bucket):
    return boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def _exists_boto(boto3_client, bucket, key):
    try:
        boto3_client.head_object(Bucket=bucket, Key=key)
        return True
    except boto3_client.exceptions.ClientError:
        return False


# ---- registration and options (no server) -------------------------------------------------

def test_import_s3direct_does_not_import_fsspec(lib_path):
    import subprocess
    import sys

    code = "import sys, s3direct; assert 'fsspec' not in sys.modules, 'imported'; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "ok", r.stderr


def test_protocols_registered(lib_path):
    import importlib

    import s3direct.fs as sfs

    reg = importlib.import_module("fsspec.registry")._registry
    assert fsspec.get_filesystem_class("s3direct") is sfs.S3DirectFileSystem
    old = reg.get("s3")
    try:
        sfs.register_s3()
        assert fsspec.get_filesystem_class("s3") is sfs.S3DirectS3FileSystem
        assert fsspec.get_filesystem_class("s3a") is sfs.S3DirectS3FileSystem
    finally:
        for proto in ("s3", "s3a"):
            reg.pop(proto, None)
        if old is not None:
            reg["s3"] = old


def test_entry_point_in_pyproject():
    import tomllib

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "pyproject.toml"), "rb") as f:
        eps = tomllib.load(f)["project"]["entry-points"]["fsspec.specs"]
    assert eps["s3direct"] == "s3direct.fs:S3DirectFileSystem"


def test_paths(lib_path):
    from s3direct.fs import S3DirectFileSystem as F

    for p in ("s3direct://b/k/x", "s3://b/k/x", "s3a://b/k/x", "b/k/x", "b/k/x/", "/b/k/x"):
        assert F._strip_protocol(p) == "b/k/x", p
    assert F._strip_protocol("s3direct://b") == "b"


@pytest.mark.parametrize("given, client, own", [
    (dict(key="K", secret="S", token="T"),
     dict(access_key_id="K", secret_access_key="S", session_token="T"), {}),
    (dict(anon=True, endpoint_url="http://h:1"), dict(anonymous=True, endpoint_url="http://h:1"),
     {}),
    (dict(client_kwargs={"endpoint_url": "http://h:1", "region_name": "r", "verify": False}),
     dict(endpoint_url="http://h:1", region="r", verify_ssl=False), {}),
    (dict(client_kwargs={"verify": "/ca.pem", "aws_access_key_id": "K"}),
     dict(ca_bundle="/ca.pem", access_key_id="K"), {}),
    (dict(config_kwargs={"s3": {"addressing_style": "path"}, "connect_timeout": 2,
                         "retries": {"max_attempts": 4}}),
     dict(addressing="path", connect_timeout_ms=2000, max_attempts=4), {}),
    (dict(endpoint_url="h:1", use_ssl=False), dict(endpoint_url="http://h:1"), {}),
    (dict(part_size=1 << 20, profile="p", max_concurrency=8),
     dict(part_size=1 << 20, profile="p", max_concurrency=8), {}),
    (dict(default_block_size=1024, use_listings_cache=False, version_aware=False),
     {}, dict(default_block_size=1024, use_listings_cache=False)),
])
def test_client_options(lib_path, given, client, own):
    from s3direct.fs import client_options

    assert client_options(given) == (client, own)


@pytest.mark.parametrize("given", [dict(version_aware=True), dict(requester_pays=True),
                                   dict(s3_additional_kwargs={"ServerSideEncryption": "AES256"}),
                                   dict(client_kwargs={"proxies": {}}), dict(nonsense=1),
                                   dict(config_kwargs={"read_timeout": 3})])
def test_client_options_refused(lib_path, given):
    from s3direct.fs import client_options

    with pytest.raises(TypeError, match="not supported"):
        client_options(given)


def test_client_and_options_not_both(s3_env):
    import s3direct
    from s3direct.fs import S3DirectFileSystem

    with s3direct.Client() as c:
        with pytest.raises(TypeError, match="not both"):
            S3DirectFileSystem(client=c, part_size=1 << 20, skip_instance_cache=True)
        fs = S3DirectFileSystem(client=c, skip_instance_cache=True)
        assert fs.client is c


# ---- against the server ---------------------------------------------------------------------

def test_s3fs_style_options_reach_the_server(s3_env, bucket):
    from s3direct.fs import S3DirectFileSystem

    fs = S3DirectFileSystem(key=s3_env["AWS_ACCESS_KEY_ID"],
                            secret=s3_env["AWS_SECRET_ACCESS_KEY"],
                            client_kwargs={"endpoint_url": s3_env["AWS_ENDPOINT_URL"]},
                            skip_instance_cache=True)
    fs.pipe_file(f"{bucket}/a", b"x")
    assert fs.ls(bucket, detail=False) == [f"{bucket}/a"]
    bad = S3DirectFileSystem(key=s3_env["AWS_ACCESS_KEY_ID"], secret="wrong",
                             endpoint_url=s3_env["AWS_ENDPOINT_URL"], skip_instance_cache=True)
    with pytest.raises(PermissionError):
        bad.cat_file(f"{bucket}/a")
    with pytest.raises(PermissionError):
        bad.info(f"{bucket}/a")


def test_ls_info_exists(fs, bucket):
    for k in ("a/x", "a/sub/y", "top"):
        fs.pipe_file(f"{bucket}/{k}", k.encode())
    assert fs.ls(bucket, detail=False) == [f"{bucket}/a", f"{bucket}/top"]
    a = fs.ls(f"s3direct://{bucket}/a/")
    assert [(e["name"], e["type"], e["size"]) for e in a] == [
        (f"{bucket}/a/sub", "directory", 0), (f"{bucket}/a/x", "file", 3)]
    assert a[1]["ETag"].startswith('"') and a[1]["LastModified"].tzinfo is not None
    assert fs.ls(f"{bucket}/a/x", detail=False) == [f"{bucket}/a/x"]  # a file lists as itself
    info = fs.info(f"{bucket}/a/sub/y", refresh=True)
    assert (info["type"], info["size"], info["name"]) == ("file", 7, f"{bucket}/a/sub/y")
    assert info["ETag"] == fs.ls(f"{bucket}/a/sub")[0]["ETag"]
    assert fs.info(f"{bucket}/a")["type"] == "directory"
    assert fs.info(bucket)["type"] == "directory"
    assert fs.isdir(f"{bucket}/a/sub") and not fs.isfile(f"{bucket}/a/sub")
    assert fs.isfile(f"{bucket}/top") and fs.exists(f"{bucket}/top")
    assert not fs.exists(f"{bucket}/a/s") and not fs.exists(f"{bucket}/nope")
    assert fs.size(f"{bucket}/a/x") == 3
    with pytest.raises(FileNotFoundError):
        fs.info(f"{bucket}/nope")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{bucket}/nope")
    with pytest.raises(FileNotFoundError):
        fs.ls(bucket + "-missing")
    assert not fs.exists(bucket + "-missing")
    assert fs.find(bucket) == [f"{bucket}/a/sub/y", f"{bucket}/a/x", f"{bucket}/top"]
    assert fs.find(f"{bucket}/a", withdirs=True) == [
        f"{bucket}/a", f"{bucket}/a/sub", f"{bucket}/a/sub/y", f"{bucket}/a/x"]
    assert fs.find(f"{bucket}/top") == [f"{bucket}/top"]
    assert fs.find(f"{bucket}/a", maxdepth=1) == [f"{bucket}/a/x"]
    assert fs.glob(f"{bucket}/a/*") == [f"{bucket}/a/sub", f"{bucket}/a/x"]
    assert fs.du(bucket) == 3 + 7 + 3


def test_folder_marker_objects(fs, bucket, boto3_client):
    # Folders made by the console or other tools: an empty object "folder/".
    boto3_client.put_object(Bucket=bucket, Key="d/", Body=b"")
    boto3_client.put_object(Bucket=bucket, Key="d/f", Body=b"1")
    assert fs.ls(f"{bucket}/d", detail=False) == [f"{bucket}/d/f"]
    assert fs.find(bucket) == [f"{bucket}/d/f"]
    assert fs.isdir(f"{bucket}/d")
    fs.rm(f"{bucket}/d", recursive=True)
    assert boto3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_listings_cache(fs, bucket, boto3_client):
    fs.pipe_file(f"{bucket}/a/x", b"1")
    assert fs.ls(f"{bucket}/a", detail=False) == [f"{bucket}/a/x"]
    boto3_client.put_object(Bucket=bucket, Key="a/y", Body=b"2")  # behind fs's back
    assert fs.ls(f"{bucket}/a", detail=False) == [f"{bucket}/a/x"]
    assert fs.ls(f"{bucket}/a", detail=False, refresh=True) == [f"{bucket}/a/x", f"{bucket}/a/y"]
    boto3_client.put_object(Bucket=bucket, Key="a/z", Body=b"3")
    fs.invalidate_cache(f"{bucket}/a")
    assert len(fs.ls(f"{bucket}/a")) == 3
    fs.pipe_file(f"{bucket}/a/w", b"4")  # its own writes invalidate
    assert len(fs.ls(f"{bucket}/a")) == 4
    fs.rm_file(f"{bucket}/a/w")
    assert len(fs.ls(f"{bucket}/a")) == 3
    fs.invalidate_cache()
    assert not fs.dircache
    nocache = type(fs)(use_listings_cache=False, skip_instance_cache=True)
    nocache.ls(f"{bucket}/a")
    assert not nocache.dircache


def test_read_seek_round_trip(fs, bucket):
    rng = random.Random(7)
    data = rng.randbytes(3 * 1024 * 1024 + 17)
    with fs.open(f"{bucket}/blob", "wb") as f:
        for i in range(0, len(data), 100_000):
            assert f.write(data[i:i + 100_000]) == len(data[i:i + 100_000])
        assert f.tell() == len(data)
    for cache_type in ("none", "readahead", "bytes"):
        with fs.open(f"s3direct://{bucket}/blob", "rb", block_size=64 * 1024,
                     cache_type=cache_type) as f:
            assert f.size == len(data) and f.seekable() and f.readable()
            assert f.blocksize == 64 * 1024
            for _ in range(60):
                pos = rng.randrange(0, len(data) + 10)
                n = rng.choice([0, 1, 100, 70_000, 300_000])
                f.seek(pos)
                assert f.read(n) == data[pos:pos + n], (cache_type, pos, n)
                assert f.tell() == min(pos + n, max(pos, len(data))) or pos > len(data)
            f.seek(-5, io.SEEK_END)
            assert f.read() == data[-5:]
            f.seek(10)
            f.seek(5, io.SEEK_CUR)
            buf = bytearray(1 << 20)
            assert f.readinto(buf) == len(buf) and bytes(buf) == data[15:15 + len(buf)]
            assert f.tell() == 15 + len(buf)
            with pytest.raises(ValueError):
                f.seek(-1)
        assert f.closed
    assert fs.cat_file(f"{bucket}/blob") == data
    assert fs.open(f"{bucket}/blob").read() == data


def test_text_mode_and_lines(fs, bucket):
    with fs.open(f"{bucket}/t.txt", "w", encoding="utf-8") as f:
        f.write("héllo\nworld\n")
    with fs.open(f"{bucket}/t.txt", "r", encoding="utf-8") as f:
        assert f.readlines() == ["héllo\n", "world\n"]
    with fs.open(f"{bucket}/t.txt", "rb") as f:
        assert list(f) == ["héllo\n".encode(), b"world\n"]


def test_write_appears_only_on_close(fs, bucket, boto3_client):
    f = fs.open(f"{bucket}/w", "wb")
    f.write(b"x" * (9 << 20))  # more than a part: the upload is under way
    assert not _exists_boto(boto3_client, bucket, "w")
    f.close()
    assert fs.cat_file(f"{bucket}/w") == b"x" * (9 << 20)
    assert _uploads(boto3_client, bucket) == []
    with pytest.raises(ValueError):
        f.write(b"more")


def test_write_aborted_leaves_nothing(fs, bucket, boto3_client):
    fs.pipe_file(f"{bucket}/keep", b"old")
    with pytest.raises(RuntimeError):
        with fs.open(f"{bucket}/keep", "wb") as f:
            f.write(b"n" * (9 << 20))
            raise RuntimeError("boom")
    assert fs.cat_file(f"{bucket}/keep") == b"old"
    f = fs.open(f"{bucket}/gone", "wb")
    f.write(b"n" * (9 << 20))
    f.discard()
    assert not fs.exists(f"{bucket}/gone")
    f = fs.open(f"{bucket}/gc", "wb")
    f.write(b"g" * (9 << 20))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del f
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) for x in w)
    assert not _exists_boto(boto3_client, bucket, "gc")
    assert _uploads(boto3_client, bucket) == []


def test_transaction(fs, bucket, boto3_client):
    with fs.transaction:
        with fs.open(f"{bucket}/t1", "wb") as f:
            f.write(b"1")
        assert not _exists_boto(boto3_client, bucket, "t1")
    assert fs.cat_file(f"{bucket}/t1") == b"1"
    with pytest.raises(RuntimeError):
        with fs.transaction:
            with fs.open(f"{bucket}/t2", "wb") as f:
                f.write(b"2")
            raise RuntimeError
    assert not fs.exists(f"{bucket}/t2") and _uploads(boto3_client, bucket) == []


def test_exclusive_and_unsupported_modes(fs, bucket):
    with fs.open(f"{bucket}/x", "xb") as f:
        f.write(b"1")
    with pytest.raises(FileExistsError):
        fs.open(f"{bucket}/x", "xb")
    with pytest.raises(FileExistsError):
        fs.pipe_file(f"{bucket}/x", b"2", mode="create")
    with pytest.raises(NotImplementedError):
        fs.open(f"{bucket}/x", "ab")
    with pytest.raises(IsADirectoryError):
        fs.open(bucket, "rb")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{bucket}/missing", "rb")
    with pytest.raises(FileNotFoundError):
        with fs.open(f"{bucket}-missing/k", "wb") as f:
            f.write(b"1")


def test_cat_file_ranges(fs, bucket):
    data = bytes(range(256)) * 40
    fs.pipe_file(f"{bucket}/r", data)
    p = f"{bucket}/r"
    for start, end in [(None, None), (0, 10), (100, 5000), (-10, None), (None, 7), (5, -5),
                       (-20, -10), (len(data), None), (len(data) + 5, len(data) + 9),
                       (10, 10), (20, 10), (10_000, 20_000)]:
        assert fs.cat_file(p, start=start, end=end) == data[start:end], (start, end)
    assert fs.cat_ranges([p, p], [0, 100], [4, 104]) == [data[:4], data[100:104]]
    assert fs.cat(f"{bucket}/r") == data
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{bucket}/nope")
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{bucket}/nope", start=0, end=4)


def test_pipe_touch_cp_rm(fs, bucket):
    fs.pipe({f"{bucket}/p1": b"one", f"{bucket}/d/p2": b"two"})
    fs.touch(f"{bucket}/empty")
    assert fs.cat_file(f"{bucket}/empty") == b"" and fs.size(f"{bucket}/empty") == 0
    with pytest.raises(ValueError):
        fs.touch(f"{bucket}/empty", truncate=False)
    fs.cp_file(f"{bucket}/p1", f"{bucket}/d/copy")
    assert fs.cat_file(f"{bucket}/d/copy") == b"one"
    big = os.urandom(12 << 20)  # multipart copy
    fs.pipe_file(f"{bucket}/big", big)
    fs.copy(f"{bucket}/big", f"{bucket}/d/")
    assert fs.cat_file(f"{bucket}/d/big") == big
    with pytest.raises(FileNotFoundError):
        fs.cp_file(f"{bucket}/nope", f"{bucket}/x")
    fs.mv(f"{bucket}/p1", f"{bucket}/moved")
    assert not fs.exists(f"{bucket}/p1") and fs.cat_file(f"{bucket}/moved") == b"one"
    fs.rm_file(f"{bucket}/moved")
    fs.rm_file(f"{bucket}/moved")  # a missing key is no error, as on S3
    assert not fs.exists(f"{bucket}/moved")
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{bucket}/nothing-here", recursive=True)
    fs.rm(f"{bucket}/d", recursive=True)
    assert fs.find(bucket) == [f"{bucket}/big", f"{bucket}/empty"]
    fs.rm([f"{bucket}/big", f"{bucket}/empty"])
    assert fs.find(bucket) == []


def test_mkdir_makedirs_rmdir(fs, bucket):
    new = bucket + "-mk"
    assert not fs.exists(new)
    fs.mkdir(new)
    try:
        assert fs.isdir(new) and fs.ls(new) == []
        with pytest.raises(FileExistsError):
            fs.mkdir(new)
        with pytest.raises(FileExistsError):
            fs.makedirs(new)
        fs.makedirs(new, exist_ok=True)
        fs.makedirs(f"{new}/a/b")  # a folder: nothing to make on S3
        fs.mkdir(f"{new}/c", create_parents=False)
        assert fs.ls(new) == []
        fs.pipe_file(f"{new}/a/f", b"1")
        with pytest.raises(OSError):
            fs.rmdir(new)  # not empty
        with pytest.raises(FileExistsError):
            fs.rmdir(f"{new}/a")
        with pytest.raises(FileNotFoundError):
            fs.rmdir(f"{new}/zz")
        fs.rm(new, recursive=True)  # the bucket goes too, as in s3fs
        assert not fs.exists(new)
    finally:
        if fs.exists(new):
            fs.rm(new, recursive=True)
    with pytest.raises(FileNotFoundError):
        fs.mkdir(f"{new}/x", create_parents=False)
    fs.makedirs(f"{new}/x/y")  # a missing bucket is made
    assert fs.exists(new)
    fs.rmdir(new)
    with pytest.raises(FileNotFoundError):
        fs.rmdir(new)


def test_get_put_file(fs, bucket, tmp_path):
    src = tmp_path / "src.bin"
    data = os.urandom(10 << 20)
    src.write_bytes(data)

    class Count(fsspec.callbacks.Callback):
        pass

    cb = Count()
    fs.put_file(str(src), f"{bucket}/up/src.bin", callback=cb)
    assert cb.size == len(data) and cb.value == len(data)
    assert fs.cat_file(f"{bucket}/up/src.bin") == data
    with pytest.raises(FileExistsError):
        fs.put_file(str(src), f"{bucket}/up/src.bin", mode="create")
    out = tmp_path / "deep" / "out.bin"
    cb = Count()
    fs.get_file(f"{bucket}/up/src.bin", str(out), callback=cb)
    assert out.read_bytes() == data and cb.value == len(data)
    assert [p.name for p in tmp_path.joinpath("deep").iterdir()] == ["out.bin"]  # no temp
    buf = io.BytesIO()
    fs.get_file(f"{bucket}/up/src.bin", buf)  # a file object: through open()
    assert buf.getvalue() == data
    with pytest.raises(FileNotFoundError):
        fs.get_file(f"{bucket}/up/nope", str(tmp_path / "nope"))
    assert not (tmp_path / "nope").exists()
    fs.get(f"{bucket}/up", str(tmp_path / "tree"), recursive=True)
    assert (tmp_path / "tree" / "src.bin").read_bytes() == data
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "dir" / "sub" / "f").write_bytes(b"f")
    fs.put(str(tmp_path / "dir"), f"{bucket}/dir", recursive=True)
    assert fs.cat_file(f"{bucket}/dir/sub/f") == b"f"
    (tmp_path / "-").write_bytes(b"dash")  # "-" is a file here, never stdin or stdout
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        fs.put_file("-", f"{bucket}/dash")
        os.remove("-")
        fs.get_file(f"{bucket}/dash", "-")
        assert (tmp_path / "-").read_bytes() == b"dash"
    finally:
        os.chdir(cwd)


def test_modified_ukey_checksum(fs, bucket):
    import datetime

    p = f"{bucket}/m"
    fs.pipe_file(p, b"1")
    m = fs.modified(p)
    assert isinstance(m, datetime.datetime) and m.tzinfo is not None
    assert abs((datetime.datetime.now(datetime.timezone.utc) - m).total_seconds()) < 600
    k1, c1 = fs.ukey(p), fs.checksum(p)
    assert k1 == fs.info(p)["ETag"] and isinstance(c1, int)
    fs.pipe_file(p, b"2")
    assert fs.ukey(p) != k1 and fs.checksum(p) != c1
    fs.pipe_file(f"{bucket}/d/f", b"1")
    with pytest.raises(IsADirectoryError):
        fs.modified(f"{bucket}/d")


def test_fsspec_open_and_url_to_fs(s3_env, bucket):
    import s3direct.fs  # noqa: F401  (registers the protocol in a source checkout)

    with fsspec.open(f"s3direct://{bucket}/o.txt", "wt") as f:
        f.write("via fsspec.open")
    with fsspec.open(f"s3direct://{bucket}/o.txt", "rt") as f:
        assert f.read() == "via fsspec.open"
    fs, path = fsspec.core.url_to_fs(f"s3direct://{bucket}/o.txt")
    assert path == f"{bucket}/o.txt" and fs.cat_file(path) == b"via fsspec.open"
    assert fs.unstrip_protocol(path) == f"s3direct://{bucket}/o.txt"
