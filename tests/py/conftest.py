"""Shared pytest fixtures for the Python tests.

- python/ is put on sys.path, so the tests run without installing the package.
- lib_path: the libs3direct.so the package will load (S3D_LIBRARY, else $S3D_BUILD_DIR, else
  python/s3direct/_lib, else build/), exported as S3D_LIBRARY for this process and its
  children; a test using it is skipped when there is none.
- s3_env: skips the test unless AWS_ENDPOINT_URL is set (a server to talk to); returns the
  environment as a dict.
- boto3_client: a boto3 S3 client for that server (checks the library against an independent
  client).
- bucket: a fresh, uniquely named bucket, emptied and deleted after the test.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(REPO, "python")
# S3D_TEST_INSTALLED=1 (tests/wheel/run.sh): test the package pip installed, with its own
# bundled library and CLI, not the source tree.
INSTALLED = os.environ.get("S3D_TEST_INSTALLED") == "1"
if not INSTALLED:
    if PYDIR not in sys.path:
        sys.path.insert(0, PYDIR)
    # Subprocesses started by tests (DCP ranks, memory probes) import the same package.
    os.environ["PYTHONPATH"] = PYDIR + (os.pathsep + os.environ["PYTHONPATH"]
                                        if os.environ.get("PYTHONPATH") else "")
if os.environ.get("S3D_BUILD_DIR") and not os.path.isabs(os.environ["S3D_BUILD_DIR"]):
    os.environ["S3D_BUILD_DIR"] = os.path.abspath(os.environ["S3D_BUILD_DIR"])


def _installed_lib():
    import s3direct

    pkg = os.path.dirname(os.path.abspath(s3direct.__file__))
    if os.path.commonpath([pkg, REPO]) == REPO:
        raise RuntimeError(f"S3D_TEST_INSTALLED=1 but s3direct was imported from {pkg}")
    return os.path.join(pkg, "_lib", "libs3direct.so")


def _find_lib():
    if INSTALLED:
        return _installed_lib()
    env = os.environ.get("S3D_LIBRARY")
    if env:
        return env if os.path.exists(env) else None
    cands = []
    if os.environ.get("S3D_BUILD_DIR"):
        cands.append(os.path.join(os.environ["S3D_BUILD_DIR"], "libs3direct.so"))
    cands.append(os.path.join(PYDIR, "s3direct", "_lib", "libs3direct.so"))
    cands.append(os.path.join(REPO, "build", "libs3direct.so"))
    for c in cands:
        if os.path.exists(c):
            return c
    return None


# The library under test is pinned for this process and its children: a build dir given by
# the runner wins over a copy installed into python/s3direct/_lib.
_LIB = _find_lib()
if _LIB is not None:
    os.environ["S3D_LIBRARY"] = os.path.abspath(_LIB)


@pytest.fixture(scope="session")
def lib_path():
    if _LIB is None:
        pytest.skip("libs3direct.so not built (set S3D_BUILD_DIR or S3D_LIBRARY)")
    return _LIB


@pytest.fixture(scope="session")
def s3_env(lib_path):
    if not os.environ.get("AWS_ENDPOINT_URL"):
        pytest.skip("no S3 server (AWS_ENDPOINT_URL not set)")
    keys = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION", "AWS_REGION")
    return {k: os.environ[k] for k in keys if k in os.environ}


@pytest.fixture(scope="session")
def boto3_client(s3_env):
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"],
                        region_name=s3_env.get("AWS_DEFAULT_REGION", "us-east-1"),
                        config=Config(s3={"addressing_style": "path"}))


def _empty_and_delete(client, name):
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if objs:
                client.delete_objects(Bucket=name, Delete={"Objects": objs})
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=name):
            for u in page.get("Uploads", []):
                client.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])
        client.delete_bucket(Bucket=name)
    except Exception:
        pass


@pytest.fixture
def bucket(boto3_client):
    name = f"s3d-py-{uuid.uuid4().hex[:16]}"
    boto3_client.create_bucket(Bucket=name)
    yield name
    _empty_and_delete(boto3_client, name)
