"""The Python API at its edges, as PyTorch, safetensors and boto3 users expect it (issue 11):
writers that are never closed, builtin exception bases, torch.save files given to load."""

from __future__ import annotations

import gc
import os
import pickle
import warnings

import pytest
import torch

import s3direct
from s3direct import errors


@pytest.fixture(params=["local", "s3"])
def base(request, tmp_path, lib_path):
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3_env")
    return f"s3://{request.getfixturevalue('bucket')}"


def exists(uri):
    if uri.startswith("s3://"):
        try:
            with s3direct.reader(uri):
                return True
        except s3direct.NoSuchKey:
            return False
    return os.path.exists(uri)


# ---- writers ---------------------------------------------------------------------------------
def test_writer_garbage_collected_unclosed_warns_and_writes_nothing(base):
    uri = f"{base}/lost.pt"
    with pytest.warns(ResourceWarning, match="lost.pt.*nothing was written"):
        w = s3direct.writer(uri)
        w.write(b"x" * 100)
        del w
        gc.collect()
    assert not exists(uri)


def test_torch_save_into_a_writer_outside_with_is_refused_at_once(base):
    """torch.save never closes its file: torch.save(obj, s3direct.writer(uri)) would save
    nothing, so its first write raises (a ValueError naming the with block), nothing is
    written and no ResourceWarning follows (issue 37)."""
    uri = f"{base}/refused.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(s3direct.InvalidArgument, match=r"outside a with block.*with "
                           r"s3direct\.writer\(uri\) as f: torch\.save\(obj, f\)"):
            torch.save({"a": torch.arange(10)}, s3direct.writer(uri))
        gc.collect()
    assert not exists(uri)
    # explicit close after torch.save (no with) is refused the same way
    w = s3direct.writer(uri)
    with pytest.raises(ValueError, match="outside a with block"):
        torch.save({"a": torch.arange(3)}, w)
    w.close()
    assert not exists(uri)
    # plain writes with an explicit close() are not torch.save's: they still work
    w = s3direct.writer(uri)
    w.write(b"abc")
    w.close()
    with s3direct.reader(uri) as r:
        assert r.read() == b"abc"


