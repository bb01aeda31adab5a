/* uri.c - s3:// URIs, bucket names and AWS percent-encoding. */
#include "s3/uri.h"

#include <string.h>

#include "common/compiler.h"
#include "common/error.h"
#include "s3direct/object.h"

static int is_lower_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_alnum(unsigned char c)
{
    return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

int s3d_bucket_name_check(const char *bucket, size_t len)
{
    size_t i;
    if (len < S3D_BUCKET_MIN || len > S3D_BUCKET_MAX)
        return s3d_fail(S3D_EURI, "bucket name \"%.*s\" must be %d to %d characters long",
                        (int)S3D_MIN(len, 80), bucket, S3D_BUCKET_MIN, S3D_BUCKET_MAX);
    if (!is_alnum((unsigned char)bucket[0]) || !is_alnum((unsigned char)bucket[len - 1]))
        return s3d_fail(S3D_EURI, "bucket name \"%.*s\" must start and end with a letter or digit",
                        (int)len, bucket);
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)bucket[i];
        /* Upper case and '_' are outside today's S3 rules but legal for legacy buckets and
         * accepted by Ceph RGW and MinIO; such buckets are only ever addressed path-style. */
        if (!is_alnum(c) && c != '.' && c != '-' && c != '_')
            return s3d_fail(S3D_EURI, "bucket name \"%.*s\" has an invalid character at %zu",
                            (int)len, bucket, i);
        if (c == '.' && i > 0 && bucket[i - 1] == '.')
            return s3d_fail(S3D_EURI, "bucket name \"%.*s\" has two adjacent dots", (int)len,
                            bucket);
    }
    return 0;
}

static int looks_like_ipv4(const char *s)
{
    int dots = 0, digits = 0;
    for (; *s; s++) {
        if (*s == '.') {
            if (digits == 0)
                return 0;
            dots++;
            digits = 0;
        } else if (*s >= '0' && *s <= '9') {
            if (++digits > 3)
                return 0;
        } else {
            return 0;
        }
    }
    return dots == 3 && digits > 0;
}

int s3d_bucket_dns_compatible(const char *bucket)
{
    size_t len, i;
    if (bucket == NULL)
        return 0;
    len = strlen(bucket);
    if (len < S3D_BUCKET_MIN || len > S3D_BUCKET_MAX)
        return 0;
    if (!is_lower_alnum((unsigned char)bucket[0]) ||
        !is_lower_alnum((unsigned char)bucket[len - 1]))
        return 0;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)bucket[i];
        if (c == '.') {
            /* Each label must start and end with a letter or digit. */
            if (!is_lower_alnum((unsigned char)bucket[i - 1]) ||
                !is_lower_alnum((unsigned char)bucket[i + 1]))
                return 0;
        } else if (!is_lower_alnum(c) && c != '-') {
            return 0;
        }
    }
    return !looks_like_ipv4(bucket);
}

int s3d_uri_encode(struct s3d_dynbuf *out, const char *s, size_t len, int encode_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i, run = 0;
    int rc;
    /* Unreserved runs are appended in one piece: keys are mostly plain ASCII. */
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[3];
        if (is_alnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
            (c == '/' && !encode_slash)) {
            run++;
            continue;
        }
        if (run > 0 && (rc = s3d_dynbuf_append(out, s + i - run, run)) < 0)
            goto fail;
        run = 0;
        esc[0] = '%';
        esc[1] = hex[c >> 4];
        esc[2] = hex[c & 15];
        if ((rc = s3d_dynbuf_append(out, esc, 3)) < 0)
            goto fail;
    }
    if (run > 0 && (rc = s3d_dynbuf_append(out, s + len - run, run)) < 0)
        goto fail;
    return 0;
fail:
    return s3d_fail(rc, "percent-encoding %zu bytes: buffer limit of %zu bytes reached", len,
                    out->max);
}

int s3d_uri_parse(const char *uri, char *bucket, size_t bucket_cap, char *key, size_t key_cap)
{
    const char *b, *slash, *k;
    size_t blen, klen;
    int rc;
    if (uri == NULL || bucket == NULL || key == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_uri_parse: NULL argument");
    if (strncmp(uri, "s3://", 5) != 0)
        return s3d_fail(S3D_EURI, "\"%.200s\" is not an s3:// URI", uri);
    b = uri + 5;
    slash = strchr(b, '/');
    blen = slash ? (size_t)(slash - b) : strlen(b);
    if (blen == 0)
        return s3d_fail(S3D_EURI, "\"%.200s\" names no bucket", uri);
    if ((rc = s3d_bucket_name_check(b, blen)) < 0)
        return s3d_fail_prefix(rc, "URI \"%.200s\"", uri);
    k = slash ? slash + 1 : b + blen;
    klen = strlen(k);
    if (klen > S3D_KEY_MAX)
        return s3d_fail(S3D_EURI, "key of \"%.100s...\" is %zu bytes, over S3's limit of %d", uri,
                        klen, S3D_KEY_MAX);
    if (blen + 1 > bucket_cap)
        return s3d_fail(S3D_ETOOBIG, "bucket of \"%.200s\" needs %zu bytes, buffer has %zu", uri,
                        blen + 1, bucket_cap);
    if (klen + 1 > key_cap)
        return s3d_fail(S3D_ETOOBIG, "key of \"%.200s\" needs %zu bytes, buffer has %zu", uri,
                        klen + 1, key_cap);
    memcpy(bucket, b, blen);
    bucket[blen] = '\0';
    memcpy(key, k, klen + 1);
    return 0;
}
