/* multipart.c - the lifecycle of a multipart upload around its parts (contract in
 * multipart.h): create, then complete, or abort with the message that says what the server
 * still holds. The parts themselves are sent by the transfer loop (xfer.c). */
#include "engine/multipart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/client_impl.h"
#include "engine/own_checksum.h"
#include "s3/ops.h"

static int part_cmp(const void *a, const void *b)
{
    const struct s3d_op_part *x = a, *y = b;
    return x->part_number < y->part_number ? -1 : x->part_number > y->part_number;
}

/* Appends s as one shell word in single quotes ('\'' for a quote) to out[*len..cap). */
static void shell_word(char *out, size_t cap, size_t *len, const char *s)
{
    if (*len + 1 < cap)
        out[(*len)++] = '\'';
    for (; *s != '\0' && *len + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(out + *len, "'\\''", 4);
            *len += 4;
        } else {
            out[(*len)++] = *s;
        }
    }
    if (*len + 1 < cap)
        out[(*len)++] = '\'';
    out[*len < cap ? *len : cap - 1] = '\0';
}

/* The first error, followed by what a person must know when the abort after it failed too:
 * the upload is still open (its parts are stored, and billed, until it is aborted or a
 * lifecycle rule removes it) and the command that removes it. The command comes before the
 * abort's own error so that the 1.5 KB message cap never cuts it. */
static int err_restore_left_open(const struct s3d_err_record *s, const char *bucket,
                                 const char *key, const char *upload_id, const char *abort_msg)
{
    struct s3d_err_s3 d;
    char cmd[1024];
    size_t n = 0;
    cmd[0] = '\0';
    n = (size_t)snprintf(cmd, sizeof(cmd), "--bucket ");
    shell_word(cmd, sizeof(cmd), &n, bucket);
    n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " --key ");
    if (n < sizeof(cmd))
        shell_word(cmd, sizeof(cmd), &n, key);
    if (n < sizeof(cmd))
        n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " --upload-id ");
    if (n < sizeof(cmd))
        shell_word(cmd, sizeof(cmd), &n, upload_id);
    s3d_err_record_s3(s, &d);
    return s3d_fail_s3(s->code, &d,
                       "%.400s; the multipart upload could not be aborted, so it is left open "
                       "on the server (its parts are kept, and billed, until it is aborted): "
                       "remove it with `s3direct s3api abort-multipart-upload %s` (or `aws "
                       "s3api abort-multipart-upload` with the same arguments); the abort "
                       "failed with: %.300s",
                       s->message, cmd, abort_msg);
}

/* The first error, followed by what the abort's NoSuchUpload means: no upload is left open;
 * the Complete whose answer failed may have been carried out (the key may hold the new
 * object). moto's answers to Complete were refused that way, and the error said the upload
 * was left open when none was. */
static int err_restore_none_open(const struct s3d_err_record *s, const char *upload_id)
{
    struct s3d_err_s3 d;
    s3d_err_record_s3(s, &d);
    return s3d_fail_s3(s->code, &d,
                       "%.400s; no multipart upload is left open: the abort found none (upload "
                       "id %.200s; NoSuchUpload), so it was completed (the key may hold the new "
                       "object) or removed by another client",
                       s->message, upload_id);
}

/* After the failure rc (recorded): aborts the upload, so that the object at the key stays
 * what it was, and keeps rc's detail as the last error; when the abort fails too, the error
 * says the upload is left open (err_restore_left_open), or that none is, when the server
 * knows no such upload (err_restore_none_open). Returns the abort's result (0 = aborted). */
static int abort_upload(struct s3d_client *c, const char *bucket, const char *key,
                        const char *upload_id, int rc)
{
    struct s3d_err_record *se = malloc(sizeof(*se));
    int arc;
    if (se != NULL)
        s3d_err_save(se, rc);
    arc = s3d_op_abort_multipart(&c->s3, bucket, key, upload_id);
    if (arc == S3D_ENOUPLOAD) {
        S3D_INFO("aborting upload %s of s3://%s/%s: the server knows no such upload (completed "
                 "or removed)",
                 upload_id, bucket, key);
        if (se != NULL) {
            err_restore_none_open(se, upload_id);
            free(se);
            se = NULL;
        }
    } else if (arc < 0) {
        S3D_WARN("aborting upload %s of s3://%s/%s failed: %s", upload_id, bucket, key,
                 s3d_last_error_message());
        if (se != NULL) {
            char abort_msg[320];
            snprintf(abort_msg, sizeof(abort_msg), "%s", s3d_last_error_message());
            err_restore_left_open(se, bucket, key, upload_id, abort_msg);
            free(se);
            se = NULL;
        }
    }
    if (se != NULL) {
        s3d_ignore_rc(s3d_err_restore(se)); /* the detail is back; the caller returns rc */
        free(se);
    }
    return arc;
}

int s3d_multipart_create(struct s3d_client *c, const char *bucket, const char *key,
                         const char *content_type, char **upload_id)
{
    int rc = s3d_op_create_multipart(&c->s3, bucket, key, content_type, upload_id);
    if (rc < 0)
        return rc;
    s3d_op_probe_body_crc(&c->s3, bucket, key, *upload_id);
    return 0;
}

/* 0 when the sorted parts combine to the ETag expected (a server-side copy's source's), else
 * S3D_ECHANGED (recorded). */
static int check_etag(const char *bucket, const char *key, const struct s3d_op_part *parts,
                      size_t n, const char *expect, char got[80])
{
    if (s3d_op_multipart_etag(parts, n, got) < 0)
        snprintf(got, 80, "(none: a part's ETag is not an MD5)");
    else if (s3d_op_etag_same(got, expect))
        return 0;
    return s3d_fail(S3D_ECHANGED,
                    "copy to s3://%s/%s: the copied parts make ETag %s, not the source's %s: "
                    "the source was replaced during the copy (or the server told its parts "
                    "wrong); nothing was written",
                    bucket, key, got, expect);
}

int s3d_multipart_finish(struct s3d_client *c, const char *bucket, const char *key,
                         const char *upload_id, struct s3d_op_part *parts, size_t n,
                         const struct s3d_put_options *o, int rc)
{
    const char *expect_etag = o != NULL && o->expect_etag != NULL ? o->expect_etag : "";
    const char *own = o != NULL ? o->object_crc32c : NULL;
    char etag[80] = "", made[80] = "";
    int mismatch = 0;
    if (rc == 0) {
        qsort(parts, n, sizeof(*parts), part_cmp);
        if (own == NULL)
            rc = s3d_own_check_expected(bucket, key, parts, n, o ? o->expect_crc32c : NULL);
    }
    if (rc == 0 && expect_etag[0] != '\0') {
        rc = check_etag(bucket, key, parts, n, expect_etag, made);
        mismatch = rc < 0;
    }
    if (rc == 0)
        rc = s3d_op_complete_multipart(&c->s3, bucket, key, upload_id, parts, n, etag);
    if (rc < 0) {
        if (abort_upload(c, bucket, key, upload_id, rc) == 0 && mismatch && o->made_etag != NULL)
            snprintf(o->made_etag, 80, "%s", made);
        return rc;
    }
    if (expect_etag[0] != '\0' && etag[0] != '\0' && !s3d_op_etag_same(etag, expect_etag))
        return s3d_fail(S3D_ECHANGED,
                        "copy to s3://%s/%s: CompleteMultipartUpload answered ETag %s where "
                        "its parts make %s: the object written is not what was verified (left "
                        "in place without a checksum tag)",
                        bucket, key, etag, expect_etag);
    s3d_own_tag(c, bucket, key, parts, n, etag, own);
    return rc;
}