def test_writer_with_block_saves(base):
    uri = f"{base}/kept.pt"
    obj = {"a": torch.arange(10), "step": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with s3direct.writer(uri) as f:
            torch.save(obj, f)
        gc.collect()
    back = torch.load(s3direct.reader(uri), weights_only=True)
    assert back["step"] == 3 and torch.equal(back["a"], obj["a"])


def test_writer_closed_or_empty_does_not_warn(base):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        w = s3direct.writer(f"{base}/x.bin")
        w.write(b"abc")
        w.close()
        del w
        gc.collect()


# ---- exceptions ------------------------------------------------------------------------------
def test_writer_settings_are_bounded_as_every_transfer(lib_path):
    """An S3 writer's max_concurrency and part_size are checked as every other transfer's: over
    1024 or 5 GiB is InvalidArgument at once, with the C library's message."""
    with s3direct.Client(endpoint_url="http://127.0.0.1:9") as c:
        with pytest.raises(s3direct.InvalidArgument, match="max_concurrency 5000 is over 1024"):
            s3direct.writer("s3://bucket/key", client=c, max_concurrency=5000)
        with pytest.raises(s3direct.InvalidArgument, match="part_size 6442450944 is over 5 GiB"):
            s3direct.writer("s3://bucket/key", client=c, part_size=6 << 30)


def test_negative_or_too_wide_numbers_are_refused_not_wrapped(lib_path):
    """A negative size or count (or one wider than its C field) is InvalidArgument naming the
    argument; before, ctypes wrapped -1 into 4294967295 (a max_concurrency "over 1024") or
    2**64 - 5 (a part_size the client then took)."""
    for kw in ({"part_size": -5}, {"max_concurrency": -1}, {"staging_bytes": -1},
               {"max_attempts": 1 << 32}, {"deadline_ms": -1}):
        name = next(iter(kw))
        with pytest.raises(s3direct.InvalidArgument, match=f"^{name} must be from 0 to"):
            s3direct.Client(endpoint_url="http://127.0.0.1:9", **kw)
    with pytest.raises(TypeError, match="part_size must be an integer"):
        s3direct.Client(endpoint_url="http://127.0.0.1:9", part_size=8.5e6)
    with s3direct.Client(endpoint_url="http://127.0.0.1:9") as c:
        with pytest.raises(s3direct.InvalidArgument, match="^max_concurrency must be from 0 to"):
            s3direct.writer("s3://bucket/key", client=c, max_concurrency=-1)
        with pytest.raises(s3direct.InvalidArgument, match="^part_size must be from 0 to"):
            s3direct.writer("s3://bucket/key", client=c, part_size=-1)


def test_builtin_bases():
    assert issubclass(s3direct.NoSuchKey, FileNotFoundError)
    assert issubclass(s3direct.NoSuchFile, FileNotFoundError)
    assert issubclass(s3direct.NoSuchBucket, FileNotFoundError)
    for cls in (s3direct.AccessDenied, s3direct.SignatureDoesNotMatch,
                s3direct.InvalidAccessKeyId):
        assert issubclass(cls, PermissionError)
    assert issubclass(s3direct.InvalidArgument, ValueError)
    e = errors.make_error(errors._CODES["ETIMEDOUT"], "GET s3://b/k: timed out")
    assert isinstance(e, s3direct.Timeout) and isinstance(e, TimeoutError)
    assert isinstance(e, s3direct.TransferError)
    assert str(e) == "GET s3://b/k: timed out"
    # Pickles intact (multiprocessing, DCP).
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is s3direct.Timeout and str(e2) == str(e) and e2.code == e.code


def test_missing_key_and_bucket_are_file_not_found(s3_env, bucket):
    with pytest.raises(FileNotFoundError) as ei:
        s3direct.load(f"s3://{bucket}/nope.safetensors")
    assert isinstance(ei.value, s3direct.NoSuchKey)
    with pytest.raises(FileNotFoundError):
        s3direct.load(f"s3://{bucket}-missing/x.safetensors")


def test_wrong_secret_is_permission_error(s3_env, bucket):
    c = s3direct.Client(access_key_id=s3_env["AWS_ACCESS_KEY_ID"],
                        secret_access_key="wrong" * 8, max_attempts=1)
    with pytest.raises(PermissionError) as ei:
        s3direct.save({"a": torch.ones(1)}, f"s3://{bucket}/x.safetensors", client=c)
    assert isinstance(ei.value, s3direct.AccessDenied)


def test_missing_local_folder(tmp_path, lib_path):
    uri = str(tmp_path / "no" / "such" / "x.safetensors")
    with pytest.raises(FileNotFoundError) as ei:
        s3direct.save({"a": torch.ones(1)}, uri)
    assert isinstance(ei.value, s3direct.NoSuchFile)
    assert "does not exist" in str(ei.value) and "temporary" not in str(ei.value)
    with pytest.raises(FileNotFoundError):
        s3direct.load(str(tmp_path / "absent.safetensors"))


# ---- torch.save files where safetensors is expected -------------------------------------------
@pytest.mark.parametrize("zipfile", [True, False])
def test_torch_save_file_gets_a_hint(base, zipfile):
    uri = f"{base}/model.pt"
    with s3direct.writer(uri) as f:
        torch.save({"w": torch.ones(3)}, f, _use_new_zipfile_serialization=zipfile)
    with pytest.raises(s3direct.FormatError, match=r"torch\.save file.*torch\.load\("
                                                   r"s3direct\.reader"):
        s3direct.load(uri)


# ---- load_into: entries without a target ------------------------------------------------------
def small_training_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    return model, opt


def test_load_into_returns_untargeted_entries(base):
    model, opt = small_training_state()
    rng = torch.get_rng_state()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 7, "rng": rng}
    uri = f"{base}/state.safetensors"
    s3direct.save(state, uri)
    m2 = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-3)
    for strict in (True, False):
        out = s3direct.load_into({"model": m2, "optim": o2}, uri, strict=strict)
        assert out["step"] == 7
        assert isinstance(out["rng"], torch.Tensor) and torch.equal(out["rng"], rng)
        for k, v in model.state_dict().items():
            assert torch.equal(m2.state_dict()[k], v)


