/* error.c - error names and the per-thread error detail. */
#define S3D_LAST_ERROR_OK
#include "common/error.h"
#include "common/opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *s3d_err_name(int err)
{
    switch (err) {
    case 0:
        return "S3D_OK";
#define S3D_X_NAME(name, value, desc)                                                              \
    case value:                                                                                    \
        return "S3D_" #name;
        S3D_ERRNO_MAP(S3D_X_NAME)
#undef S3D_X_NAME
    }
    return "S3D_UNKNOWN";
}

const char *s3d_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define S3D_X_DESC(name, value, desc)                                                              \
    case value:                                                                                    \
        return desc;
        S3D_ERRNO_MAP(S3D_X_DESC)
#undef S3D_X_DESC
    }
    return "unknown error";
}

/* The calling thread's last error (struct s3d_err_record: fixed size, never allocates). */
static _Thread_local struct s3d_err_record tls_err;

static void copy_field(char *dst, size_t cap, const char *src)
{
    if (src == NULL) {
        dst[0] = '\0';
        return;
    }
    snprintf(dst, cap, "%s", src);
}

static void set_message(const char *fmt, va_list ap)
{
    vsnprintf(tls_err.message, sizeof(tls_err.message), fmt, ap);
}

/* The names in parentheses: with S3D_ASSERTS, error.h defines macros of the same names that
 * check the contract. */
int(s3d_fail)(int err, const char *fmt, ...)
{
    va_list ap;
    memset(&tls_err, 0, sizeof(tls_err));
    tls_err.code = err;
    va_start(ap, fmt);
    set_message(fmt, ap);
    va_end(ap);
    return err;
}

int(s3d_fail_s3)(int err, const struct s3d_err_s3 *d, const char *fmt, ...)
{
    va_list ap;
    memset(&tls_err, 0, sizeof(tls_err));
    tls_err.code = err;
    if (d != NULL) {
        tls_err.http_status = d->http_status;
        copy_field(tls_err.operation, sizeof(tls_err.operation), d->operation);
        copy_field(tls_err.bucket, sizeof(tls_err.bucket), d->bucket);
        copy_field(tls_err.key, sizeof(tls_err.key), d->key);
        copy_field(tls_err.s3_code, sizeof(tls_err.s3_code), d->s3_code);
        copy_field(tls_err.s3_message, sizeof(tls_err.s3_message), d->s3_message);
        copy_field(tls_err.request_id, sizeof(tls_err.request_id), d->request_id);
    }
    va_start(ap, fmt);
    set_message(fmt, ap);
    va_end(ap);
    return err;
}

int(s3d_fail_prefix)(int err, const char *fmt, ...)
{
    char prefix[512];
    char old[sizeof(tls_err.message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    const char *rest;
    size_t plen;
    memcpy(old, tls_err.message, sizeof(old));
    rest = old[0] != '\0' ? old : s3d_strerror(err);
    /* Built in two steps so that a long message is cut at the end, not the prefix. */
    plen = (size_t)snprintf(tls_err.message, sizeof(tls_err.message), "%s: ", prefix);
    if (plen < sizeof(tls_err.message))
        memcpy(tls_err.message + plen, rest, strnlen(rest, sizeof(tls_err.message) - plen - 1) + 1);
    tls_err.message[sizeof(tls_err.message) - 1] = '\0';
    tls_err.code = err;
    return err;
}

void s3d_err_save(struct s3d_err_record *s, int code)
{
    *s = tls_err;
    s->code = code;
}

int s3d_err_restore(const struct s3d_err_record *s)
{
    tls_err = *s;
    return s->code;
}

void s3d_err_record_s3(const struct s3d_err_record *s, struct s3d_err_s3 *d)
{
    memset(d, 0, sizeof(*d));
    d->operation = s->operation;
    d->bucket = s->bucket;
    d->key = s->key;
    d->http_status = s->http_status;
    d->s3_code = s->s3_code;
    d->s3_message = s->s3_message;
    d->request_id = s->request_id;
}

void s3d_clear_error(void)
{
    memset(&tls_err, 0, sizeof(tls_err));
}

int s3d_last_error_code(void)
{
    return tls_err.code < 0 ? tls_err.code : S3D_EIO;
}

int s3d_err_from_errno(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return S3D_ENOENT;
    case ENOMEM:
        return S3D_ENOMEM;
    case EINVAL:
        return S3D_EINVAL;
    case EFBIG:
        return S3D_ETOOBIG;
    case ECANCELED:
        return S3D_ECANCELED;
    case ETIMEDOUT:
        return S3D_ETIMEDOUT;
    case EACCES:
    case EPERM:
        return S3D_EACCESS;
    case EMFILE:
    case ENFILE:
        return S3D_EMFILE;
    default:
        return S3D_EIO;
    }
}

void s3d_error_get(struct s3d_error_info *out)
{
    memset(out, 0, sizeof(*out));
    out->code = tls_err.code;
    out->http_status = tls_err.http_status;
    out->message = tls_err.message;
    out->operation = tls_err.operation;
    out->bucket = tls_err.bucket;
    out->key = tls_err.key;
    out->s3_code = tls_err.s3_code;
    out->s3_message = tls_err.s3_message;
    out->request_id = tls_err.request_id;
}

void s3d_last_error(struct s3d_error_info *out)
{
    struct s3d_error_info full;
    s3d_error_get(&full);
    s3d_out_copy(out, &full, sizeof(full), S3D_ERROR_INFO_SIZE_V1);
}

const char *s3d_last_error_message(void)
{
    return tls_err.message;
}
