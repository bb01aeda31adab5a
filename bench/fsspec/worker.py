"""One measurement of bench/fsspec/run.py, in a fresh process:

    worker.py IMPL OP BUCKET KEY LOCAL      IMPL: s3direct | s3fs

OP: cat (fs.cat_file of the whole object), read (fs.open(..., "rb") read in 8 MiB chunks), get
(fs.get_file to LOCAL), put (fs.put_file of LOCAL to KEY), write (fs.open(KEY, "wb") written
in 8 MiB chunks from LOCAL), parquet (pandas.read_parquet of the object). Prints one JSON line:
seconds, bytes moved, CPU-seconds of this process over the timed window, and sha256 of what
was read (cat/read/get) so the driver can check the bytes."""

import hashlib
import json
import os
import resource
import sys
import time

CHUNK = 8 << 20


def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime


def filesystem(impl):
    if impl == "s3fs":
        import s3fs

        return s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    from s3direct.fs import S3DirectFileSystem

    return S3DirectFileSystem()


def main():
    impl, op, bucket, key, local = sys.argv[1:6]
    fs = filesystem(impl)
    path = f"{bucket}/{key}"
    fs.info(path) if op not in ("put", "write") else fs.ls(bucket)  # connections, credentials
    if op == "parquet":
        import pandas as pd  # imported before the clock starts
    digest, n, df = None, 0, None
    t0, c0 = time.perf_counter(), cpu()
    if op == "cat":
        data = fs.cat_file(path)
        n = len(data)
    elif op == "read":
        h = hashlib.sha256()
        with fs.open(path, "rb", block_size=CHUNK) as f:
            while True:
                b = f.read(CHUNK)
                if not b:
                    break
                n += len(b)
                h.update(b)
        digest = h.hexdigest()
    elif op == "get":
        fs.get_file(path, local)
        n = os.path.getsize(local)
    elif op == "put":
        fs.put_file(local, path)
        n = os.path.getsize(local)
    elif op == "write":
        with open(local, "rb") as src, fs.open(path, "wb", block_size=CHUNK) as dst:
            while True:
                b = src.read(CHUNK)
                if not b:
                    break
                dst.write(b)
                n += len(b)
    elif op == "parquet":
        opts = ({"client_kwargs": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}}
                if impl == "s3fs" else {})
        proto = "s3" if impl == "s3fs" else "s3direct"
        df = pd.read_parquet(f"{proto}://{path}", storage_options=opts)
        n = int(fs.info(path)["size"])
    else:
        raise SystemExit(f"unknown op {op}")
    secs, cpus = time.perf_counter() - t0, cpu() - c0
    if op == "cat":
        digest = hashlib.sha256(data).hexdigest()
    elif op == "parquet":
        digest = hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()
    elif op == "get":
        h = hashlib.sha256()
        with open(local, "rb") as f:
            for b in iter(lambda: f.read(CHUNK), b""):
                h.update(b)
        digest = h.hexdigest()
    print(json.dumps({"seconds": secs, "bytes": n, "cpu": cpus, "sha256": digest}))


if __name__ == "__main__":
    main()