def test_load_into_module_still_strict_inside(base):
    model, _ = small_training_state()
    uri = f"{base}/m.safetensors"
    sd = dict(model.state_dict())
    sd["9.weight"] = torch.ones(2)
    s3direct.save({"model": sd, "rng": torch.get_rng_state()}, uri)
    m2 = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    with pytest.raises(s3direct.StateMismatch) as ei:
        s3direct.load_into({"model": m2}, uri)
    assert ei.value.unexpected == ["model.9.weight"]
    out = s3direct.load_into({"model": m2}, uri, strict=False)
    assert isinstance(out["rng"], torch.Tensor)


# ---- nn.Parameter and requires_grad ------------------------------------------------------------
def test_parameter_and_requires_grad_round_trip(base):
    p = torch.nn.Parameter(torch.randn(3))
    frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    g = torch.randn(2).requires_grad_()
    obj = {"p": p, "frozen": frozen, "g": g, "plain": torch.ones(2), "ints": torch.arange(3)}
    uri = f"{base}/params.safetensors"
    s3direct.save(obj, uri)
    back = s3direct.load(uri)
    assert type(back["p"]) is torch.nn.Parameter and back["p"].requires_grad
    assert type(back["frozen"]) is torch.nn.Parameter and not back["frozen"].requires_grad
    assert type(back["g"]) is torch.Tensor and back["g"].requires_grad
    assert not back["plain"].requires_grad and not back["ints"].requires_grad
    assert torch.equal(back["p"].detach(), p.detach())
    # A plain safetensors reader sees ordinary tensors.
    if not uri.startswith("s3://"):
        from safetensors.torch import load_file

        assert set(load_file(uri)) == set(obj)


# ---- URIs --------------------------------------------------------------------------------------
def test_file_uri_is_a_local_path(tmp_path, lib_path):
    path = tmp_path / "a b.safetensors"
    s3direct.save({"w": torch.ones(2)}, "file://" + str(path).replace(" ", "%20"))
    assert path.exists()
    assert torch.equal(s3direct.load(f"file://{path}")["w"], torch.ones(2))
    assert torch.equal(s3direct.load(path)["w"], torch.ones(2))  # os.PathLike
    with s3direct.writer(f"file://{tmp_path}/x.bin") as f:
        f.write(b"hi")
    assert s3direct.reader(f"file://{tmp_path}/x.bin").read() == b"hi"


@pytest.mark.parametrize("bad", ["s3:/bucket/key", "s3:bucket/key", "https://host/b/k",
                                 "gs://b/k", "file://otherhost/x"])
