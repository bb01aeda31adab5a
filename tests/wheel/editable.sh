#!/usr/bin/env bash
# editable.sh - `pip install -e .` works: in a fresh venv, from outside the checkout, the
# package imports, loads the library that scikit-build-core installed for the editable
# install (not build/ or S3D_BUILD_DIR), reports the version of include/s3direct/version.h,
# and the `s3direct` command runs. Part of `make test-wheel`; no server needed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/s3d-editable.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 -m venv --system-site-packages "$work/venv"
isolation=()
python3 -c 'import scikit_build_core' 2>/dev/null && isolation=(--no-build-isolation)
"$work/venv/bin/python" -m pip install -q --no-deps "${isolation[@]}" -e "$repo" \
  -C build-dir="$work/build"
cd "$work"
clean_env=(env -u S3D_BUILD_DIR -u S3D_LIBRARY -u PYTHONPATH LD_LIBRARY_PATH=
           PATH="$work/venv/bin:$PATH")
"${clean_env[@]}" python - "$repo" "$work" <<'PY'
import os, re, sys
repo, work = sys.argv[1], sys.argv[2]
import s3direct
from s3direct import _capi
assert os.path.realpath(s3direct.__file__).startswith(os.path.realpath(repo)), s3direct.__file__
lib = _capi.lib().path
assert os.path.realpath(lib).startswith(os.path.realpath(work)), f"loaded {lib}"
h = open(os.path.join(repo, "include", "s3direct", "version.h")).read()
want = ".".join(re.search(rf"^#define S3D_VERSION_{p} (\d+)$", h, re.M).group(1)
                for p in ("MAJOR", "MINOR", "PATCH"))
assert s3direct.__version__ == s3direct.library_version() == want, (s3direct.__version__, want)
print(f"editable: s3direct {want} from {os.path.dirname(s3direct.__file__)}, library {lib}")
PY
"${clean_env[@]}" s3direct --version
