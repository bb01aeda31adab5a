/* ops.h - the S3 operations, each one request (or one paged series) run on the calling thread
 * with retries (s3d_s3_op_run): objects and buckets in ops.c, multipart uploads in
 * ops_multipart.c, the CRC-32C s3direct keeps with an object in ops_tagging.c, the listings in
 * list.c. Internal: the public wrappers are in engine/api_object.c, the parallel data path in
 * engine/xfer.c (which builds its UploadPart / ranged GET ops with the *_init helpers here and
 * drives them itself).
 *
 * Strings are NUL-terminated; bucket and key are as the user wrote them (encoded here).
 * Every function returns 0 or a negative S3D_E* code recorded with the detail of the failure
 * (operation, bucket, key, HTTP status, S3 code, request id). Thread-safe: any number of
 * threads may call these on one context. */
#ifndef S3D_S3_OPS_H
#define S3D_S3_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/dynbuf.h"
#include "s3/s3ctx.h"
#include "s3direct/object.h"
#include "common/compiler.h"

/* Zeroes op and sets its operation (for messages), method, bucket and key: the start of
 * every op built here and in list.c. */
void s3d_op_init(struct s3d_s3_op *op, const char *operation, const char *method,
                 const char *bucket, const char *key);

/* HeadObject. A missing key is S3D_ENOSUCHKEY (HEAD 404 has no body). */
S3D_NODISCARD int s3d_op_head(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                              struct s3d_object_info *out);

/* GetObject of [offset, offset + length) into dst (length bytes, exactly; length > 0).
 * S3D_ERANGE when offset is past the end, S3D_EPROTO when the server sends another size.
 * if_match (NULL or "" = none): the ETag the object must still have, and object_size (0 = not
 * known) its size: else S3D_ECHANGED, whether the server refused (412) or answered with
 * another version (s3d_op_check_version). */
S3D_NODISCARD int s3d_op_get_range(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                                   uint64_t offset, uint64_t length, void *dst,
                                   const char *if_match, uint64_t object_size);

/* What the response to a ranged GET from offset tells of the object (the first request of a
 * download, xfer.h): its size (from Content-Range, or the body of a 200 from byte 0), ETag,
 * type, date and checksum, as a HEAD would, without its round trip. complete: the body is
 * all there, so its length must match the range. S3D_EPROTO when the response does not fit. */
S3D_NODISCARD int s3d_op_first_info(const struct s3d_s3_op *op, uint64_t offset, int complete,
                                    struct s3d_object_info *info);

/* Checks that a 2xx response to a ranged GET from offset first comes from the version a
 * download started on: the same ETag (etag; NULL or "" = not known, not checked) and the same
 * object size (size, 0 = not known), read from the Content-Range of a 206 (whose range must
 * start at first) or the Content-Length of a 200 from byte 0. If-Match alone does not ensure
 * it: a relay or server that ignores If-Match answers with the bytes of whatever object the
 * key has now. S3D_ECHANGED ("object changed during download") when either differs,
 * S3D_EPROTO when a 206 has no usable Content-Range while the size is known. */
S3D_NODISCARD int s3d_op_check_version(const struct s3d_s3_op *op, uint64_t first, const char *etag,
                                       uint64_t size);

/* Adds If-Match: etag to a GET, so that a replaced object fails with S3D_ECHANGED (HTTP 412)
 * instead of handing back bytes of another version. NULL or "" adds nothing. */
S3D_NODISCARD int s3d_op_if_match(struct s3d_s3_op *op, const char *etag);

/* PutObject of the iovec (content_type NULL = application/octet-stream). etag_out (80 bytes)
 * may be NULL. */
S3D_NODISCARD int s3d_op_put(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                             const struct iovec *iov, int iovcnt, const char *content_type,
                             char *etag_out);

/* Fills a zeroed op for a ranged GET of [first, last] into dst (last - first + 1 bytes). */
void s3d_op_get_init(struct s3d_s3_op *op, const char *bucket, const char *key, uint64_t first,
                     uint64_t last, void *dst);

/* Fills a zeroed op for UploadPart; number_buf (>= 12 bytes) and crc_b64 (NULL = no checksum
 * header) must outlive the op. */
void s3d_op_upload_part_init(struct s3d_s3_op *op, const char *bucket, const char *key,
                             const char *upload_id, uint32_t part_number, char *number_buf,
                             const struct iovec *iov, int iovcnt, uint64_t length,
                             const char *crc_b64);

