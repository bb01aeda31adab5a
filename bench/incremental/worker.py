"""One process of the incremental benchmark (run by bench/incremental/run.py).

    python worker.py base SPEC.json GROUP
        builds GROUP's base state, writes its raw bytes to SPEC["raw"][GROUP] (each measurement
        reads them from there instead of generating random bits) and saves it with s3direct,
        straight to the server, as SPEC["base_key"][GROUP].
    python worker.py measure SPEC.json CASE TOOL KEY OUT.json [--verify]
        reads the base state, changes CASE's tensors, prepares TOOL (clients, the state), then
        times only the save to s3://BUCKET/KEY through SPEC["endpoint"] (the path's): wall
        time and CPU (user + system of this process and its children). Outside the timing:
        the server's request count (RGW perf counter rgw.req) and the relay's byte count
        before and after, the object's size, the 5 MiB-rule floor of what an incremental save
        must send (from the saved object's header), and with --verify a load of the saved
        checkpoint (straight from the server) compared bit for bit with the state. Writes one
        JSON row to OUT.json; a tool that cannot run writes {"error": ...}.

Tools: "incremental" = s3direct.save(state, uri, base=BASE); "full" = s3direct.save(state,
uri); "s3torch" = s3torchconnector's S3Checkpoint(region, endpoint).writer(uri) with
torch.save (as bench/peers does it).
"""

import dataclasses
import inspect
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import ckpt  # noqa: E402
import state as S  # noqa: E402
from measure import usage  # noqa: E402

ETAG_NOTE = ("raised after the upload completed: RGW 16 answers CompleteMultipartUpload with "
             "an empty <ETag>, which mountpoint-s3-client rejects (timed to the raise)")


class CannotRun(Exception):
    pass


def s3_client(endpoint):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint)


def base_main(spec, group):
    import s3direct

    tensors = spec["tensors"][group]
    state = S.make_base(tensors, spec["seed"])
    ckpt.write_raw(state, tensors, spec["raw"][group])
    c = s3direct.Client(endpoint_url=spec["upstream"])
    s3direct.save(state, f"s3://{spec['bucket']}/{spec['base_key'][group]}", client=c)


def relay_bytes(path):
    """Bytes the relay carried from client to server so far (None without a relay)."""
    if not path:
        return None
    for _ in range(20):
        try:
            with open(path) as f:
                st = json.load(f)
            return st["bytes_c2s"], st["accepted"], st["peak_open"]
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


def same_bytes(a, b):
    import torch

    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    return torch.equal(a.detach().contiguous().reshape(-1).view(torch.uint8),
                       b.detach().contiguous().reshape(-1).view(torch.uint8))


