/* own_checksum.c - the CRC-32C s3direct stores with the objects it writes, and the check of
 * whole-object downloads against it (contract in own_checksum.h; why and where it is stored:
 * docs/internals/engine.md, "Checksums of objects s3direct wrote"). */
#include "engine/own_checksum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/client_impl.h"
#include "s3/ops.h"

/* ---- write side: multipart uploads --------------------------------------------------------- */

uint32_t s3d_own_parts_crc(const struct s3d_op_part *parts, size_t n)
{
    uint32_t crc = 0;
    for (size_t i = 0; i < n; i++)
        crc = s3d_crc32c_combine(crc, parts[i].crc, parts[i].length);
    return crc;
}

int s3d_own_check_expected(const char *bucket, const char *key, const struct s3d_op_part *parts,
                           size_t n, const char *expect_crc32c)
{
    uint32_t want, got;
    if (expect_crc32c == NULL || expect_crc32c[0] == '\0' ||
        s3d_crc32c_from_base64(expect_crc32c, strlen(expect_crc32c), &want) < 0)
        return 0;
    got = s3d_own_parts_crc(parts, n);
    if (got == want)
        return 0;
    return s3d_fail(S3D_ECHECKSUM,
                    "upload of s3://%s/%s: CRC32C mismatch (the source's checksum %s; the parts "
                    "read combine to %08x)",
                    bucket, key, expect_crc32c, got);
}

/* After a multipart upload completed: stores the object's CRC-32C (its parts' combined, in
 * number order) as its S3D_OP_CRC_TAG tag, bound to its ETag (Complete's, or the one computed
 * from the parts' when the server sent none, as Ceph RGW). The object is already in place, so
 * a failure here (no permission, no tagging on the server) only leaves it without the tag,
 * which makes its downloads unverified where the server stores no checksum. */
void s3d_own_tag(struct s3d_client *c, const char *bucket, const char *key,
                 const struct s3d_op_part *parts, size_t n, const char *etag,
                 const char *object_crc32c)
{
    char value[128];
    size_t len;
    uint32_t crc;
    char computed[80];

    if (etag[0] == '\0') {
        if (s3d_op_multipart_etag(parts, n, computed) < 0) {
            S3D_DEBUG("s3://%s/%s: no CRC32C tag: the multipart ETag is not known", bucket, key);
            return;
        }
        etag = computed;
    }
    len = strlen(etag);
    if (len < 3 || etag[0] != '"' || etag[len - 1] != '"' || len - 2 > 100) {
        S3D_DEBUG("s3://%s/%s: no CRC32C tag: ETag %s is not quoted", bucket, key, etag);
        return;
    }
    if (object_crc32c == NULL) {
        crc = s3d_own_parts_crc(parts, n);
    } else if (s3d_crc32c_from_base64(object_crc32c, strlen(object_crc32c), &crc) < 0) {
        S3D_DEBUG("s3://%s/%s: no CRC32C tag: the copy's source has no known CRC32C", bucket, key);
        return;
    }
    snprintf(value, sizeof(value), "%08x %.*s", crc, (int)(len - 2), etag + 1);
    if (s3d_op_put_crc_tag(&c->s3, bucket, key, value) < 0)
        S3D_DEBUG("s3://%s/%s: its CRC32C could not be stored as a tag, so downloads from a "
                  "server without checksums cannot verify it: %s",
                  bucket, key, s3d_last_error_message());
}

/* ---- read side: whole-object downloads ------------------------------------------------------ */

/* Copies a base64 CRC32C that parses into w (0), else leaves w empty (-1). */
static int want_set(struct s3d_want_crc *w, const char *b64, const char *source)
{
    uint32_t v;
    if (s3d_crc32c_from_base64(b64, strlen(b64), &v) < 0)
        return -1;
    s3d_crc32c_base64(v, w->b64);
    w->source = source;
    return 0;
}

/* 1 when the ETag is a multipart upload's ("...-N" in quotes). */
static int etag_is_multipart(const char *etag)
{
    const char *dash = strrchr(etag, '-');
    return dash != NULL && dash[1] >= '0' && dash[1] <= '9';
}

/* The CRC32C s3direct stored as the S3D_OP_CRC_TAG tag of a multipart object it wrote, if
 * that tag is of this version (its ETag): into w. A server that does not let us read tags
 * (no permission, no tagging) leaves the download unverified; any other failure fails it. */