def test_non_s3_schemes_are_errors_not_file_names(tmp_path, lib_path, bad, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for call in (lambda: s3direct.load(bad), lambda: s3direct.save({"a": torch.ones(1)}, bad),
                 lambda: s3direct.reader(bad), lambda: s3direct.writer(bad)):
        with pytest.raises(s3direct.ConfigError) as ei:
            call()
        assert bad in str(ei.value)
    assert os.listdir(tmp_path) == []
    if bad.startswith("s3:/"):
        assert "s3://bucket/key" in str(ei.value)


def test_folder_loads_the_model_in_it(base):
    w = {"a": torch.arange(4.0), "b": torch.ones(3)}
    single, sharded = f"{base}/single/", f"{base}/sharded/"
    if not base.startswith("s3://"):
        os.makedirs(single)
        os.makedirs(sharded)
    s3direct.save(w, single)
    s3direct.save(w, sharded, shard_size=16)
    assert exists(single + "model.safetensors")
    assert exists(sharded + "model.safetensors.index.json")
    for folder in (single, sharded):
        back = s3direct.load(folder)
        assert torch.equal(back["a"], w["a"]) and torch.equal(back["b"], w["b"])
        if not base.startswith("s3://"):
            back = s3direct.load(folder.rstrip("/"))  # a local directory needs no slash
            assert torch.equal(back["a"], w["a"])
    empty = f"{base}/empty/"
    if not base.startswith("s3://"):
        os.makedirs(empty)
    with pytest.raises(FileNotFoundError, match="neither model.safetensors nor"):
        s3direct.load(empty)


def test_map_location_is_an_alias_of_device(tmp_path, lib_path):
    uri = str(tmp_path / "m.safetensors")
    s3direct.save({"a": torch.ones(2)}, uri)
    assert s3direct.load(uri, map_location="cpu")["a"].device.type == "cpu"
    assert s3direct.load(uri, map_location=torch.device("cpu"))["a"].device.type == "cpu"
    with pytest.raises(ValueError, match="map_location"):
        s3direct.load(uri, map_location={"cuda:0": "cpu"})
    with pytest.raises(ValueError, match="disagree"):
        s3direct.load(uri, device="cpu", map_location="cuda:0")


# ---- Client: pickling, list, delete ------------------------------------------------------------
def _load_in_child(client, uri):
    return float(s3direct.load(uri, client=client)["a"].sum())


def test_client_takes_the_profiles_s3_transfer_settings(tmp_path, monkeypatch):
    """~/.aws/config's s3 max_concurrent_requests / multipart_chunksize / multipart_threshold,
    as boto3's s3transfer and the AWS CLI name them; arguments win; a bad value is refused."""
    conf = tmp_path / "config"
    conf.write_text("[profile t]\ns3 =\n  max_concurrent_requests = 20\n"
                    "  multipart_chunksize = 16MB\n  multipart_threshold = 64MB\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
    with s3direct.Client(endpoint_url="http://127.0.0.1:9", profile="t") as c:
        cfg = c.config()
    assert (cfg["max_concurrency"], cfg["part_size"], cfg["multipart_threshold"]) == \
        (20, 16 << 20, 64 << 20)
    with s3direct.Client(endpoint_url="http://127.0.0.1:9", profile="t", max_concurrency=2,
                         part_size=5 << 20) as c:
        cfg = c.config()
    assert (cfg["max_concurrency"], cfg["part_size"], cfg["multipart_threshold"]) == \
        (2, 5 << 20, 64 << 20)
    conf.write_text("[profile t]\ns3 =\n  max_concurrent_requests = many\n")
    with pytest.raises(s3direct.ConfigError, match="max_concurrent_requests"):
        s3direct.Client(endpoint_url="http://127.0.0.1:9", profile="t")


def test_client_pickles_and_works_in_spawned_workers(s3_env, bucket):
    import multiprocessing as mp

    c = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"], max_concurrency=3,
                        part_size=5 << 20)
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.handle.value != c.handle.value
    assert c2.config()["max_concurrency"] == 3 and c2.config()["part_size"] == 5 << 20
    uri = f"s3://{bucket}/p.safetensors"
    s3direct.save({"a": torch.ones(4)}, uri, client=c)
    with mp.get_context("spawn").Pool(2) as pool:
        assert pool.starmap(_load_in_child, [(c, uri), (c, uri)]) == [4.0, 4.0]
    assert "secret" not in repr(c)


def test_client_list_and_delete(s3_env, bucket):
    c = s3direct.Client()
    for i in range(3):
        s3direct.save({"a": torch.ones(1)}, f"s3://{bucket}/run/step{i}.safetensors", client=c)
    s3direct.save({"a": torch.ones(1)}, f"s3://{bucket}/run/sub/x.safetensors", client=c)
    got = c.list(f"s3://{bucket}/run/")
    assert [o.key for o in got] == [f"run/step{i}.safetensors" for i in range(3)] + \
        ["run/sub/x.safetensors"]
    assert all(o.size > 0 and o.uri == f"s3://{bucket}/{o.key}" for o in got)
    top = c.list(f"s3://{bucket}/run/", delimiter="/")
    assert [(o.key, o.is_prefix) for o in top][-1] == ("run/sub/", True)
    c.delete([o.uri for o in got if "step" in o.key][:2])
    c.delete(f"s3://{bucket}/run/missing")  # absent keys are fine, as on S3
    assert [o.key for o in c.list(f"s3://{bucket}/run")] == ["run/step2.safetensors",
                                                             "run/sub/x.safetensors"]
    with pytest.raises(s3direct.ConfigError):
        c.list("/tmp")


# ---- tied weights -----------------------------------------------------------------------------
class TiedLM(torch.nn.Module):
    def __init__(self, tie=True):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 4)
        self.mid = torch.nn.Linear(4, 4)
        self.lm_head = torch.nn.Linear(4, 11, bias=False)
        if tie:
            self.lm_head.weight = self.embed.weight