def measure_main(spec, case, tool, key, out, verify):
    row = {"case": case, "tool": tool}
    try:
        import torch

        torch.set_num_threads(1)
        group = S.group_of(case)
        tensors = spec["tensors"][group]
        state = ckpt.read_raw(tensors, spec["raw"][group])
        changed = S.changed_names(case, tensors)
        S.apply_case(state, changed)
        row.update(tensors=len(tensors), changed=len(changed),
                   changed_bytes=S.nbytes(tensors, set(changed)), state_bytes=S.nbytes(tensors))
        ep, bucket = spec["endpoint"], spec["bucket"]
        uri = f"s3://{bucket}/{key}"
        lines = []
        if tool in ("incremental", "full"):
            import logging

            import s3direct

            class Keep(logging.Handler):  # the library's own word on what it did with the base
                def emit(self, rec):
                    msg = rec.getMessage()
                    if "base" in msg.lower() and len(lines) < 5:
                        lines.append(msg[:300])
            lg = logging.getLogger("s3direct")
            lg.setLevel(logging.INFO)
            lg.addHandler(Keep())
            c = s3direct.Client(endpoint_url=ep)
            if tool == "incremental":
                if "base" not in inspect.signature(s3direct.save).parameters:
                    raise CannotRun("s3direct.save takes no base= here (issue 33 not landed)")
                base = f"s3://{bucket}/{spec['base_key'][group]}"

                def run():
                    return s3direct.save(state, uri, base=base, client=c)
            else:
                def run():
                    return s3direct.save(state, uri, client=c)
        elif tool == "s3torch":
            try:
                from s3torchconnector import S3Checkpoint
            except ImportError as e:
                raise CannotRun(f"s3torchconnector not installed ({e}): bench/peers/setup.sh")
            ck = S3Checkpoint(region=spec["region"], endpoint=ep)

            def run():
                with ck.writer(uri) as f:
                    torch.save(state, f)
        else:
            raise CannotRun(f"unknown tool {tool}")
        import gc

        gc.collect()
        asok = spec.get("asok")
        req0 = S.rgw_requests(asok)
        rel0 = relay_bytes(spec.get("relay_stats"))
        row["load1_start"] = os.getloadavg()[0]
        cpu0 = usage()[0]
        t0 = time.perf_counter()
        try:
            result = run()
        except Exception as e:
            if tool != "s3torch" or 'Header "ETag" not found' not in str(e):
                raise
            result = None
            row["note"] = ETAG_NOTE
        wall = time.perf_counter() - t0
        cpu = usage()[0] - cpu0
        row.update(wall_s=wall, cpu_s=cpu)
        if rel0 is not None:
            time.sleep(0.3)  # the stats file is rewritten at most every 100 ms
            rel1 = relay_bytes(spec["relay_stats"])
            if rel1 is not None:
                row.update(relay_c2s=rel1[0] - rel0[0], conns=rel1[1], peak_conns=rel1[2])
        req1 = S.rgw_requests(asok)
        if req0 is not None and req1 is not None:
            row["requests"] = req1 - req0
        if result is not None and dataclasses.is_dataclass(result):
            row["stats"] = dataclasses.asdict(result)
        elif result is not None and hasattr(result, "bytes_sent"):
            row["stats"] = {k: getattr(result, k) for k in (
                "bytes_total", "bytes_sent", "bytes_copied", "tensors_total", "tensors_reused",
                "parts_copied", "copies_refused", "base_used")}
        if row.get("stats") and not row["stats"]["tensors_total"]:
            row["stats_empty"] = True  # a library that does not fill them in: not used
            del row["stats"]
        if lines:
            row["log"] = lines
        s3 = s3_client(spec["upstream"])
        row["object_bytes"] = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
        st = row.get("stats")
        row["bytes_sent"] = st["bytes_sent"] if st else row["object_bytes"]
        row["bytes_sent_from"] = "SaveStats.bytes_sent" if st else "object size"
        if tool in ("incremental", "full"):
            hlen, layout = S.read_layout(s3, bucket, key)
            row["floor_bytes"] = S.floor_bytes(hlen, layout, set(changed))
            row["header_bytes"] = 8 + hlen
        if verify and tool in ("incremental", "full"):
            import s3direct

            got = s3direct.load(uri, client=s3direct.Client(endpoint_url=spec["upstream"]))
            ok = set(got) == set(state)
            bad = [n for n in state if ok and not same_bytes(got[n], state[n])]
            row["verified"] = ok and not bad
            if not row["verified"]:
                row["verify_detail"] = (f"{len(bad)} tensors differ, first {bad[:3]}" if ok else
                                        f"names differ: {len(got)} loaded, {len(state)} saved")
            del got
    except CannotRun as e:
        row.update(error=str(e), cannot_run=True)
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else ""
        row["error"] = f"{type(e).__name__}: {msg}"[:300]
    with open(out, "w") as f:
        json.dump(row, f)


def main():
    mode, spec_path = sys.argv[1], sys.argv[2]
    spec = json.load(open(spec_path))
    if mode == "base":
        base_main(spec, sys.argv[3])
    elif mode == "measure":
        case, tool, key, out = sys.argv[3:7]
        measure_main(spec, case, tool, key, out, "--verify" in sys.argv[7:])
    else:
        raise SystemExit(f"worker: unknown mode {mode}")


if __name__ == "__main__":
    main()