static int tag_checksum(struct s3d_client *c, const char *bucket, const char *key,
                        const struct s3d_object_info *first, struct s3d_want_crc *w)
{
    char value[128], hex[9];
    size_t el = strlen(first->etag);
    unsigned long v;
    char *end;
    int rc = s3d_op_get_crc_tag(&c->s3, bucket, key, value, sizeof(value));
    if (rc == S3D_EACCESS || rc == S3D_ENOTSUP || rc == S3D_EHTTP || rc == S3D_ENOSUCHKEY) {
        S3D_DEBUG("GetObject s3://%s/%s: download unverified: its tags cannot be read (%s)", bucket,
                  key, s3d_last_error_message());
        return 0;
    }
    if (rc < 0)
        return rc;
    if (value[0] == '\0')
        return 0;
    /* "<8 hex digits> <ETag without quotes>" */
    if (strlen(value) < 10 || value[8] != ' ' || el < 2 || strlen(value + 9) != el - 2 ||
        strncmp(value + 9, first->etag + 1, el - 2) != 0) {
        S3D_DEBUG("GetObject s3://%s/%s: download unverified: its %s tag \"%s\" is not of "
                  "this version (ETag %s)",
                  bucket, key, S3D_OP_CRC_TAG, value, first->etag);
        return 0;
    }
    memcpy(hex, value, 8);
    hex[8] = '\0';
    v = strtoul(hex, &end, 16);
    if (*end != '\0' || strspn(hex, "0123456789abcdef") != 8) {
        S3D_DEBUG("GetObject s3://%s/%s: download unverified: its %s tag \"%s\" is malformed",
                  bucket, key, S3D_OP_CRC_TAG, value);
        return 0;
    }
    s3d_crc32c_base64((uint32_t)v, w->b64);
    w->source = "s3direct's tag";
    return 0;
}

/* The full-object CRC32C a whole-object download is checked against, into w ("" when there
 * is none to check), the first of:
 * 1. the server's x-amz-checksum-crc32c (AWS S3, moto). S3 returns it only for a GET of the
 *    whole object, so when the object took more than the first range a HEAD asks for it
 *    (after 2, which needs no request); that HEAD must see the same version (ETag). A
 *    composite checksum of a multipart upload ("...-N") covers the parts, not the object's
 *    bytes: not checkable here.
 * 2. the CRC32C s3direct sent as user metadata with a single PUT (S3D_OP_CRC_META), in every
 *    GET response;
 * 3. for a multipart object with tags, the S3D_OP_CRC_TAG tag s3direct set after completing
 *    it, bound to its ETag (one GetObjectTagging).
 * Objects other tools wrote to servers that store no checksums (Ceph RGW 16) stay unverified,
 * which S3D_LOG=debug (the CLI's --debug) says. */
int s3d_own_object_checksum(struct s3d_client *c, const char *bucket, const char *key,
                            const struct s3d_object_info *first, const struct s3d_op_sums *sums,
                            int first_was_whole, struct s3d_want_crc *w)
{
    struct s3d_object_info h;
    const char *sum = first->checksum_crc32c;
    int rc;

    w->b64[0] = '\0';
    w->source = "";
    if (sum[0] != '\0' && want_set(w, sum, "the server's") == 0)
        return 0;
    if (sums->meta_crc32c[0] != '\0' && want_set(w, sums->meta_crc32c, "s3direct's metadata") == 0)
        return 0;
    if (sum[0] == '\0' && !first_was_whole) {
        rc = s3d_op_head(&c->s3, bucket, key, &h);
        if (rc < 0)
            return rc;
        if (strcmp(h.etag, first->etag) != 0)
            return s3d_fail(S3D_ECHANGED,
                            "GetObject s3://%s/%s: the object changed during the download "
                            "(ETag %s, now %s): download it again",
                            bucket, key, first->etag, h.etag);
        sum = h.checksum_crc32c;
        if (sum[0] != '\0' && want_set(w, sum, "the server's") == 0)
            return 0;
    }
    if (etag_is_multipart(first->etag) && sums->tag_count > 0) {
        rc = tag_checksum(c, bucket, key, first, w);
        if (rc < 0 || w->b64[0] != '\0')
            return rc;
    }
    if (sum[0] == '\0')
        S3D_DEBUG("GetObject s3://%s/%s: download unverified: the server returned no "
                  "full-object checksum, and s3direct stored none",
                  bucket, key);
    else
        S3D_DEBUG("GetObject s3://%s/%s: download unverified: checksum %s is composite (a "
                  "multipart upload's) or not a CRC32C, and s3direct stored none",
                  bucket, key, sum);
    return 0;
}

int s3d_own_verify(const char *bucket, const char *key, const struct s3d_want_crc *w, uint32_t got)
{
    uint32_t v;
    if (w->b64[0] == '\0' || s3d_crc32c_from_base64(w->b64, strlen(w->b64), &v) < 0 || v == got) {
        if (w->b64[0] != '\0')
            S3D_DEBUG("GetObject s3://%s/%s: CRC32C %s (%s) verified", bucket, key, w->b64,
                      w->source);
        return 0;
    }
    return s3d_fail(S3D_ECHECKSUM,
                    "GetObject s3://%s/%s: CRC32C mismatch (object's checksum %s, %s; received "
                    "%08x)",
                    bucket, key, w->b64, w->source, got);
}