def test_tied_weights_saved_once_and_restored(tmp_path, base):
    from safetensors.torch import load_model

    torch.manual_seed(0)
    m = TiedLM()
    uri = f"{base}/tied.safetensors"
    s3direct.save(m, uri)
    with s3direct.safe_open(uri) as f:
        assert "lm_head.weight" not in f.keys() and "embed.weight" in f.keys()
        assert f.metadata()["lm_head.weight"] == "embed.weight"
    back = s3direct.load(uri)
    assert back["lm_head.weight"] is back["embed.weight"]
    assert list(back) == list(m.state_dict())
    m2 = TiedLM()
    s3direct.load_into(m2, uri)
    assert m2.lm_head.weight is m2.embed.weight
    assert torch.equal(m2.embed.weight, m.embed.weight)
    untied = TiedLM(tie=False)
    s3direct.load_into(untied, uri)  # filled from the kept tensor the metadata names
    assert torch.equal(untied.lm_head.weight, m.embed.weight)
    if not base.startswith("s3://"):
        m3 = TiedLM()
        load_model(m3, uri)  # safetensors' own loader accepts the file
        assert torch.equal(m3.embed.weight, m.embed.weight)


def test_tied_name_by_key_and_in_safe_open(tmp_path, base):
    """A tied name load() returns is found by keys= and by safe_open, as that tensor (issue 24:
    both raised KeyError); a name that is neither stored nor tied still raises, even when the
    user's metadata maps it to a tensor name."""
    torch.manual_seed(1)
    m = TiedLM()
    uri = f"{base}/tied-keys.safetensors"
    s3direct.save({"model": m, "step": 3}, uri, metadata={"note": "model.embed.weight"})
    one = s3direct.load(uri, keys=["model.lm_head.weight"])
    assert list(one) == ["model.lm_head.weight"]
    assert torch.equal(one["model.lm_head.weight"], m.embed.weight)
    both = s3direct.load(uri, keys="model")
    assert both["model.lm_head.weight"] is both["model.embed.weight"]
    assert set(both) == {"model.embed.weight", "model.mid.weight", "model.mid.bias",
                         "model.lm_head.weight"}
    with s3direct.safe_open(uri) as f:
        assert torch.equal(f.get_tensor("model.lm_head.weight"), m.embed.weight)
        assert torch.equal(f.get_slice("model.lm_head.weight")[2:5], m.embed.weight[2:5])
        assert "model.lm_head.weight" not in f.keys()  # stored once, as safetensors lists it
        with pytest.raises(KeyError):
            f.get_tensor("note")
    with pytest.raises(KeyError):
        s3direct.load(uri, keys=["note"])


def test_load_into_tied_model_from_save_model_file(tmp_path, lib_path):
    from safetensors.torch import save_model

    torch.manual_seed(1)
    m = TiedLM()
    path = str(tmp_path / "hf" / "model.safetensors")
    os.makedirs(os.path.dirname(path))
    save_model(m, path)
    m2 = TiedLM()
    s3direct.load_into(m2, str(tmp_path / "hf"))
    assert m2.lm_head.weight is m2.embed.weight
    assert torch.equal(m2.embed.weight, m.embed.weight)
    assert torch.equal(m2.mid.weight, m.mid.weight)


# ---- logging -----------------------------------------------------------------------------------
def _run_py(code, **env):
    import subprocess
    import sys

    e = dict(os.environ)
    e.pop("S3D_LOG", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=120)


_LOG_CODE = """
import logging, sys
{setup}
import s3direct
s3direct.Client(endpoint_url="http://127.0.0.1:9", device=-1).close()
print("done")
"""


def test_library_log_goes_through_logging(lib_path):
    # The library logs at info how it configured the client (CA bundle, device).
    r = _run_py(_LOG_CODE.format(setup="logging.basicConfig(level=logging.INFO, "
                                       "format='%(name)s|%(levelname)s|%(message)s')"))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("s3direct|INFO|")]
    assert lines, r.stderr
    # Default: WARNING and above only, nothing printed for info lines.
    r = _run_py(_LOG_CODE.format(setup=""))
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_s3d_log_keeps_working(lib_path):
    r = _run_py(_LOG_CODE.format(setup=""), S3D_LOG="info")
    assert r.returncode == 0, r.stderr
    assert any(ln.startswith("[s3direct ") and " INFO] " in ln for ln in r.stderr.splitlines()), \
        r.stderr
    # And a logger configured to warnings still gets the library's info lines S3D_LOG asks for.
    r = _run_py(_LOG_CODE.format(setup="logging.basicConfig(level=logging.WARNING, "
                                       "format='%(name)s|%(levelname)s|%(message)s')"),
                S3D_LOG="info")
    assert any(ln.startswith("s3direct|INFO|") for ln in r.stderr.splitlines()), r.stderr


