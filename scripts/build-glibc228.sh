#!/usr/bin/env bash
# build-glibc228.sh [OUT] [deps] - the static dependency set for glibc 2.28 (issue 20: torch's
# own glibc floor; issue 24: the manylinux_2_28 wheel), built with zig cc -target
# x86_64-linux-gnu.2.28 from Debian's source packages into OUT (default build/g228):
# OUT/prefix/{include,lib} with libcurl.a (HTTP and HTTPS over OpenSSL, with the threaded
# resolver; no LDAP, RTMP, SSH, IDN, PSL, brotli, zstd, zlib, nghttp2, and no protocol but
# HTTP), libssl.a and libcrypto.a (TLS 1.2/1.3 with the usual ciphers; the SHA-256/HMAC/MD5
# of sigv4.c, ops.c, creds_sts.c) and libjansson.a, all static PIC. One set for both users:
# the wheel (scripts/build-wheel.sh, `deps`: stop there) and the GPU bundle (then the
# library, CLI and test programs in OUT/build). Idempotent: each part is skipped when its
# archive is there; a set built by an older recipe (OUT/prefix/RECIPE) is rebuilt whole.
# Needs: ziglang (PyPI), dpkg-dev (apt-get source), a deb-src line for Debian's archive.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-build/g228}" && cd "${1:-build/g228}" && pwd)
only_deps=${2:-}
# S3D_G228_ARCH=aarch64: the same set cross-built for aarch64 (scripts/test-aarch64.sh; with
# `deps` only: the GPU bundle's programs are x86-64's).
arch=${S3D_G228_ARCH:-x86_64}
target=$arch-linux-gnu.2.28
jobs=$(nproc)
# What the set is built with: changing a configure line below changes this, so a cached set
# from before (the HTTP-only one of issue 20) is not reused.
recipe="3: curl with OpenSSL (libssl), threaded resolver; no OpenSSL config read, no build path"
if [ -d "$out/prefix" ] && [ "$(cat "$out/prefix/RECIPE" 2>/dev/null)" != "$recipe" ]; then
  echo "build-glibc228: $out/prefix is from another recipe: rebuilding the set"
  rm -rf "$out/prefix" "$out/jansson-build" "$out/build" "$out/wheel"
  find "$out/src" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + 2>/dev/null || true
fi
mkdir -p "$out/bin" "$out/src" "$out/prefix/lib" "$out/prefix/include"
echo "$recipe" >"$out/prefix/RECIPE"
# Wrappers: configure scripts want one word for CC/AR/RANLIB. They call the zig binary of the
# ziglang package directly (not python3 -m ziglang: a Python start per compile).
zig=$(python3 -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' \
      2>/dev/null) && [ -x "$zig" ] ||
  { echo "build-glibc228: no zig: pip install ziglang (scripts/deps.sh)" >&2; exit 1; }
for t in cc ar ranlib; do
  case $t in
    cc) body="exec \"$zig\" cc -target $target \"\$@\"" ;;
    *)  body="exec \"$zig\" $t \"\$@\"" ;;
  esac
  printf '#!/bin/sh\n%s\n' "$body" >"$out/bin/z$t"
  chmod +x "$out/bin/z$t"
done
export CC="$out/bin/zcc" AR="$out/bin/zar" RANLIB="$out/bin/zranlib"
export CFLAGS="-O2 -fPIC" PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR="$out/prefix/lib/pkgconfig"

src() {  # src PKG: the unpacked .orig tarball of Debian's source package PKG
  local pkg=$1 dir
  dir=$(ls -d "$out/src/$pkg"-[0-9]*/ 2>/dev/null | head -1 || true)
  if [ -z "$dir" ]; then
    (cd "$out/src" && ls "$pkg"_*.orig.tar.* >/dev/null 2>&1 ||
       apt-get source --download-only "$pkg" >/dev/null 2>&1) ||
      { echo "build-glibc228: apt-get source $pkg failed (deb-src line? dpkg-dev?)" >&2; exit 1; }
    (cd "$out/src" && tar xf "$(ls "$pkg"_*.orig.tar.gz | head -1)")
    dir=$(ls -d "$out/src/$pkg"-[0-9]*/ | head -1)
  fi
  echo "${dir%/}"
}

t0=$(date +%s)
if [ ! -f "$out/prefix/lib/libjansson.a" ]; then
  d=$(src jansson)
  # Debian's .orig tarball of jansson has no configure script: its CMake build.
  cmake -S "$d" -B "$out/jansson-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_AR="$AR" -DCMAKE_RANLIB="$RANLIB" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DCMAKE_INSTALL_PREFIX="$out/prefix" -DCMAKE_INSTALL_LIBDIR=lib -DJANSSON_BUILD_DOCS=OFF \
    -DJANSSON_BUILD_SHARED_LIBS=OFF -DJANSSON_WITHOUT_TESTS=ON -DJANSSON_EXAMPLES=OFF \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >/dev/null
  cmake --build "$out/jansson-build" -j"$jobs" >/dev/null
  cmake --install "$out/jansson-build" >/dev/null
  echo "build-glibc228: jansson $(( $(date +%s) - t0 ))s"
