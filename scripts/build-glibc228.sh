#!/usr/bin/env bash
# build-glibc228.sh [OUT] - the static dependency set for the glibc 2.28 build of the GPU bundle
# (issue 20: torch's own glibc floor), built with zig cc -target x86_64-linux-gnu.2.28 from
# Debian's source packages into OUT (default build/g228): OUT/prefix/{include,lib} with
# libcurl.a (HTTP only: no TLS, LDAP, RTMP, SSH, IDN, PSL, brotli, zstd, nghttp2; the GPU
# machine has no network and gpu-check's S3 origin is plain http on loopback), libjansson.a and
# libcrypto.a (SHA-256/HMAC/MD5/SHA-1/base64 of sigv4.c, ops.c, creds_sts.c), all static PIC.
# Idempotent: each part is skipped when its archive is there (rm -rf OUT to rebuild).
# Needs: ziglang (PyPI), dpkg-dev (apt-get source), a deb-src line for Debian's archive.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-build/g228}" && cd "${1:-build/g228}" && pwd)
target=x86_64-linux-gnu.2.28
jobs=$(nproc)
mkdir -p "$out/bin" "$out/src" "$out/prefix/lib" "$out/prefix/include"
# Wrappers: configure scripts want one word for CC/AR/RANLIB.
for t in cc ar ranlib; do
  case $t in
    cc) body="exec python3 -m ziglang cc -target $target \"\$@\"" ;;
    *)  body="exec python3 -m ziglang $t \"\$@\"" ;;
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

t0=$(date +%s)
if [ ! -f "$out/prefix/lib/libcurl.a" ]; then
  d=$(src curl)
  (cd "$d" && ./configure -q --host=x86_64-linux-gnu --prefix="$out/prefix" --disable-shared \
     --enable-static --with-pic --without-ssl --disable-ldap --disable-ldaps --disable-rtsp \
     --disable-dict --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb \
     --disable-smtp --disable-gopher --disable-mqtt --disable-ftp --disable-file \
     --disable-manual --without-librtmp --without-libssh2 --without-libssh \
     --without-libidn2 --without-libpsl --without-brotli --without-zstd --without-nghttp2 \
     --without-nghttp3 --without-ngtcp2 --without-zlib --without-libgsasl --disable-ntlm-wb \
     --disable-alt-svc --without-ca-bundle --without-ca-path --disable-threaded-resolver \
     >/dev/null &&
   make -s -C lib -j"$jobs" >/dev/null && make -s -C lib install >/dev/null &&
   make -s -C include install >/dev/null && install -m644 libcurl.pc "$out/prefix/lib/pkgconfig/")
  echo "build-glibc228: curl $(( $(date +%s) - t0 ))s"
fi

# libcrypto only: no libssl, no apps, no tests, no engines/modules, only the digests and
# HMAC the library calls (EVP_sha256/sha1/md5, HMAC, EVP_EncodeBlock) among the algorithms.
t0=$(date +%s)
if [ ! -f "$out/prefix/lib/libcrypto.a" ]; then
  d=$(src openssl)
  (cd "$d" && ./Configure linux-x86_64 --prefix="$out/prefix" --libdir=lib no-shared no-module \
     no-dso no-engine no-tests no-async no-comp no-ui-console no-autoload-config \
     no-sock no-ssl no-tls no-dtls no-srp no-psk no-ct no-ocsp no-cms no-ts no-rfc3779 \
     no-aria no-bf no-blake2 no-camellia no-cast no-chacha no-poly1305 no-des no-dh no-dsa \
     no-ec no-ecdh no-ecdsa no-idea no-md4 no-mdc2 no-rc2 no-rc4 no-rc5 no-rmd160 no-scrypt \
     no-seed no-siphash no-sm2 no-sm3 no-sm4 no-whirlpool no-cmac no-srtp no-ocb no-siv \
     -fPIC >/dev/null &&
   make -s -j"$jobs" build_generated >/dev/null && make -s -j"$jobs" libcrypto.a >/dev/null &&
   install -m644 libcrypto.a "$out/prefix/lib/" && mkdir -p "$out/prefix/include/openssl" &&
   cp include/openssl/*.h "$out/prefix/include/openssl/")
  echo "build-glibc228: openssl (libcrypto) $(( $(date +%s) - t0 ))s"
fi

# The library, the CLI and the bundle's test programs, with the same compiler against that set
# (static: libs3direct.so needs only glibc, libm, libdl, libpthread).
t0=$(date +%s)
b="$out/build"
if [ ! -f "$b/CMakeCache.txt" ]; then
  cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_AR="$AR" -DCMAKE_RANLIB="$RANLIB" -DCMAKE_PREFIX_PATH="$out/prefix" \
    -DCMAKE_FIND_ROOT_PATH="$out/prefix" -DOPENSSL_ROOT_DIR="$out/prefix" \
    -DOPENSSL_USE_STATIC_LIBS=ON -DCMAKE_C_FLAGS="-O2 -fPIC" >/dev/null
fi
cmake --build "$b" -j"$jobs" --target s3direct s3direct_cli test_gpu_device test_gpu_fileio \
  bench_gpu test_cuda_rules test_cuda_fake test_device_emu s3origin_get >/dev/null
echo "build-glibc228: libs3direct.so, the CLI and the bundle's test programs $(( $(date +%s) - t0 ))s"