/* The x-amz-copy-source value for bucket/key: "/" bucket "/" key, percent-encoded with '/'
 * kept in the key, NUL-terminated in out (reset first). */
S3D_NODISCARD int s3d_op_copy_source(struct s3d_dynbuf *out, const char *bucket, const char *key);

/* Fills a zeroed op for UploadPartCopy of [offset, offset + length) (length > 0) of
 * copy_source (s3d_op_copy_source) as part part_number, guarded with
 * x-amz-copy-source-if-match: if_match (NULL or "" = none; Ceph RGW 16 ignores it, so the
 * caller proves the copied bytes from the answer). number_buf (>= 12 bytes), range_buf (>= 64
 * bytes) and the strings must outlive the op. */
void s3d_op_upload_part_copy_init(struct s3d_s3_op *op, const char *bucket, const char *key,
                                  const char *upload_id, uint32_t part_number, char *number_buf,
                                  const char *copy_source, uint64_t offset, uint64_t length,
                                  char *range_buf, const char *if_match);

/* Reads a 2xx UploadPartCopy answer: the part's ETag (quotes as sent) into etag and its
 * ChecksumCRC32C (base64, "" when the server sent none) into crc32c. A 200 carrying an
 * <Error> document fails with that error (recorded); a body without an ETag is S3D_EPROTO. */
S3D_NODISCARD int s3d_op_copy_part_result(struct s3d_s3_op *op, char etag[80], char crc32c[16]);

/* CreateMultipartUpload: stores the malloc'ed upload id in *upload_id. */
S3D_NODISCARD int s3d_op_create_multipart(struct s3d_s3ctx *ctx, const char *bucket,
                                          const char *key, const char *content_type,
                                          char **upload_id);

/* With payload_signing AUTO over plain http, once per client (ctx->body_crc): whether the
 * server refuses a body whose x-amz-checksum-crc32c is wrong, asked with one signed 1-byte
 * UploadPart into upload_id carrying the CRC-32C of another byte, as part 1: call it before
 * any part is sent (the upload's own part 1 replaces it). Refused with a
 * checksum code: bodies carrying a CRC-32C go unsigned from then on (the server checks every
 * byte of them); stored: every body stays signed. Never fails: without an answer bodies stay
 * signed and the next upload asks again. */
void s3d_op_probe_body_crc(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                           const char *upload_id);

/* One part for CompleteMultipartUpload. */
struct s3d_op_part {
    uint32_t part_number;
    char etag[80];
    char crc32c[16]; /* base64, "" for none */
    /* The uploader's own record (not sent): the part's CRC-32C and length, combined into the
     * object's CRC-32C at the end (s3d_op_put_crc_tag). */
    uint32_t crc;
    uint64_t length;
};

/* CompleteMultipartUpload with parts in the order given (sort them by number first). A 200
 * response carrying an <Error> body fails with that error. The ETag of the result is not
 * required (Ceph RGW sends none): etag_out (80 bytes, may be NULL) receives it, or "". */
S3D_NODISCARD int s3d_op_complete_multipart(struct s3d_s3ctx *ctx, const char *bucket,
                                            const char *key, const char *upload_id,
                                            const struct s3d_op_part *parts, size_t n,
                                            char *etag_out);

/* ---- the CRC-32C of an object s3direct wrote, stored with the object itself ---------------
 * For servers that store no checksums of their own (Ceph RGW 16) and for multipart objects,
 * whose server checksum is composite (engine.md, "Checksums of objects s3direct wrote"):
 * a single PUT carries its full-object CRC-32C as user metadata (S3D_OP_CRC_META, base64 like
 * x-amz-checksum-crc32c); a multipart upload, once complete, gets the tag S3D_OP_CRC_TAG with
 * the value "<8 lowercase hex digits> <ETag without quotes>": the tag counts only for the
 * version with that ETag. */
#define S3D_OP_CRC_META "x-amz-meta-s3d-crc32c"
#define S3D_OP_CRC_TAG  "s3direct-crc32c"

/* What a GET or HEAD response tells of those. */
struct s3d_op_sums {
    char meta_crc32c[16]; /* the S3D_OP_CRC_META value, "" if none */
    uint32_t tag_count;   /* x-amz-tagging-count: 0 = no tags (no GetObjectTagging needed) */
};