# ---- progress ----------------------------------------------------------------------------------
def test_progress_true_off_terminal_writes_one_summary_line(tmp_path, lib_path, capsys):
    uri = str(tmp_path / "p.safetensors")
    s3direct.save({"a": torch.zeros(1 << 18)}, uri, progress=True)
    s3direct.load(uri, progress=True)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    import re

    assert re.fullmatch(r"s3direct: save p\.safetensors: [\d.]+ (KiB|MiB) in [\d.]+ s "
                        r"\([\d.]+ \w+/s\)", err[0]), err
    assert err[1].startswith("s3direct: load p.safetensors: 1.00 MiB in "), err


def test_progress_on_terminal_without_tqdm_prints_plain_lines(lib_path, monkeypatch):
    import io
    import sys

    from s3direct._progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import fails
    out = Tty()
    with Progress(True, "load x", stream=out) as p:
        assert p.fn is not None
        p._cb(None, 512, 1024)
        p._cb(None, 1024, 1024)
    lines = out.getvalue().splitlines()
    assert lines[0] == "s3direct: load x:  50.0% 512 B of 1.00 KiB"
    assert lines[-1].startswith("s3direct: load x: 1.00 KiB in ")


def test_progress_in_a_notebook_uses_tqdm_auto(lib_path, monkeypatch):
    """progress=True in a Jupyter kernel (no tty) shows tqdm.auto's bar (the notebook widget)
    instead of one line at the end (issue 24.3)."""
    import io
    import sys
    import types

    from s3direct import _progress

    made = []

    class FakeBar:
        def __init__(self, **kw):
            made.append(kw)
            self.total = kw.get("total")
            self.n = 0

        def update(self, k):
            self.n += k

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "tqdm.auto", types.SimpleNamespace(tqdm=FakeBar))
    monkeypatch.setattr(_progress, "_in_notebook", lambda: True)
    out = io.StringIO()  # not a tty
    with _progress.Progress(True, "load x", stream=out) as p:
        p._cb(None, 512, 1024)
        p._cb(None, 1024, 1024)
        assert p._bar.n == 1024 and p._bar.total == 1024
    assert len(made) == 1 and made[0]["desc"] == "s3direct: load x"
    assert out.getvalue() == ""


def test_progress_off_terminal_prints_periodic_lines(lib_path, monkeypatch):
    """Off a terminal (a log), a line every 10 s while a transfer runs, then the summary;
    a short transfer prints the summary only."""
    import io

    from s3direct import _progress

    now = [1000.0]
    monkeypatch.setattr(_progress.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(_progress, "_in_notebook", lambda: False)
    out = io.StringIO()
    with _progress.Progress(True, "load big", stream=out) as p:
        p._cb(None, 100, 1000)       # at once: nothing yet
        now[0] += 10.5
        p._cb(None, 400, 1000)       # after 10 s: a line
        now[0] += 3
        p._cb(None, 500, 1000)       # 3 s later: none
        now[0] += 8
        p._cb(None, 900, 1000)       # 11 s after the last: a line
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["s3direct: load big:  40.0% 400 B of 1000 B",
                         "s3direct: load big:  90.0% 900 B of 1000 B"], lines
    assert len(lines) == 3 and lines[2].startswith("s3direct: load big: 1000 B in "), lines


def test_debug_logging_shows_each_request(s3_env, bucket, lib_path):
    """logging at DEBUG shows every request (method, object, range, status, bytes, time), as
    docs/python.md says (issue 24.3: it showed none)."""
    r = _run_py("import logging, torch, s3direct\n"
                "logging.basicConfig(level=logging.DEBUG, format='%(name)s|%(message)s')\n"
                f"s3direct.save({{'a': torch.ones(3)}}, 's3://{bucket}/d.safetensors')\n"
                f"s3direct.load('s3://{bucket}/d.safetensors')\n")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("s3direct|")]
    assert any(ln.startswith(f"s3direct|PUT PutObject s3://{bucket}/d.safetensors: HTTP 200")
               for ln in lines), lines
    assert any(ln.startswith(f"s3direct|GET GetObject s3://{bucket}/d.safetensors bytes=")
               and ": HTTP 206" in ln for ln in lines), lines


