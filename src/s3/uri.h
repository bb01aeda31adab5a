/* uri.h - s3:// URIs, bucket names and AWS percent-encoding (internal).
 *
 * s3d_uri_parse() itself is public (include/s3direct/object.h) and implemented in uri.c.
 * Rules it applies:
 *   - the scheme is exactly "s3://" (lower case, as the AWS CLI requires; "S3://x" is not an
 *     S3 URI, so a caller that dispatches on the prefix treats it as a local path);
 *   - the bucket runs to the first '/' and must pass s3d_bucket_name_check();
 *   - everything after that first '/' is the key, byte for byte: it may be empty, start with
 *     '/', and contain spaces, '+', '%', '?', '#', unicode; it is NOT percent-decoded;
 *   - the key is at most S3D_KEY_MAX bytes (S3's limit).
 * All functions here are pure, thread-safe, and call s3d_fail() on the failures they return. */
#ifndef S3D_S3_URI_H
#define S3D_S3_URI_H

#include <stddef.h>

#include "common/dynbuf.h"
#include "common/compiler.h"
#include "s3/limits.h"

/* S3D_BUCKET_MIN, S3D_BUCKET_MAX, S3D_KEY_MAX: s3/limits.h. */

/* Checks a bucket name: 3..63 bytes of [a-z0-9.-], plus (leniently, for legacy us-east-1
 * buckets and custom servers such as Ceph RGW) upper-case letters and '_'; the first and the
 * last character must be a letter or digit; no "..". Returns 0 or S3D_EURI (message names the
 * bucket and the rule broken). bucket must not be NULL; len is its length. */
S3D_NODISCARD int s3d_bucket_name_check(const char *bucket, size_t len);

/* 1 when the bucket name can be a DNS label sequence for virtual-hosted addressing: valid as
 * above AND only [a-z0-9.-], no label starting or ending with '-', and not shaped like an IPv4
 * address. 0 otherwise. Never fails, never records an error. NULL gives 0. */
int s3d_bucket_dns_compatible(const char *bucket);

/* AWS SigV4 percent-encoding of s[0..len) appended to out: the unreserved bytes A-Z a-z 0-9
 * '-' '_' '.' '~' are kept, '/' is kept when encode_slash is 0, every other byte (UTF-8 is
 * encoded bytewise) becomes %XX with upper-case hex. Returns 0, or S3D_ETOOBIG / S3D_ENOMEM
 * from the dynbuf (recorded with s3d_fail). s may be NULL when len is 0. */
S3D_NODISCARD int s3d_uri_encode(struct s3d_dynbuf *out, const char *s, size_t len,
                                 int encode_slash);

#endif