fi

# OpenSSL for TLS 1.2/1.3 clients: libssl and libcrypto with what the usual cipher suites and
# certificates need (AES-GCM, ChaCha20-Poly1305, RSA, ECDSA, ECDHE/X25519, DHE, SHA-1/2); off
# are DTLS, SRP, engines and modules, the apps and tests, and the ciphers and digests no TLS
# 1.2+ suite or web PKI certificate uses. No openssl.cnf is ever read (issue 35, item 8): the
# host's (or OPENSSL_CONF's) is written for its own OpenSSL, and a file at a path compiled in
# from this build folder could be planted by anyone who can write there on a user's machine.
# no-autoload-config keeps OpenSSL's own initialisation from loading one, curl's
# --disable-openssl-auto-load-config below keeps curl from asking for it; the folders compiled
# in (OPENSSLDIR, ENGINESDIR, MODULESDIR, which `openssl version -a` prints) are root-owned
# system paths, never this build folder (tests/wheel/check-file.sh). No engine or module is
# built and the CA file is chosen by src/s3/cabundle.c, so nothing is read from them either.
t0=$(date +%s)
if [ ! -f "$out/prefix/lib/libssl.a" ] || [ ! -f "$out/prefix/lib/libcrypto.a" ]; then
  d=$(src openssl)
  ssl_dirs=(OPENSSLDIR=/etc/ssl ENGINESDIR=/usr/lib/engines-3 MODULESDIR=/usr/lib/ossl-modules)
  (cd "$d" && ./Configure "linux-$arch" --prefix="$out/prefix" --libdir=lib no-shared no-module \
     no-dso no-engine no-tests no-async no-comp no-ui-console no-autoload-config \
     no-dtls no-srp no-ct no-cms no-ts no-rfc3779 no-ssl3 no-weak-ssl-ciphers \
     no-aria no-bf no-blake2 no-camellia no-cast no-des no-dsa no-idea no-md4 no-mdc2 \
     no-rc2 no-rc4 no-rc5 no-rmd160 no-scrypt no-seed no-siphash no-sm2 no-sm3 no-sm4 \
     no-whirlpool no-srtp no-ocb no-siv -fPIC >/dev/null &&
   make -s -j"$jobs" "${ssl_dirs[@]}" build_libs >/dev/null && make -s install_dev >/dev/null)
  echo "build-glibc228: openssl (libssl, libcrypto) $(( $(date +%s) - t0 ))s"
fi

# libcurl: HTTP and HTTPS only, OpenSSL from the set above (pkg-config finds it in prefix/).
# No NTLM (it needs DES, left out of OpenSSL; S3 signs with SigV4). No CA path is compiled
# in: the library chooses the CA file at run time (src/s3/cabundle.c).
t0=$(date +%s)
if [ ! -f "$out/prefix/lib/libcurl.a" ]; then
  d=$(src curl)
  (cd "$d" && LIBS="-ldl -lpthread" ./configure -q --host="$arch-linux-gnu" \
     --prefix="$out/prefix" --disable-shared --enable-static --with-pic \
     --with-openssl="$out/prefix" --disable-ldap --disable-ldaps --disable-rtsp \
     --disable-dict --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb \
     --disable-smtp --disable-gopher --disable-mqtt --disable-ftp --disable-file \
     --disable-manual --without-librtmp --without-libssh2 --without-libssh \
     --without-libidn2 --without-libpsl --without-brotli --without-zstd --without-nghttp2 \
     --without-nghttp3 --without-ngtcp2 --without-zlib --without-libgsasl --disable-ntlm \
     --disable-ntlm-wb --disable-openssl-auto-load-config \
     --disable-alt-svc --without-ca-bundle --without-ca-path >/dev/null &&
   make -s -C lib -j"$jobs" >/dev/null && make -s -C lib install >/dev/null &&
   make -s -C include install >/dev/null && install -m644 libcurl.pc "$out/prefix/lib/pkgconfig/")
  echo "build-glibc228: curl $(( $(date +%s) - t0 ))s"
fi
[ -z "$only_deps" ] || exit 0

# The library, the CLI and the bundle's test programs, with the same compiler against that set
# (S3D_STATIC_DEPS: libs3direct.so needs only glibc, libm, libdl, libpthread).
t0=$(date +%s)
b="$out/build"
if [ ! -f "$b/CMakeCache.txt" ]; then
  cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_AR="$AR" -DCMAKE_RANLIB="$RANLIB" -DCMAKE_PREFIX_PATH="$out/prefix" \
    -DCMAKE_FIND_ROOT_PATH="$out/prefix" -DOPENSSL_ROOT_DIR="$out/prefix" \
    -DS3D_STATIC_DEPS=ON -DCMAKE_C_FLAGS="-O2 -fPIC" >/dev/null
fi
cmake --build "$b" -j"$jobs" --target s3direct s3direct_cli test_gpu_device test_gpu_fileio \
  bench_gpu test_cuda_rules test_cuda_fake test_cuda_events test_device_emu s3origin_get >/dev/null
echo "build-glibc228: libs3direct.so, the CLI and the bundle's test programs $(( $(date +%s) - t0 ))s"