def test_folder_named_without_slash(base):
    """load("s3://b/model") where model/ is a folder loads the model in it, as
    from_pretrained would (issue 24.3: a bare 404 NoSuchKey); a folder with no model file
    says so; a name that is neither still raises NoSuchKey / NoSuchFile."""
    if not base.startswith("s3://"):
        os.makedirs(f"{base}/model")
        os.makedirs(f"{base}/other")
    s3direct.save({"a": torch.arange(4)}, f"{base}/model/")
    assert torch.equal(s3direct.load(f"{base}/model")["a"], torch.arange(4))
    with s3direct.safe_open(f"{base}/model") as f:
        assert f.keys() == ["a"]
    s3direct.save({"b": torch.ones(2)}, f"{base}/other/weights.safetensors")
    with pytest.raises((s3direct.NoSuchKey, s3direct.NoSuchFile),
                       match="neither model.safetensors nor model.safetensors.index.json"):
        s3direct.load(f"{base}/other")
    with pytest.raises((s3direct.NoSuchKey, s3direct.NoSuchFile)):
        s3direct.load(f"{base}/absent")


def test_numpy_leaves_stored_as_tensors(base):
    """numpy arrays and scalars in a training state (np.random.get_state(), metrics) are
    stored as tensors and come back as numpy, without allow_pickle (issue 24.3: refused);
    the files stay plain safetensors; an object array is still refused."""
    import numpy as np

    np.random.seed(5)
    np.random.rand(3)
    state = {"np_rng": np.random.get_state(), "torch_rng": torch.get_rng_state(),
             "grid": np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2],  # not contiguous
             "zero_d": np.array(2.5), "big_endian": np.arange(4, dtype=">f4"),
             "u16": np.arange(5, dtype=np.uint16), "flags": np.array([True, False]),
             "step": np.int64(9), "ok": np.bool_(True), "loss": np.float32(0.25),
             "lr": np.float64(0.125)}
    uri = f"{base}/np.safetensors"
    s3direct.save(state, uri)
    back = s3direct.load(uri)
    np.random.set_state(back["np_rng"])
    want = np.random.rand(4)
    np.random.set_state(state["np_rng"])
    assert np.array_equal(want, np.random.rand(4))
    assert back["np_rng"][0] == "MT19937" and back["np_rng"][2:] == state["np_rng"][2:]
    for k in ("grid", "zero_d", "big_endian", "u16", "flags"):
        assert isinstance(back[k], np.ndarray), k
        assert back[k].shape == state[k].shape and np.array_equal(back[k], state[k]), k
        assert back[k].dtype == state[k].dtype.newbyteorder("="), k
    assert type(back["step"]) is np.int64 and back["step"] == 9
    assert type(back["ok"]) is np.bool_ and back["ok"]
    assert type(back["loss"]) is np.float32 and back["loss"] == np.float32(0.25)
    assert back["lr"] == 0.125
    assert torch.equal(back["torch_rng"], state["torch_rng"])
    with s3direct.safe_open(uri) as f:  # plain tensors to any safetensors reader
        assert torch.equal(f.get_tensor("grid"), torch.tensor([[0, 2], [4, 6], [8, 10]],
                                                              dtype=torch.int32))
    with pytest.raises(s3direct.InvalidArgument, match="allow_pickle"):
        s3direct.save({"o": np.array([object()], dtype=object)}, f"{base}/obj.safetensors")


# ---- TLS verification off ---------------------------------------------------------------------
def _make(verify_ssl):
    return s3direct.Client(endpoint_url="https://127.0.0.1:9", verify_ssl=verify_ssl)


def test_verify_ssl_false_warns_once_per_line(lib_path):
    """As urllib3's InsecureRequestWarning: a warning the default filters show once per
    calling line, not silence (the CLI's --no-verify-ssl says so on every run)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for _ in range(3):
            _make(False).close()
        _make(True).close()
    insecure = [w for w in seen if issubclass(w.category, s3direct.InsecureConnectionWarning)]
    assert len(insecure) == 1, [str(w.message) for w in seen]
    assert "not verified" in str(insecure[0].message)
    assert insecure[0].filename == __file__  # the caller's line, not the library's


def test_verify_ssl_true_is_silent(lib_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", s3direct.InsecureConnectionWarning)
        _make(True).close()
