/* fuzz_uri.c - fuzz target for s3:// URIs, bucket names and SigV4 percent-encoding
 * (src/s3/uri.c).
 *
 * The input, as a string, goes through s3d_uri_parse. Whatever the bytes, it must return 0,
 * S3D_EURI or S3D_ETOOBIG. An accepted URI must split losslessly: "s3://" + bucket + "/" +
 * key gives the input back (without the '/' when the input has none), the bucket passes the
 * bucket-name check, and buffers one byte too small are refused with S3D_ETOOBIG, never
 * overrun (ASan sees exact-size heap buffers). Every input, as raw bytes, is percent-encoded
 * both ways: the output holds only unreserved bytes, '/' (when kept) and %XX, and decodes
 * back to the input byte for byte. A bucket name that is DNS-compatible must also be valid.
 * Built by tests/fuzz/fuzz.cmake as a plain test (with fuzz_main.c) and, with -DS3D_FUZZ=ON
 * under clang, as a libFuzzer binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#include "common/dynbuf.h"
#include "s3/uri.h"
#include "s3direct/errors.h"
#include "s3direct/object.h"

const char *const s3d_fuzz_tokens[] = {
    "s3://", "S3://", "/", "//", ".", "..", "-",           "_",        "%",    "%2F",
    "+",     " ",     "?", "#",  "~", "A",  "192.168.0.1", "\xc3\xa9", "\xff", "\x7f"};
const size_t s3d_fuzz_n_tokens = sizeof(s3d_fuzz_tokens) / sizeof(s3d_fuzz_tokens[0]);

void s3d_fuzz_fixup(uint8_t *buf, size_t len, uint64_t r)
{
    /* Most mutations of "s3://" stop at the scheme check: put it back. */
    if (len >= 5 && r % 2 == 0)
        memcpy(buf, "s3://", 5);
}

static int unhex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '~';
}

static void check_encode(const uint8_t *data, size_t size, int encode_slash)
{
    struct s3d_dynbuf b;
    size_t i, n = 0;
    uint8_t *dec;

    s3d_dynbuf_init(&b, 3 * size + 1);
    REQUIRE(s3d_uri_encode(&b, (const char *)data, size, encode_slash) == 0);
    REQUIRE(b.len >= size && b.len <= 3 * size);
    dec = malloc(size + 1);
    REQUIRE(dec != NULL);
    for (i = 0; i < b.len; n++) {
        unsigned char c = (unsigned char)b.data[i];
        REQUIRE(n < size);
        if (c == '%') {
            int hi, lo;
            REQUIRE(i + 3 <= b.len);
            hi = unhex(b.data[i + 1]);
            lo = unhex(b.data[i + 2]);
            REQUIRE(hi >= 0 && lo >= 0);
            dec[n] = (uint8_t)(hi << 4 | lo);
            /* Only bytes that need it are escaped. */
            REQUIRE(!unreserved(dec[n]) && (dec[n] != '/' || encode_slash));
            i += 3;
        } else {
            REQUIRE(unreserved(c) || (c == '/' && !encode_slash));
            dec[n] = c;
            i++;
        }
    }
    REQUIRE(n == size && (size == 0 || memcmp(dec, data, size) == 0));
    free(dec);
    s3d_dynbuf_free(&b);
}

/* Parse with exact-size heap buffers of bcap and kcap bytes. */
static int parse_into(const char *s, size_t bcap, size_t kcap, char **bucket, char **key)
{
    *bucket = malloc(bcap ? bcap : 1);
    *key = malloc(kcap ? kcap : 1);
    REQUIRE(*bucket != NULL && *key != NULL);
    return s3d_uri_parse(s, *bucket, bcap, *key, kcap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s, *bucket, *key, *b2, *k2;
    size_t bl, kl, sl;
    int rc;

    check_encode(data, size, 1);
    check_encode(data, size, 0);
    if (size > 4096)
        return 0;
    s = malloc(size + 1);
    REQUIRE(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';
    sl = strlen(s);

    rc = parse_into(s, sl + 1, sl + 1, &bucket, &key);
    REQUIRE(rc == 0 || rc == S3D_EURI);
    if (rc == 0) {
        bl = strlen(bucket);
        kl = strlen(key);
        REQUIRE(strncmp(s, "s3://", 5) == 0);
        REQUIRE(bl >= S3D_BUCKET_MIN && bl <= S3D_BUCKET_MAX && kl <= S3D_KEY_MAX);
        REQUIRE(s3d_bucket_name_check(bucket, bl) == 0);
        REQUIRE(memchr(bucket, '/', bl) == NULL);
        REQUIRE(memcmp(s + 5, bucket, bl) == 0);
        if (sl == 5 + bl) {
            REQUIRE(kl == 0);
        } else {
            REQUIRE(s[5 + bl] == '/' && sl == 6 + bl + kl && strcmp(s + 6 + bl, key) == 0);
        }
        /* Exact sizes are enough; one byte less is S3D_ETOOBIG. */
        REQUIRE(parse_into(s, bl + 1, kl + 1, &b2, &k2) == 0);
        REQUIRE(strcmp(b2, bucket) == 0 && strcmp(k2, key) == 0);
        free(b2);
        free(k2);
        REQUIRE(parse_into(s, bl, kl + 1, &b2, &k2) == S3D_ETOOBIG);
        free(b2);
        free(k2);
        REQUIRE(parse_into(s, bl + 1, kl, &b2, &k2) == S3D_ETOOBIG);
        free(b2);
        free(k2);
    }
    free(bucket);
    free(key);

    /* The input as a bucket name. */
    rc = s3d_bucket_name_check(s, sl);
    REQUIRE(rc == 0 || rc == S3D_EURI);
    if (s3d_bucket_dns_compatible(s))
        REQUIRE(rc == 0);
    free(s);
    return 0;
}
