"""load(group=) and load_into(group=): a checkpoint read once per process group and shared over
torch.distributed (gloo, CPU), with spawned ranks as test_dcp.py runs them. Every rank must end
byte-identical to the reference; the bytes the S3 server served are counted at a relay
(_slowproxy.SlowProxy with rate=0) and must be about one checkpoint, not one per rank.

Run as a script, this file is one rank: test_ranks.py MODE URI RANK WORLD PORT ENDPOINT."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest


def reference():
    import torch

    g = torch.Generator().manual_seed(7)
    return {
        "model": {
            # 32 MiB: cut over ranks when allowed; big enough that the header reads of every
            # rank (one 256 KiB GET each) stay within 5% at world 4.
            "embed": torch.randn(2048, 4096, generator=g),
            "layers": [{"w": torch.randn(64, 64, generator=g), "b": torch.randn(64, generator=g)}
                       for _ in range(12)],
            "half": torch.randn(300, 257, generator=g).half(),
            "bf": torch.randn(33, 65, generator=g).to(torch.bfloat16),
            "ids": torch.arange(1000, dtype=torch.int64),
            "flag": torch.tensor(True),
            "empty": torch.zeros(0, 3),
        },
        "a": {"x": torch.randn(256, 256, generator=g)},
        "b": {"y": torch.randn(128, 512, generator=g)},
        "shared": torch.randn(100, generator=g),
        "step": 7,
    }


def _flat(obj, prefix=""):
    """{name: tensor} of a nested structure, named as save() names them."""
    import torch

    out = {}
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(_flat(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def _same(a, b):
    import torch

    return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def _check(got, want, names=None):
    names = sorted(want) if names is None else names
    assert sorted(got) == sorted(names), (sorted(got), names)
    bad = [n for n in names if not _same(got[n], want[n])]
    assert not bad, f"differ from the reference: {bad}"


# Which keys each rank asks for in mode "keys": two pairs ask for different parts, all for one.
KEYS = {0: ["a", "shared"], 1: ["a", "shared"], 2: ["b", "shared"], 3: ["b", "shared"]}


def worker(mode, uri, rank, world, port, endpoint):
    import datetime

    import torch
    import torch.distributed as dist

    import s3direct

    timeout = datetime.timedelta(seconds=int(os.environ.get("S3D_TEST_PG_TIMEOUT", "60")))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    client = s3direct.Client(endpoint_url=endpoint)
    ref = reference()
    want = _flat(ref)
    group = dist.group.WORLD
    if mode == "nodes":
        # Two "nodes" of two ranks: ranks 0-1 and 2-3, as new_subgroups() groups a torchrun
        # job's ranks by node (group_size = ranks per node).
        group, _ = dist.new_subgroups(group_size=2, timeout=timeout)
    if mode in ("load", "nodes"):
        out = s3direct.load(uri, group=group, client=client)
        assert out["step"] == 7 and isinstance(out["model"]["layers"], list)
        _check(_flat(out), want)
        if mode == "nodes":
            # Loads follow one another on one group and beside another.
            for _ in range(2):
                out = s3direct.load(uri, keys="shared", group=dist.group.WORLD, client=client)
                _check(out, want, ["shared"])
    elif mode == "load_into":
        target = {"model": {k: torch.zeros_like(v) for k, v in _flat(ref["model"]).items()}}
        out = s3direct.load_into(target, uri, group=group, client=client, strict=False)
        _check(target["model"], _flat(ref["model"]))
        assert _same(out["a"]["x"], ref["a"]["x"]) and out["step"] == 7
    elif mode == "keys":
        out = s3direct.load(uri, keys=KEYS[rank], group=group, client=client)
        names = [n for n in want if any(n == k or n.startswith(k + ".") for k in KEYS[rank])]
        _check(out, want, sorted(names))
    elif mode in ("openfail", "fetchfail", "hang", "storepickle"):
        bad = 1 if mode in ("hang", "storepickle") else 2
        if rank == bad and mode == "storepickle":
            # A plain client of the store writes, under the key this rank would post, a
            # pickle that runs a command when loaded; then goes away without loading.
            import pickle

            class Evil:
                def __reduce__(self):
                    return (os.system, (f"touch {os.environ['S3D_TEST_MARKER']}",))

            group.get_group_store().set("s3direct/load/0/1/1", pickle.dumps(Evil()))
            time.sleep(60)
            return
        if rank == bad and mode == "hang":
            time.sleep(120)  # never calls load: the others must not wait for it forever
            return
        if rank == bad and mode == "openfail":
            client = s3direct.Client(endpoint_url="http://127.0.0.1:1")  # nothing listens
        if rank == bad and mode == "fetchfail":
            # The header is read; the fetch of this rank's share fails.
            from s3direct import _reader

            def read(self, dests, **kw):
                raise s3direct.TransferError(-10, "injected: cannot connect to 127.0.0.1:1")

            _reader.CheckpointReader.read = read
        t0 = time.monotonic()
        try:
            s3direct.load(uri, group=group, client=client)
        except Exception as e:
            print(f"RAISED {type(e).__name__} after {time.monotonic() - t0:.1f}s: {e}",
                  flush=True)
        else:
            print("NO ERROR", flush=True)
        os._exit(0)  # the group is broken: skip destroy_process_group
    print(f"OK rank {rank}", flush=True)
    dist.barrier()
    # Every rank has finished its work (the barrier). Leave without gloo's teardown: its
    # threads can abort the process at exit ("terminate called without an active
    # exception", CI of stop 43; pytorch/pytorch#190489), which says nothing about us.
    sys.stdout.flush()
    os._exit(0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(mode, uri, world, endpoint, *, env=None, wait=None, timeout=120):
    """Runs the ranks of this file; see spawn_ranks."""
    return spawn_ranks(__file__, world, lambda r, port: [mode, uri, str(r), str(world),
                                                         str(port), endpoint],
                       env=env, wait=wait, timeout=timeout)


def spawn_ranks(script, world, argv, *, env=None, wait=None, timeout=120):
    """Runs `script` once per rank with argv(rank, port) (port: a free rendezvous port);
    returns [(returncode, output)] of the ranks in `wait` (default all); the others are killed
    once those are done."""
    port = _free_port()
    e = dict(os.environ, **(env or {}))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(script), *argv(r, port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
             for r in range(world)]
    outs = []
    try:
        for r in (range(world) if wait is None else wait):
            out, _ = procs[r].communicate(timeout=timeout)
            outs.append((procs[r].returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def _ok(outs, what):
    bad = [(i, rc, out[-3000:]) for i, (rc, out) in enumerate(outs) if rc != 0]
    assert not bad, f"{what} failed: {bad}"


@pytest.fixture
def ckpt(bucket, s3_env):
    """(uri, object size) of the reference saved with a CRC32C per tensor."""
    import s3direct

    uri = f"s3://{bucket}/ranks/model.safetensors"
    s3direct.save(reference(), uri)
    return uri, s3direct.default_client().head(bucket, "ranks/model.safetensors").size


@pytest.fixture
def relay():
    from _slowproxy import SlowProxy

    host, port = "127.0.0.1", 8000
    m = re.match(r"https?://([^:/]+):(\d+)", os.environ.get("AWS_ENDPOINT_URL", ""))
    if m:
        host, port = m.group(1), int(m.group(2))
    with SlowProxy(host, port, rate=0) as p:
        yield p


# Opening a checkpoint reads its first 256 KiB in one GET (S3D_HEADER_PROBE in
# src/engine/ckpt_open.c), on every rank; HTTP response headers add a little per request.
PROBE = 256 << 10
SLACK = 64 << 10


def _served(relay, size, world, copies=1, opens=1):
    """The server served `copies` checkpoints: the tensor bytes that many times, plus one
    header read per rank and open."""
    got = relay.bytes_down
    assert copies * (size - PROBE) <= got <= copies * size + opens * world * PROBE + SLACK, \
        f"the server served {got} bytes: {got / size:.3f}x the checkpoint, not {copies}x"


# ---- the plan, as a table (no server) -------------------------------------------------------
def _plan(sizes, needers, world, split=None):
    from s3direct._ranks import plan

    split = split if split is not None else [False] * len(sizes)
    return [p.key() for p in plan(sizes, needers, world, split)]


def test_plan_whole_tensors_balanced():
    every = (0, 1)
    # Four equal tensors at world 2: two each, contiguous runs of file order.
    assert _plan([10, 10, 10, 10], [every] * 4, 2) == [
        (0, 0, 10, 0, every), (1, 0, 10, 0, every), (2, 0, 10, 1, every), (3, 0, 10, 1, every)]
    # A boundary inside a tensor goes to the side holding most of it; empty tensors: no piece.
    assert _plan([6, 0, 8, 6], [every] * 4, 2) == [
        (0, 0, 6, 0, every), (2, 0, 8, 0, every), (3, 0, 6, 1, every)]


def test_plan_splits_only_splittable_large_tensors():
    w4 = (0, 1, 2, 3)
    # One 100-byte tensor at world 4: whole when it has a CRC to check (to rank 1, whose run
    # of the bytes holds its middle)...
    assert _plan([100], [w4], 4) == [(0, 0, 100, 1, w4)]
    # ...cut in four runs when it may be split.
    assert _plan([100], [w4], 4, [True]) == [
        (0, 0, 25, 0, w4), (0, 25, 25, 1, w4), (0, 50, 25, 2, w4), (0, 75, 25, 3, w4)]
    pieces = _plan([7, 300, 5, 9, 3], [w4] * 5, 4, [True] * 5)
    load = [0] * 4
    for _, _, n, owner, _ in pieces:
        load[owner] += n
    assert sum(load) == 324 and max(load) - min(load) <= 20, load


def test_plan_subsets_go_to_their_needers():
    w4 = (0, 1, 2, 3)
    pieces = _plan([40, 40, 10, 10, 5], [w4, (0, 1), (2, 3), (1,), ()], 4)
    assert (0, 0, 40, 1, w4) in pieces and len(pieces) == 4
    by_i = {p[0]: p for p in pieces}
    assert by_i[1][3] == 0 and by_i[1][4] == (0, 1)  # rank 1 already holds tensor 0
    assert by_i[2][3] == 2 and by_i[2][4] == (2, 3)
    assert by_i[3][3] == 1 and by_i[3][4] == (1,)
    assert 4 not in by_i  # nobody needs it: never fetched


# ---- spawned ranks against the server -------------------------------------------------------
@pytest.mark.parametrize("world,checksum,sharded", [(2, True, False), (4, False, False),
                                                     (2, True, True)])
def test_load_shared_read_once(world, checksum, sharded, bucket, s3_env, relay):
    """Every rank byte-identical to the reference; the server serves the checkpoint once.
    Without CRC32Cs (world 4) the 32 MiB tensor is cut over the ranks by byte ranges. A
    sharded checkpoint (an index and its shards) is planned over all its shards at once."""
    import s3direct

    name = "ranks/model.safetensors.index.json" if sharded else "ranks/model.safetensors"
    uri = f"s3://{bucket}/{name}"
    s3direct.save(reference(), uri, checksum=checksum,
                  shard_size=(512 << 10) if sharded else None)
    client = s3direct.default_client()
    objs = [o for o in client.list(f"s3://{bucket}/ranks/") if o.key.endswith(".safetensors")]
    assert len(objs) >= 3 if sharded else len(objs) == 1, [o.key for o in objs]
    size = sum(o.size for o in objs)
    index = client.head(bucket, name).size if sharded else 0
    _ok(run_world("load", uri, world, relay.url), f"load at world {world}")
    # The index is read by every rank too (a few KiB).
    _served(relay, size + world * index, world, opens=len(objs))
    if not sharded:
        assert relay.bytes_down <= 1.05 * size, relay.bytes_down / size


def test_load_into_shared(ckpt, relay):
    uri, size = ckpt
    _ok(run_world("load_into", uri, 2, relay.url), "load_into at world 2")
    _served(relay, size, 2)


def test_keys_subsets_exchange_only_what_is_asked(ckpt, relay):
    """Ranks 0-1 ask for "a", ranks 2-3 for "b", all four for "shared": each is read once and
    each rank ends with exactly what it asked for."""
    uri, _ = ckpt
    _ok(run_world("keys", uri, 4, relay.url), "keys at world 4")
    ref = _flat(reference())
    asked = sum(t.numel() * t.element_size() for n, t in ref.items()
                if n.startswith(("a.", "b.")) or n == "shared")
    # The asked tensor bytes once, plus four header reads; the 32 MiB "model" never.
    assert asked <= relay.bytes_down <= asked + 4 * PROBE + SLACK, \
        (relay.bytes_down, asked)


def test_node_local_subgroups(ckpt, relay):
    """Two "nodes" of two ranks (new_subgroups): one read per node, shared inside it. Then
    two loads of one small tensor over the whole world: each read once."""
    uri, size = ckpt
    _ok(run_world("nodes", uri, 4, relay.url), "two nodes of two ranks")
    _served(relay, size, 4, copies=2, opens=3)


@pytest.mark.parametrize("mode", ["openfail", "fetchfail"])
def test_failed_rank_raises_on_every_rank(mode, ckpt, relay):
    """Rank 2 cannot reach the server (at the open, or during the fetch of its share): every
    rank raises the same error class at once, naming rank 2 and carrying its error text."""
    uri, _ = ckpt
    outs = run_world(mode, uri, 4, relay.url, timeout=90)
    for r, (rc, out) in enumerate(outs):
        line = next((x for x in out.splitlines() if x.startswith("RAISED")), None)
        assert line is not None, (r, out[-2000:])
        assert line.startswith("RAISED TransferError"), (r, line)
        if r != 2:
            assert "rank 2 of the group (global 2) failed" in line, (r, line)
        assert "127.0.0.1:1" in line, (r, line)


def test_hung_rank_is_named_within_the_timeout(ckpt, relay):
    """Rank 1 never calls load: the others raise a Timeout naming it once the group's timeout
    (5 s here) has passed, instead of waiting forever."""
    uri, _ = ckpt
    outs = run_world("hang", uri, 3, relay.url, env={"S3D_TEST_PG_TIMEOUT": "5"},
                     wait=[0, 2], timeout=90)
    for (rc, out) in outs:
        line = next((x for x in out.splitlines() if x.startswith("RAISED")), None)
        assert line is not None, out[-2000:]
        assert line.startswith("RAISED Timeout") and "rank 1 of the group" in line, line
        secs = float(re.search(r"after ([\d.]+)s", line).group(1))
        assert secs < 30, line


def test_store_values_are_never_unpickled(ckpt, relay, tmp_path):
    """Another client of the process group's store (a TCPStore that listens unauthenticated)
    writes a pickle under the key a rank's load waits for: the load fails naming that rank,
    and the pickle's code never runs (it used to run in every rank that read it)."""
    uri, _ = ckpt
    marker = tmp_path / "ran"
    outs = run_world("storepickle", uri, 2, relay.url,
                     env={"S3D_TEST_MARKER": str(marker), "S3D_TEST_PG_TIMEOUT": "20"},
                     wait=[0], timeout=90)
    rc, out = outs[0]
    line = next((x for x in out.splitlines() if x.startswith("RAISED")), None)
    assert line is not None, out[-2000:]
    assert line.startswith("RAISED TransferError") and "rank 1 of the group" in line, line
    assert "not s3direct's" in line, line
    assert not marker.exists()


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
           sys.argv[6])
