"""Client CPU of a load into new tensors against one into touched, preallocated tensors: the
cost of fresh destination pages (docs/internals/performance.md, "Fresh destination pages").

    python3 bench/fresh_pages.py setup GIB      # writes s3://s3d-fresh-pages/ckpt-GIB.safetensors
    python3 bench/fresh_pages.py load GIB       # one load in this process: a JSON line
    python3 bench/fresh_pages.py load_into GIB
    python3 bench/fresh_pages.py cleanup GIB

Against the S3 server of the environment (scripts/with-rgw.sh); S3D_LIBRARY=... picks the
library, so two builds can be compared in interleaved processes. The checkpoint is the peers'
llama-shaped one (bench/peers/ckpt.py)."""

import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import ckpt  # noqa: E402
import torch  # noqa: E402

import s3direct  # noqa: E402

BUCKET = "s3d-fresh-pages"


def main():
    mode, gib = sys.argv[1], float(sys.argv[2])
    uri = f"s3://{BUCKET}/ckpt-{gib}.safetensors"
    spec = ckpt.llama_spec(int(gib * (1 << 30)))
    c = s3direct.Client()
    if mode in ("setup", "cleanup"):
        import boto3

        s3 = boto3.client("s3")
        if mode == "cleanup":
            s3.delete_object(Bucket=BUCKET, Key=uri.split("/", 3)[3])
            s3.delete_bucket(Bucket=BUCKET)
            return
        s3.create_bucket(Bucket=BUCKET)
        s3direct.save(ckpt.make_tensors(spec, 1), uri, client=c)
        return
    dest = None
    if mode == "load_into":
        dest = {t["name"]: torch.zeros(t["shape"], dtype=torch.bfloat16) for t in spec}

    def usage():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime, r.ru_minflt
    u0, s0, f0 = usage()
    t0 = time.perf_counter()
    if mode == "load":
        s3direct.load(uri, client=c)
    else:
        s3direct.load_into(dest, uri, client=c)
    wall = time.perf_counter() - t0
    u1, s1, f1 = usage()
    gb = ckpt.nbytes(spec) / 1e9
    print(json.dumps({"mode": mode, "gbps": round(gb / wall, 3),
                      "cpu_s_per_gb": round((u1 - u0 + s1 - s0) / gb, 3),
                      "user_s": round(u1 - u0, 2), "sys_s": round(s1 - s0, 2),
                      "minor_faults": f1 - f0}))


if __name__ == "__main__":
    main()
