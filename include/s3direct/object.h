/* s3direct/object.h - single S3 operations and URIs.
 *
 * Each call runs on the calling thread, retries transient failures as configured on the client
 * (5xx, SlowDown, RequestTimeout, connection reset, stall) with exponential backoff and full
 * jitter, and on failure leaves the detail in s3d_last_error(). Bucket and key are
 * NUL-terminated UTF-8; keys may contain any character, they are percent-encoded on the wire. */
#ifndef S3DIRECT_OBJECT_H
#define S3DIRECT_OBJECT_H

#include <stddef.h>
#include <stdint.h>
#include "s3direct/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Splits "s3://bucket/key" into bucket and key, written NUL-terminated into the caller's
 * buffers. The key may be empty ("s3://bucket" and "s3://bucket/"). Errors: S3D_EURI (not
 * s3://, empty or invalid bucket name), S3D_ETOOBIG (a buffer is too small). */
S3D_API int s3d_uri_parse(const char *uri, char *bucket, size_t bucket_cap, char *key,
                          size_t key_cap);

/* What HeadObject returns. An output struct that can grow (version.h): set struct_size, or
 * zero the struct; only its first struct_size bytes are written. */
struct s3d_object_info {
    uint32_t struct_size; /* sizeof(struct s3d_object_info); 0 = the first version's size */
    uint64_t size;
    int64_t last_modified; /* seconds since the epoch, 0 if unknown */
    char etag[80];         /* as the server sent it, quotes included */
    char content_type[128];
    char checksum_crc32c[16]; /* base64 x-amz-checksum-crc32c when the server returned one */
};

/* HeadObject. A missing key is S3D_ENOSUCHKEY; a missing bucket S3D_ENOSUCHBUCKET (a 404 to
 * HEAD has no body, so a HeadBucket tells the two apart, on that error path only). */
S3D_API int s3d_head_object(struct s3d_client *c, const char *bucket, const char *key,
                            struct s3d_object_info *out);
/* Creates a bucket in the client's region. A bucket that already exists, yours or another
 * account's, is S3D_EBUCKETEXISTS (checked with HeadBucket first: AWS us-east-1 and Ceph RGW
 * answer 200 to re-creating a bucket you own). s3d_last_error tells the two apart: yours has
 * http_status 200 (HeadBucket's answer) or s3_code "BucketAlreadyOwnedByYou"; another
 * account's 403 or "BucketAlreadyExists". */
S3D_API int s3d_create_bucket(struct s3d_client *c, const char *bucket);
S3D_API int s3d_delete_bucket(struct s3d_client *c, const char *bucket);
/* Deleting a key that does not exist succeeds, as on S3. */
S3D_API int s3d_delete_object(struct s3d_client *c, const char *bucket, const char *key);
/* Deletes up to any number of keys, 1000 per DeleteObjects request. Fails on the first key
 * the server refused, naming it. */
S3D_API int s3d_delete_objects(struct s3d_client *c, const char *bucket, const char *const *keys,
                               size_t n);

/* One entry of a listing; strings valid only during the callback. The library owns it and
 * sets struct_size to the size it filled (version.h). */
struct s3d_list_entry {
    uint32_t struct_size;
    const char *key;
    uint64_t size;
    int64_t last_modified;
    const char *etag;
    int32_t is_prefix; /* 1: a CommonPrefixes entry (with a delimiter); size is 0 */
    /* Added in 0.1.0 after is_prefix (read it when struct_size covers it): 1 on the last
     * entry of a ListObjectsV2 page, so that a caller can show each page as it wants (aws s3
     * ls prints a page's prefixes before its objects). */
    int32_t page_last;
};
/* Called once per entry, on the calling thread, in the server's order: each page's objects,
 * then its common prefixes. Return non-zero to stop the listing early (s3d_list_objects then
 * returns 0). */
typedef int (*s3d_list_fn)(void *user, const struct s3d_list_entry *entry);
/* ListObjectsV2 over all pages. delimiter may be NULL (recursive listing). */
S3D_API int s3d_list_objects(struct s3d_client *c, const char *bucket, const char *prefix,
                             const char *delimiter, s3d_list_fn fn, void *user);

S3D_API int s3d_abort_multipart_upload(struct s3d_client *c, const char *bucket, const char *key,
                                       const char *upload_id);

/* A presigned URL (SigV4 query-string form) for method "GET", "PUT", "HEAD" or "DELETE",
 * valid for expires_s seconds (1 .. 604800). Written NUL-terminated into out.
 * S3D_ETOOBIG if out_cap is too small; S3D_ENOCREDS without credentials. */
S3D_API int s3d_presign(struct s3d_client *c, const char *method, const char *bucket,
                        const char *key, uint32_t expires_s, char *out, size_t out_cap);

/* One multipart upload in progress; strings valid only during the callback. The library owns
 * it and sets struct_size to the size it filled (version.h). */
struct s3d_upload_entry {
    uint32_t struct_size;
    const char *key;
    const char *upload_id;
    int64_t initiated;         /* seconds since the epoch, 0 if the server sent none */
    const char *storage_class; /* "STANDARD", ...; NULL if the server sent none */
};
/* Called once per upload, on the calling thread, in the server's order (by key, then by
 * initiation time). Return non-zero to stop the listing early (then 0 is returned). */
typedef int (*s3d_upload_entry_fn)(void *user, const struct s3d_upload_entry *entry);
/* ListMultipartUploads over all pages, with each upload's initiation time (what an age filter
 * needs). prefix may be NULL (every upload of the bucket). */
S3D_API int s3d_list_uploads(struct s3d_client *c, const char *bucket, const char *prefix,
                             s3d_upload_entry_fn fn, void *user);

/* One bucket of the account; the name is valid only during the callback. The library owns it
 * and sets struct_size to the size it filled (version.h). */
struct s3d_bucket_entry {
    uint32_t struct_size;
    const char *name;
    int64_t creation_date; /* seconds since the epoch, 0 if the server sent none */
};
typedef int (*s3d_bucket_fn)(void *user, const struct s3d_bucket_entry *entry);
/* ListBuckets (all pages): the buckets the credentials own, on the calling thread, in the
 * server's order (by name). Return non-zero from fn to stop early (then 0 is returned). */
S3D_API int s3d_list_buckets(struct s3d_client *c, s3d_bucket_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
