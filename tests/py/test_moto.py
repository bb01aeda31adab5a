"""The CLI and the Python API against moto's S3 server (an independent implementation that,
unlike Ceph RGW 16, stores and returns checksums), started here on a loopback port.

moto answers CompleteMultipartUpload with a <CompleteMultipartUploadResponse> root, and its
HEAD of a multipart object returns the composite CRC32C without its "-N" part count: before
s3direct took both into account, every multipart upload reported failure though the object
was written (a sharded save stopped after its first shard), and every default `cp` download of
a multipart object failed with a false CRC32C mismatch. Skipped without moto[server]."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

moto_server = pytest.importorskip("moto.server")
torch = pytest.importorskip("torch")

import s3direct  # noqa: E402

from _relay import HttpRelay  # noqa: E402
from test_cli import _cli_path  # noqa: E402

MiB = 1 << 20


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


@pytest.fixture(scope="module")
def moto_env(lib_path, tmp_path_factory):
    home = tmp_path_factory.mktemp("moto-home")
    port = _free_port()
    srv = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    srv.start()
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("AWS_"):
            del env[k]
    env.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               HOME=str(home))
    yield env
    srv.stop()


@pytest.fixture(scope="module")
def cli():
    path = _cli_path()
    if path is None:
        pytest.skip("the s3direct CLI is not built (set S3D_BUILD_DIR)")
    return path


def _run(cli, env, *args):
    r = subprocess.run([cli, *args], env=env, capture_output=True, timeout=120)
    return r


@pytest.fixture(scope="module")
def moto_bucket(cli, moto_env):
    r = _run(cli, moto_env, "mb", "s3://s3d-moto")
    assert r.returncode == 0, r.stderr
    return "s3d-moto"


def _client(env):
    return s3direct.Client(endpoint_url=env["AWS_ENDPOINT_URL"], region="us-east-1",
                           access_key_id="testing", secret_access_key="testing",
                           part_size=5 * MiB, multipart_threshold=5 * MiB)


def test_cli_multipart_upload_and_download(cli, moto_env, moto_bucket, tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(13 * MiB + 123))
    url = f"s3://{moto_bucket}/mp.bin"
    r = _run(cli, moto_env, "cp", "--part-size", str(5 * MiB), str(src), url)
    assert r.returncode == 0, r.stderr.decode()
    r = _run(cli, moto_env, "stat", url)
    assert r.returncode == 0 and b"-3" in r.stdout, r.stdout + r.stderr  # ETag "...-3"
    # The default download: ranged GETs, then the HEAD that moto answers without "-N".
    dst = tmp_path / "dst.bin"
    r = _run(cli, moto_env, "--debug", "cp", url, str(dst))
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert dst.read_bytes() == src.read_bytes()
    # Verified all the same, through the CRC-32C s3direct tagged the object with.
    assert b"verified" in r.stderr, r.stderr.decode()[-2000:]


def test_cli_single_put_checked_by_server_checksum(cli, moto_env, moto_bucket, tmp_path):
    src = tmp_path / "small.bin"
    src.write_bytes(os.urandom(100_000))
    url = f"s3://{moto_bucket}/small.bin"
    assert _run(cli, moto_env, "cp", str(src), url).returncode == 0
    dst = tmp_path / "small.out"
    r = _run(cli, moto_env, "--debug", "cp", url, str(dst))
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert dst.read_bytes() == src.read_bytes()
    assert b"verified" in r.stderr


def test_python_sharded_save_and_load(moto_env, moto_bucket):
    c = _client(moto_env)
    try:
        sd = {f"w{i}": torch.randn(6 * MiB // 4) for i in range(3)}  # 6 MiB each: multipart
        uri = f"s3://{moto_bucket}/ck/model.safetensors.index.json"
        s3direct.save(sd, uri, shard_size=7 * MiB, client=c)
        back = s3direct.load(uri, client=c)
        assert sorted(back) == sorted(sd)
        for k in sd:
            assert torch.equal(back[k], sd[k])
        one = f"s3://{moto_bucket}/ck/one.safetensors"
        s3direct.save(sd, one, client=c)
        back = s3direct.load(one, client=c)
        for k in sd:
            assert torch.equal(back[k], sd[k])
    finally:
        c.close()


def test_incremental_save(moto_env, moto_bucket):
    """Incremental saves on a second S3 implementation (issue 33): moto answers UploadPartCopy
    in its own XML; the copies are proved, and the result loads bit-exact in s3direct and in
    the safetensors library, single object and sharded."""
    import boto3
    from safetensors.torch import load as st_load

    c = _client(moto_env)
    s3 = boto3.client("s3", endpoint_url=moto_env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    try:
        g = torch.Generator().manual_seed(11)
        sd = {f"w{i}": torch.randn(6 * MiB // 4, generator=g) for i in range(4)}
        sd["bias"] = torch.randn(100, generator=g)
        base = f"s3://{moto_bucket}/inc/base.safetensors"
        s3direct.save(sd, base, client=c)
        sd["w2"] = sd["w2"] + 1
        sd["bias"] = sd["bias"] * 2
        st = s3direct.save(sd, f"s3://{moto_bucket}/inc/next.safetensors", base=base, client=c)
        assert st.base_used and st.bytes_copied >= 3 * 6 * MiB - 5 * MiB
        assert st.copies_refused == 0 and st.tensors_reused == 3
        raw = s3.get_object(Bucket=moto_bucket, Key="inc/next.safetensors")["Body"].read()
        for got in (st_load(raw), s3direct.load(f"s3://{moto_bucket}/inc/next.safetensors",
                                                client=c)):
            assert sorted(got) == sorted(sd)
            for k in sd:
                assert torch.equal(got[k], sd[k]), k
        idx = f"s3://{moto_bucket}/inc/m.safetensors.index.json"
        s3direct.save(sd, idx, shard_size=13 * MiB, client=c)
        sd["w0"] = sd["w0"] - 1
        st = s3direct.save(sd, f"s3://{moto_bucket}/inc2/m.safetensors.index.json",
                           shard_size=13 * MiB, base=idx, client=c)
        assert st.base_used and st.bytes_copied > 0
        back = s3direct.load(f"s3://{moto_bucket}/inc2/m.safetensors.index.json", client=c)
        for k in sd:
            assert torch.equal(back[k], sd[k]), k
    finally:
        c.close()


def _spoil_complete(handler, status, data):
    """moto carried out CompleteMultipartUpload; its answer gets a root element s3direct does
    not know: a Complete that worked, whose answer failed."""
    if (handler.command == "POST" and "uploadId=" in handler.path
            and b"<CompleteMultipartUpload" in data):
        data = data.replace(b"CompleteMultipartUploadResponse", b"CompleteMultipartUploadOops")
        data = data.replace(b"CompleteMultipartUploadResult", b"CompleteMultipartUploadOops")
    return data


def test_failed_complete_answer_does_not_claim_an_open_upload(cli, moto_env, moto_bucket,
                                                              tmp_path):
    """The answer to a CompleteMultipartUpload that was carried out cannot be read, so the
    upload is aborted, and the abort finds no such upload: the error says that none is left
    open (before, it said the upload was left open and gave the command to remove it)."""
    relay = HttpRelay(moto_env["AWS_ENDPOINT_URL"], rewrite=_spoil_complete)
    try:
        src = tmp_path / "src.bin"
        src.write_bytes(os.urandom(11 * MiB))
        env = dict(moto_env, AWS_ENDPOINT_URL=relay.url)
        r = _run(cli, env, "cp", "--part-size", str(5 * MiB), str(src),
                 f"s3://{moto_bucket}/relayed.bin")
        err = r.stderr.decode()
        assert r.returncode != 0
        assert "CompleteMultipartUploadOops" in err, err
        assert "no multipart upload is left open" in err, err
        assert "left open on the server" not in err, err
    finally:
        relay.close()


def test_error_names_moto_request_id_and_no_placeholder(cli, moto_env, moto_bucket):
    """moto sends its request id as x-amzn-requestid (the spelling botocore reads first), and a
    HEAD's 404 has no body to carry one: the error named "(request id none)". It names moto's
    id now; an answer with no id at all (the relay's) gets no placeholder."""
    r = _run(cli, moto_env, "stat", f"s3://{moto_bucket}/no-such-key")
    err = r.stderr.decode()
    assert r.returncode != 0 and "HTTP 404" in err, err
    assert "request id none" not in err, err
    assert "(request id " in err, err

    def no_id(handler, body):
        return 404, [("Content-Type", "application/xml")], b""

    relay = HttpRelay(moto_env["AWS_ENDPOINT_URL"], intercept=no_id)
    try:
        r = _run(cli, dict(moto_env, AWS_ENDPOINT_URL=relay.url), "stat",
                 f"s3://{moto_bucket}/no-such-key")
    finally:
        relay.close()
    err = r.stderr.decode()
    assert r.returncode != 0 and "HTTP 404" in err, err
    assert "request id" not in err, err


def _boto3(env):
    import boto3
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def _copy_through(env, relay, bucket, src, dst):
    c = s3direct.Client(endpoint_url=relay.url, region="us-east-1", access_key_id="testing",
                        secret_access_key="testing")
    try:
        c.copy_object(bucket, src, bucket, dst)
    finally:
        c.close()


def test_multipart_copy_stays_on_the_server(moto_env, moto_bucket):
    """moto tells a multipart object's part sizes (HEAD ?partNumber=k, x-amz-mp-parts-count),
    which Ceph RGW 16 does not: a source boto3 uploaded in uneven parts is copied part for
    part by the server, and the copy has the source's ETag (proved before Complete)."""
    from test_copy_server import UNEVEN, Counter, _multipart_source

    s3 = _boto3(moto_env)
    body = _multipart_source(s3, moto_bucket, "mpc/src.bin", UNEVEN, seed=21)
    etag = s3.head_object(Bucket=moto_bucket, Key="mpc/src.bin")["ETag"]
    assert etag.endswith(f'-{len(UNEVEN)}"')
    relay = Counter(moto_env["AWS_ENDPOINT_URL"])
    try:
        _copy_through(moto_env, relay, moto_bucket, "mpc/src.bin", "mpc/dst.bin")
    finally:
        relay.close()
    assert relay.copies == len(UNEVEN)
    assert relay.total < 64 << 10, (relay.up, relay.down)  # 41 MiB stayed on the server
    got = s3.get_object(Bucket=moto_bucket, Key="mpc/dst.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == etag


def test_multipart_copy_of_a_replaced_source_fails(moto_env, moto_bucket):
    """The parts the server copied combine to another ETag than the source's (a rewritten
    answer stands for a source replaced between the HEAD and the copies): the copy fails
    before Complete, the destination keeps its object, and no upload is left."""
    import hashlib

    from test_copy_server import UNEVEN, Counter, _multipart_source

    s3 = _boto3(moto_env)
    _multipart_source(s3, moto_bucket, "mpr/src.bin", UNEVEN, seed=22)
    s3.put_object(Bucket=moto_bucket, Key="mpr/dst.bin", Body=b"previous")
    relay = Counter(moto_env["AWS_ENDPOINT_URL"],
                    copy_etag='"%s"' % hashlib.md5(b"another version").hexdigest())
    try:
        with pytest.raises(s3direct.TransferError) as e:
            _copy_through(moto_env, relay, moto_bucket, "mpr/src.bin", "mpr/dst.bin")
    finally:
        relay.close()
    msg = str(e.value)
    assert "the copied parts make ETag" in msg and "nothing was written" in msg, msg
    assert s3.get_object(Bucket=moto_bucket, Key="mpr/dst.bin")["Body"].read() == b"previous"
    ups = s3.list_multipart_uploads(Bucket=moto_bucket).get("Uploads", [])
    assert [u for u in ups if u["Key"].startswith("mpr/")] == []


def test_multipart_copy_complete_answering_another_etag_fails(moto_env, moto_bucket):
    """Complete's answer names another ETag than the one the copied parts were proved to make:
    the object is in place by then, so the copy fails saying so, and the object gets no
    CRC-32C tag (a download would otherwise be checked against bytes never proved)."""
    def spoil(handler, status, data):
        if handler.command == "POST" and "uploadId=" in handler.path and b"<ETag>" in data:
            a, b = data.index(b"<ETag>") + 6, data.index(b"</ETag>")
            data = data[:a] + b'"0123456789abcdef0123456789abcdef-7"' + data[b:]
        return data

    s3 = _boto3(moto_env)
    c = _client(moto_env)  # s3direct's upload: its CRC-32C tag would reach a proved copy
    try:
        c.upload_bytes(moto_bucket, "mpx/src.bin", os.urandom(23 * MiB))
    finally:
        c.close()
    assert _has_crc_tag(s3, moto_bucket, "mpx/src.bin")
    relay = HttpRelay(moto_env["AWS_ENDPOINT_URL"], rewrite=spoil)
    try:
        with pytest.raises(s3direct.TransferError) as e:
            _copy_through(moto_env, relay, moto_bucket, "mpx/src.bin", "mpx/dst.bin")
    finally:
        relay.close()
    msg = str(e.value)
    assert "CompleteMultipartUpload answered ETag" in msg and "left in place" in msg, msg
    assert not _has_crc_tag(s3, moto_bucket, "mpx/dst.bin")


def _has_crc_tag(s3, bucket, key):
    tags = s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    return any(t["Key"] == "s3direct-crc32c" for t in tags)


def test_multipart_copy_keeps_the_source_crc(moto_env, moto_bucket):
    """A multipart source s3direct wrote carries its CRC-32C as a tag bound to its ETag; the
    copy made on the server (whose parts' CRCs the client never sees) gets the same CRC, bound
    to its own ETag, so downloads of the copy are still checked."""
    from test_copy_server import Counter

    s3 = _boto3(moto_env)
    body = os.urandom(23 * MiB)
    c = _client(moto_env)
    relay = Counter(moto_env["AWS_ENDPOINT_URL"])
    try:
        c.upload_bytes(moto_bucket, "mpk/src.bin", body)
        _copy_through(moto_env, relay, moto_bucket, "mpk/src.bin", "mpk/dst.bin")
        assert c.download_bytes(moto_bucket, "mpk/dst.bin") == body  # checked by the tag
    finally:
        relay.close()
        c.close()
    assert relay.copies == 5 and relay.total < 64 << 10, (relay.copies, relay.total)

    def tag(key):
        tags = s3.get_object_tagging(Bucket=moto_bucket, Key=key)["TagSet"]
        return {t["Key"]: t["Value"] for t in tags}["s3direct-crc32c"]
    src_crc, src_etag = tag("mpk/src.bin").split()
    dst_crc, dst_etag = tag("mpk/dst.bin").split()
    assert dst_crc == src_crc and dst_etag == src_etag  # same parts: same ETag
    assert s3.head_object(Bucket=moto_bucket, Key="mpk/dst.bin")["ETag"] == f'"{dst_etag}"'
