/* s3direct/errors.h - error codes and the per-thread error detail.
 *
 * Every public function that can fail returns int: 0 on success, a negative S3D_E* code on
 * failure. Codes are ABI: new ones are appended, none is ever renumbered or removed.
 *
 * The detail a person needs (operation, bucket, key, HTTP status, the S3 <Code>, message and
 * request id, a file name and offset, a CUDA or dlopen error string) is recorded when the error
 * happens, in storage local to the calling thread, and stays readable there until the next
 * failing s3direct call on that thread. */
#ifndef S3DIRECT_ERRORS_H
#define S3DIRECT_ERRORS_H

#include <stddef.h>
#include <stdint.h>
#include "s3direct/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, description). Append only. */
#define S3D_ERRNO_MAP(X)                                                                           \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "input/output error")                                                               \
    X(ENOENT, -4, "no such file or directory")                                                     \
    X(ECANCELED, -5, "operation canceled")                                                         \
    X(ETOOBIG, -6, "size over a limit")                                                            \
    X(EURI, -7, "malformed URI")                                                                   \
    X(ECONFIG, -8, "bad configuration")                                                            \
    X(ENOCREDS, -9, "no credentials found")                                                        \
    X(ECONNECT, -10, "could not connect to the endpoint")                                          \
    X(ETIMEDOUT, -11, "timed out")                                                                 \
    X(ENETWORK, -12, "network error")                                                              \
    X(ETLS, -13, "TLS error")                                                                      \
    X(EHTTP, -14, "HTTP error")                                                                    \
    X(ENOSUCHKEY, -15, "no such key")                                                              \
    X(ENOSUCHBUCKET, -16, "no such bucket")                                                        \
    X(EACCESS, -17, "access denied")                                                               \
    X(ESIGNATURE, -18, "signature does not match")                                                 \
    X(EKEYID, -19, "invalid access key id")                                                        \
    X(ESLOWDOWN, -20, "server asked to slow down")                                                 \
    X(ESERVER, -21, "server error")                                                                \
    X(EPROTO, -22, "malformed server response")                                                    \
    X(ERETRIES, -23, "retries exhausted")                                                          \
    X(ECHECKSUM, -24, "checksum mismatch")                                                         \
    X(EBUCKETEXISTS, -25, "bucket already exists")                                                 \
    X(ENOUPLOAD, -26, "no such multipart upload")                                                  \
    X(ERANGE, -27, "requested range not satisfiable")                                              \
    X(ENOTSUP, -28, "not supported")                                                               \
    X(ENODEVICE, -29, "no such GPU device")                                                        \
    X(ECUDA, -30, "CUDA error")                                                                    \
    X(ECUFILE, -31, "cuFile error")                                                                \
    X(EFMT_HEADER_SIZE, -40, "safetensors header size invalid")                                    \
    X(EFMT_JSON, -41, "safetensors header is not valid JSON")                                      \
    X(EFMT_DTYPE, -42, "unknown dtype")                                                            \
    X(EFMT_SHAPE, -43, "invalid shape")                                                            \
    X(EFMT_OFFSETS, -44, "invalid data offsets")                                                   \
    X(EFMT_OVERLAP, -45, "tensors overlap")                                                        \
    X(EFMT_HOLE, -46, "gap between tensors")                                                       \
    X(EFMT_SIZE_MISMATCH, -47, "shape and dtype do not match the byte length")                     \
    X(EFMT_DUPLICATE, -48, "duplicate tensor name")                                                \
    X(EFMT_UTF8, -49, "name is not valid UTF-8")                                                   \
    X(EFMT_TRUNCATED, -50, "data shorter than the header says")                                    \
    X(EFMT_METADATA, -51, "invalid __metadata__")                                                  \
    X(EFMT_INDEX, -52, "invalid sharded checkpoint index")                                         \
    X(EFMT_SHARD_PATH, -53, "shard path escapes the checkpoint")                                   \
    X(EFMT_FIELD, -54, "missing or invalid header field")                                          \
    X(ENOTENSOR, -55, "no such tensor")                                                            \
    X(EDEST, -56, "destination does not match the tensor")                                         \
    X(ECHANGED, -57, "object changed during download")                                             \
    X(EMFILE, -58, "too many open files")                                                          \
    X(ECREDS, -59, "credential provider failed")                                                   \
    X(EEXPIRED, -60, "credentials expired")

enum s3d_errno {
#define S3D_X_ENUM(name, value, desc) S3D_##name = value,
    S3D_ERRNO_MAP(S3D_X_ENUM)
#undef S3D_X_ENUM
};

/* "S3D_ENOSUCHKEY" for S3D_ENOSUCHKEY; "S3D_UNKNOWN" for a code not in the list. Static. */
S3D_API const char *s3d_err_name(int err);
/* "no such key" for S3D_ENOSUCHKEY; "success" for 0. Static. */
S3D_API const char *s3d_strerror(int err);

/* Detail of the last failure on the calling thread. Strings are NUL-terminated, empty when
 * unknown, and owned by the library (valid until the next failing call on this thread).
 * An output struct that can grow (version.h): set struct_size, or zero the struct. */
struct s3d_error_info {
    uint32_t struct_size;  /* sizeof(struct s3d_error_info); 0 = the first version's size */
    int code;              /* the S3D_E* code returned */
    int http_status;       /* 0 when no HTTP response was involved */
    const char *message;   /* one line, complete: what failed, where, and why */
    const char *operation; /* "GetObject", "UploadPart", "read header", ... */
    const char *bucket;
    const char *key;
    const char *s3_code;    /* the <Code> of an S3 error body, e.g. "NoSuchKey" */
    const char *s3_message; /* its <Message> (empty on Ceph RGW) */
    const char *request_id; /* x-amz-request-id or <RequestId> */
};

/* Fills *out (the first out->struct_size bytes) with the calling thread's last error. Never
 * fails; out must not be NULL. */
S3D_API void s3d_last_error(struct s3d_error_info *out);
/* Shortcut for the one-line message of the calling thread's last error ("" if none). */
S3D_API const char *s3d_last_error_message(void);

#ifdef __cplusplus
}
#endif
#endif
