"""boto3_xfer.py get|put BUCKET KEY PATH [--runs N] [--endpoint-url URL]

Times boto3's download_file / upload_file with the default TransferConfig, inside one process
(the import and client creation are not counted), printing per run:
    run I seconds S cpu C bytes B
CPU is this process's user+system time (all threads) during the transfer. Keys and region come
from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID ...) unless --endpoint-url is given.
For get, PATH is removed after each run (it is on /dev/shm in the benchmark, i.e. RAM)."""
import argparse
import os
import resource
import time

import boto3


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["get", "put"])
    ap.add_argument("bucket")
    ap.add_argument("key")
    ap.add_argument("path")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--endpoint-url")
    a = ap.parse_args()
    s3 = boto3.client("s3", endpoint_url=a.endpoint_url or os.environ.get("AWS_ENDPOINT_URL"))
    for i in range(a.runs):
        t0, c0 = time.monotonic(), cpu()
        if a.op == "get":
            s3.download_file(a.bucket, a.key, a.path)
            size = os.path.getsize(a.path)
        else:
            s3.upload_file(a.path, a.bucket, a.key)
            size = os.path.getsize(a.path)
        t1, c1 = time.monotonic(), cpu()
        if a.op == "get":
            os.unlink(a.path)
        print(f"run {i} seconds {t1 - t0:.4f} cpu {c1 - c0:.4f} bytes {size}", flush=True)


if __name__ == "__main__":
    main()
