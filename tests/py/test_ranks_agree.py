"""load(group=): what the ranks must agree on before they share bytes, and how a broken exchange
is reported. Spawned gloo ranks over local files (test_ranks.py covers the shared read over S3).

- A file replaced (save's atomic rename) between the ranks' opens: every rank raises, naming
  the ranks that opened another version; none returns a mix of the two (they used to: t0-t7
  old, t8-t15 new, and the ranks disagreed on "step").
- Ranks that load different files, or pass different verify=: an error naming the rank that
  differs (different verify= gave different plans and a SIGABRT inside gloo).
- A rank that dies or stops during the exchange: an S3DirectError naming it, not gloo's text.

Run as a script, this file is one rank: test_ranks_agree.py MODE PATH RANK WORLD PORT."""

from __future__ import annotations

import os
import sys
import time

import pytest

from test_ranks import _check, _flat, reference, spawn_ranks


def other():
    """The reference's shapes and dtypes with other values and step 8: a later save."""
    import torch

    ref = reference()

    def bump(x):
        if isinstance(x, torch.Tensor):
            return x + 1 if x.dtype != torch.bool else ~x
        if isinstance(x, dict):
            return {k: bump(v) for k, v in x.items()}
        if isinstance(x, list):
            return [bump(v) for v in x]
        return x

    out = bump(ref)
    out["step"] = 8
    return out


def worker(mode, path, rank, world, port):
    import datetime

    import torch.distributed as dist

    import s3direct
    from s3direct import _ranks, _reader

    timeout = datetime.timedelta(seconds=int(os.environ.get("S3D_TEST_PG_TIMEOUT", "60")))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    kw = {}
    flag = path + ".opened"
    if mode == "replace":
        if rank == 0:
            # Says when this rank has opened the file; rank 1 replaces it then, and opens.
            init = _reader.CheckpointReader.__init__

            def opened(self, *a, **k):
                init(self, *a, **k)
                open(flag, "w").close()

            _reader.CheckpointReader.__init__ = opened
        else:
            while not os.path.exists(flag):
                time.sleep(0.02)
            s3direct.save(other(), path)
    elif mode == "uri" and rank == 1:
        path = path + ".other"
    elif mode == "verify" and rank == 1:
        kw["verify"] = False
    elif mode in ("die", "stop") and rank == 1:
        def gone(self, pieces, views):
            if mode == "die":
                os._exit(3)
            time.sleep(120)

        _ranks.Session._exchange = gone
    t0 = time.monotonic()
    try:
        out = s3direct.load(path, group=dist.group.WORLD, **kw)
    except Exception as e:
        print(f"RAISED {type(e).__name__} after {time.monotonic() - t0:.1f}s: {e}", flush=True)
    else:
        got = _flat(out)
        olds = sorted(n for n, t in _flat(reference()).items() if _same_bytes(got[n], t))
        print(f"NO ERROR step={out['step']} old={len(olds)}/{len(got)}", flush=True)
    os._exit(0)  # the group may be broken: skip destroy_process_group


def _same_bytes(a, b):
    import torch

    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def run(mode, path, world=2, *, env=None, wait=None, timeout=120):
    """[(returncode, output)] of the ranks in wait (default all); the others are killed."""
    return spawn_ranks(__file__, world, lambda r, port: [mode, path, str(r), str(world),
                                                         str(port)],
                       env=env, wait=wait, timeout=timeout)


def _raised(out):
    line = next((x for x in out.splitlines() if x.startswith(("RAISED", "NO ERROR"))), None)
    assert line is not None, out[-3000:]
    return line


@pytest.fixture
def saved(tmp_path):
    import s3direct

    path = str(tmp_path / "model.safetensors")
    s3direct.save(reference(), path)
    return path


def test_file_replaced_between_opens_raises_on_every_rank(saved):
    """Rank 0 opens; the file is replaced by a save of the same shapes; rank 1 opens the new
    one. Every rank raises (the error S3 gives for a replaced object), naming rank 1."""
    outs = run("replace", saved)
    for r, (rc, out) in enumerate(outs):
        line = _raised(out)
        assert line.startswith("RAISED TransferError"), (r, line)
        assert "different versions" in line and "rank 1 of the group" in line, (r, line)
        assert "inode or modification time" in line, (r, line)
    # The replace happened: a load now gives the new checkpoint whole.
    import s3direct

    got = s3direct.load(saved)
    assert got["step"] == 8
    _check(_flat(got), _flat(other()))


def test_different_files_are_named_not_blamed_on_a_replace(saved):
    import s3direct

    s3direct.save(other(), saved + ".other")
    for r, (rc, out) in enumerate(run("uri", saved)):
        line = _raised(out)
        assert line.startswith("RAISED InvalidArgument"), (r, line)
        assert "load different checkpoints" in line and "rank 1 of the group" in line, line
        assert saved + ".other" in line and "replaced" not in line, line


def test_different_verify_is_an_error_not_a_crash(saved):
    """verify=False on rank 1 lets the 32 MiB tensor be cut over the ranks, verify=True not:
    the plans would differ. Both ranks raise, naming rank 1's verify=."""
    for r, (rc, out) in enumerate(run("verify", saved)):
        assert rc == 0, (r, rc, out[-3000:])
        line = _raised(out)
        assert line.startswith("RAISED InvalidArgument"), (r, line)
        assert "different verify=" in line and "rank 1 of the group" in line, line


@pytest.mark.parametrize("mode", ["die", "stop"])
def test_rank_lost_in_the_exchange_is_named(mode, saved):
    """Rank 1 exits (or stops past the group's 5 s timeout) when the exchange starts: rank 0
    raises a TransferError naming rank 1, not torch.distributed's RuntimeError."""
    rc, out = run(mode, saved, env={"S3D_TEST_PG_TIMEOUT": "5"}, wait=[0], timeout=90)[0]
    line = _raised(out)
    assert line.startswith("RAISED TransferError"), line
    assert "exchange of tensor bytes between the ranks failed" in line, line
    assert "rank 1 of the group (global 1) did not report after it" in line, line


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
