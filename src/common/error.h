/* error.h - recording the detail of a failure for s3d_last_error().
 *
 * Each failing path calls one of the s3d_fail* functions once, at the place that knows most
 * about the failure, and returns what it returns:  return s3d_fail(S3D_EIO, "read %s: %s", ...).
 * Callers higher up pass the code through unchanged; they add context with s3d_fail_prefix()
 * only when the lower message would be ambiguous on its own. */
#ifndef S3D_COMMON_ERROR_H
#define S3D_COMMON_ERROR_H

#include "s3direct/errors.h"
#include "common/compiler.h"

/* Detail of an S3/HTTP failure; any field may be NULL or 0. */
struct s3d_err_s3 {
    const char *operation;
    const char *bucket;
    const char *key;
    int http_status;
    const char *s3_code;
    const char *s3_message;
    const char *request_id;
};

/* One recorded error: the code and the detail s3d_last_error() shows, in fixed-size storage
 * (recording never allocates, so it works after ENOMEM too). The calling thread's last error
 * is one of these; a caller keeps a copy across calls that record their own errors (an abort
 * after a failure, a worker thread's error handed to the caller). About 3.7 KB. */
struct s3d_err_record {
    int code;
    int http_status;
    char message[1536];
    char operation[64];
    char bucket[256];
    char key[1024];
    char s3_code[128];
    char s3_message[512];
    char request_id[160];
};

/* Copies the calling thread's last error into *s, with code as its code. */
void s3d_err_save(struct s3d_err_record *s, int code);
/* Makes *s the calling thread's last error again; returns its code. */
S3D_NODISCARD int s3d_err_restore(const struct s3d_err_record *s);
/* Points the fields of *d at the detail kept in *s (valid while *s is), for an s3d_fail_s3
 * that records the saved detail under a new message. */
void s3d_err_record_s3(const struct s3d_err_record *s, struct s3d_err_s3 *d);

/* Sets the calling thread's last error to err with a printf-style message; returns err. */
int s3d_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with the S3 fields filled in. */
int s3d_fail_s3(int err, const struct s3d_err_s3 *d, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Puts "prefix: " in front of the current message (keeps code and fields); returns err. */
int s3d_fail_prefix(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The contract of the three above, which callers in other files rely on (a failing path
 * returns what s3d_fail returned, and its caller takes any non-zero result as a failure):
 * each returns err, and err is a negative S3D_E* code. With S3D_ASSERTS (debug, sanitizer,
 * fuzz and make analyze builds) every call checks it, and so the static analyzer, which sees
 * one file at a time, knows it: without it, it follows a failed path as if it had returned 0
 * into the caller's success branch. */
static inline int s3d_failed(int err, int rc)
{
    S3D_ASSERT(err < 0 && rc == err);
    return rc;
}
#ifdef S3D_ASSERTS
#define s3d_fail(err, ...)        s3d_failed((err), (s3d_fail)((err), __VA_ARGS__))
#define s3d_fail_s3(err, ...)     s3d_failed((err), (s3d_fail_s3)((err), __VA_ARGS__))
#define s3d_fail_prefix(err, ...) s3d_failed((err), (s3d_fail_prefix)((err), __VA_ARGS__))
#endif
/* Forgets the calling thread's last error. */
void s3d_clear_error(void);

/* What a user should do when no file descriptor is left (S3D_EMFILE). */
#define S3D_EMFILE_HINT "too many open files; lower --concurrency or raise ulimit -n"

/* The whole of the calling thread's last error, for the library's own use: s3d_last_error
 * fills only the prefix the caller's struct_size covers, so a local struct left uninitialised
 * would be read as a size. */
void s3d_error_get(struct s3d_error_info *out);
#ifndef S3D_LAST_ERROR_OK /* error.c, and tests of the public call */
#pragma GCC poison s3d_last_error
#endif

/* The code of the calling thread's last recorded error (S3D_EIO if none). */
int s3d_last_error_code(void);

/* Maps an errno value to an S3D_E* code (ENOENT -> S3D_ENOENT, ENOMEM -> S3D_ENOMEM, else
 * S3D_EIO). */
int s3d_err_from_errno(int e);

#endif