/* The sums of op's response. */
void s3d_op_sums_get(const struct s3d_s3_op *op, struct s3d_op_sums *out);

/* The ETag S3 and Ceph RGW give the object a multipart upload of parts[0..n) (sorted)
 * completes to, for a server whose Complete answer has none: the hex MD5 of the parts' MD5s
 * (their ETags decoded), "-n", in quotes, into out (80 bytes). -1 (nothing recorded) when a
 * part's ETag is not 32 hex digits in quotes (an encrypted object's, say). */
int s3d_op_multipart_etag(const struct s3d_op_part *parts, size_t n, char out[80]);

/* 1 when ETags a and b are the same (non-empty), quotes and the case of hex digits aside. */
int s3d_op_etag_same(const char *a, const char *b);

/* What an ETag (quotes optional) says of its object: 1 = a single upload's MD5 (32 hex
 * digits); 2 = a multipart upload's MD5 of its parts' MD5s, "-" and the part count (into
 * *parts); 0 = neither (SSE-KMS or SSE-C objects, other servers' schemes). */
int s3d_op_etag_shape(const char *etag, uint32_t *parts);

/* s3d_op_head that also returns the response's sums (NULL = not wanted). */
S3D_NODISCARD int s3d_op_head_sums(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                                   struct s3d_object_info *out, struct s3d_op_sums *sums);

/* HeadObject ?partNumber=part_number: the part's size (its Content-Length) into *length and
 * the object's x-amz-mp-parts-count into *parts_count (0 when the server sent none: Ceph RGW
 * 16 ignores partNumber and answers for the whole object). The response's ETag is not
 * checked: AWS sends the object's, moto the part's. */
S3D_NODISCARD int s3d_op_head_part(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                                   uint32_t part_number, uint64_t *length, uint32_t *parts_count);

/* PutObjectTagging with the one tag S3D_OP_CRC_TAG = value (replacing the object's tags: an
 * object just completed by s3direct has none). */
S3D_NODISCARD int s3d_op_put_crc_tag(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                                     const char *value);

/* GetObjectTagging: the S3D_OP_CRC_TAG value into value (cap bytes; "" when the object has no
 * such tag, or a longer value than fits). */
S3D_NODISCARD int s3d_op_get_crc_tag(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                                     char *value, size_t cap);

/* AbortMultipartUpload. NoSuchUpload is S3D_ENOUPLOAD. */
S3D_NODISCARD int s3d_op_abort_multipart(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                                         const char *upload_id);

/* ListMultipartUploads over every page. */
S3D_NODISCARD int s3d_op_list_uploads(struct s3d_s3ctx *ctx, const char *bucket, const char *prefix,
                                      s3d_upload_entry_fn fn, void *user);

/* ListBuckets over every page (continuation-token). */
S3D_NODISCARD int s3d_op_list_buckets(struct s3d_s3ctx *ctx, s3d_bucket_fn fn, void *user);

/* ListObjectsV2 over every page; delimiter NULL = recursive. */
S3D_NODISCARD int s3d_op_list_objects(struct s3d_s3ctx *ctx, const char *bucket, const char *prefix,
                                      const char *delimiter, s3d_list_fn fn, void *user);

/* DeleteObject (a missing key succeeds). */
S3D_NODISCARD int s3d_op_delete_object(struct s3d_s3ctx *ctx, const char *bucket, const char *key);

/* DeleteObjects, 1000 keys per request (Quiet, Content-MD5). Fails on the first key refused,
 * naming it. */
S3D_NODISCARD int s3d_op_delete_objects(struct s3d_s3ctx *ctx, const char *bucket,
                                        const char *const *keys, size_t n);

/* CreateBucket (with a LocationConstraint outside us-east-1); DeleteBucket. */
S3D_NODISCARD int s3d_op_create_bucket(struct s3d_s3ctx *ctx, const char *bucket);
S3D_NODISCARD int s3d_op_delete_bucket(struct s3d_s3ctx *ctx, const char *bucket);

/* A presigned URL into out (out_cap bytes, NUL included). */
S3D_NODISCARD int s3d_op_presign(struct s3d_s3ctx *ctx, const char *method, const char *bucket,
                                 const char *key, uint32_t expires_s, char *out, size_t out_cap);

#endif
