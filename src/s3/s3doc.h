/* s3doc.h - parsing S3 XML responses and building S3 XML request bodies (internal).
 *
 * Each parser runs one handler over the reader of xml.h, so the reader's caps and error rules
 * apply (body over S3D_XML_MAX_BODY: S3D_ETOOBIG; anything malformed: S3D_EPROTO with the byte
 * offset). A required field missing or not a number also fails with S3D_EPROTO, naming it.
 *
 * Parsers take the body as pointer + length (need not be NUL-terminated); results are
 * malloc'ed, owned by the caller and freed with the matching free function, which accepts NULL
 * and partially filled structs (on failure the out struct is freed and zeroed). Absent
 * optional text fields are NULL. Thread-safe, no global state. */
#ifndef S3D_S3_S3DOC_H
#define S3D_S3_S3DOC_H

#include <stddef.h>
#include <stdint.h>

#include "common/dynbuf.h"
#include "common/compiler.h"
#include "s3/limits.h"

/* S3's limits on the two request bodies (S3D_MAX_PARTS, S3D_MAX_DELETE_KEYS): s3/limits.h. */

/* ---- errors --------------------------------------------------------------------------- */

/* <Error><Code/><Message/><RequestId/><Key/><BucketName/><Resource/></Error>. */
struct s3d_xml_error {
    char *code;
    char *message; /* empty on Ceph RGW */
    char *request_id;
    char *key;
    char *bucket_name;
    char *resource;
};

/* 1 when the document's root element is <Error>, 0 otherwise (including malformed or empty
 * bodies). Cheap: looks at the first element only (s3d_xml_root_is). Records nothing. */
int s3d_xml_is_error(const char *body, size_t len);

/* Parses an <Error> document. S3D_EPROTO if malformed or the root is not <Error>. */
S3D_NODISCARD int s3d_xml_parse_error(const char *body, size_t len, struct s3d_xml_error *out);
void s3d_xml_error_free(struct s3d_xml_error *e);

/* ---- ListObjectsV2 -------------------------------------------------------------------- */

struct s3d_xml_object {
    char *key;
    uint64_t size;
    int64_t last_modified; /* seconds since the epoch; 0 when absent */
    char *etag;            /* as sent, quotes included; NULL when absent */
};

struct s3d_xml_list_result {
    struct s3d_xml_object *contents; /* n_contents entries, in document order */
    size_t n_contents;
    char **prefixes; /* CommonPrefixes/Prefix, n_prefixes entries */
    size_t n_prefixes;
    int is_truncated;              /* IsTruncated "true" -> 1 */
    char *next_continuation_token; /* NULL when absent */
    uint64_t key_count;            /* KeyCount; 0 when absent */
};

/* Parses a <ListBucketResult>. Every <Contents> needs a <Key>; <Size> must be a decimal
 * number. S3D_EPROTO otherwise, or when the root is not ListBucketResult. */
S3D_NODISCARD int s3d_xml_parse_list_v2(const char *body, size_t len,
                                        struct s3d_xml_list_result *out);
void s3d_xml_list_free(struct s3d_xml_list_result *r);

/* ---- multipart ------------------------------------------------------------------------ */

/* <InitiateMultipartUploadResult><UploadId>: stores the malloc'ed upload id in *upload_id.
 * S3D_EPROTO when it is absent or empty. */
S3D_NODISCARD int s3d_xml_parse_initiate(const char *body, size_t len, char **upload_id);

struct s3d_xml_complete {
    char *location; /* may be NULL */
    char *bucket;
    char *key;
    char *etag; /* may be NULL or "" (Ceph RGW sends an empty ETag) */
};

/* Parses a CompleteMultipartUpload response. S3 can answer HTTP 200 and still fail, with an
 * <Error> document as the body: then this returns 1 and fills *err (out stays zeroed); the
 * caller maps err->code to an S3D_E* code. Returns 0 for a <CompleteMultipartUploadResult>
 * (out filled, err untouched), S3D_EPROTO for anything else. err must not be NULL. */
S3D_NODISCARD int s3d_xml_parse_complete(const char *body, size_t len, struct s3d_xml_complete *out,
                                         struct s3d_xml_error *err);
void s3d_xml_complete_free(struct s3d_xml_complete *c);

/* An UploadPartCopy response: <CopyPartResult> with the copied part's ETag (S3 and Ceph RGW:
 * the hex MD5 of the part's bytes, quotes optional) and, where the server computes it, its
 * ChecksumCRC32C (base64). As Complete, a 200 may carry an <Error> document: then this
 * returns 1 and fills *err. 0 for a result with a non-empty ETag, S3D_EPROTO otherwise. */
struct s3d_xml_copy_part {
    char *etag;
    char *crc32c; /* NULL when absent */
};
S3D_NODISCARD int s3d_xml_parse_copy_part(const char *body, size_t len,
                                          struct s3d_xml_copy_part *out, struct s3d_xml_error *err);
void s3d_xml_copy_part_free(struct s3d_xml_copy_part *c);

struct s3d_xml_upload {
    char *key;
    char *upload_id;
    int64_t initiated;   /* Initiated, seconds since the epoch; 0 when absent */
    char *storage_class; /* NULL when absent */
};

struct s3d_xml_uploads_result {
    struct s3d_xml_upload *uploads; /* n_uploads entries */
    size_t n_uploads;
    int is_truncated;
    char *next_key_marker;       /* NULL when absent */
    char *next_upload_id_marker; /* NULL when absent */
};

/* Parses a <ListMultipartUploadsResult>; each <Upload> needs Key and UploadId. */
S3D_NODISCARD int s3d_xml_parse_list_uploads(const char *body, size_t len,
                                             struct s3d_xml_uploads_result *out);
void s3d_xml_uploads_free(struct s3d_xml_uploads_result *r);

/* ---- ListBuckets ---------------------------------------------------------------------- */

struct s3d_xml_bucket {
    char *name;
    int64_t creation_date; /* seconds since the epoch; 0 when absent */
};

struct s3d_xml_buckets_result {
    struct s3d_xml_bucket *buckets; /* n_buckets entries */
    size_t n_buckets;
    char *continuation_token; /* NULL when absent (the last or only page) */
};

/* Parses a <ListAllMyBucketsResult>; each <Buckets><Bucket> needs a <Name>. */
S3D_NODISCARD int s3d_xml_parse_list_buckets(const char *body, size_t len,
                                             struct s3d_xml_buckets_result *out);
void s3d_xml_buckets_free(struct s3d_xml_buckets_result *r);

/* ---- DeleteObjects -------------------------------------------------------------------- */

struct s3d_xml_delete_error {
    char *key;
    char *code;
    char *message; /* may be NULL or "" */
};

struct s3d_xml_delete_result {
    char **deleted; /* Deleted/Key, n_deleted entries */
    size_t n_deleted;
    struct s3d_xml_delete_error *errors; /* n_errors entries */
    size_t n_errors;
};

/* Parses a <DeleteResult>. With Quiet the server lists only errors: n_deleted is then 0. */
S3D_NODISCARD int s3d_xml_parse_delete(const char *body, size_t len,
                                       struct s3d_xml_delete_result *out);
void s3d_xml_delete_free(struct s3d_xml_delete_result *r);

/* ---- builders ------------------------------------------------------------------------- */

struct s3d_xml_part {
    uint32_t part_number;
    const char *etag;            /* as UploadPart returned it, quotes included */
    const char *checksum_crc32c; /* base64, or NULL for none */
};

/* Appends a CompleteMultipartUpload body (XML declaration, the S3 xmlns, one <Part> per entry
 * in the order given: the caller sorts by part number) to out. Text is XML-escaped. Returns 0,
 * S3D_EINVAL (n 0, a NULL etag), S3D_ETOOBIG / S3D_ENOMEM (recorded). */
S3D_NODISCARD int s3d_xml_build_complete(const struct s3d_xml_part *parts, size_t n,
                                         struct s3d_dynbuf *out);

/* Appends a Delete body for keys[0..n) (n 1..1000; S3D_EINVAL otherwise) with <Quiet>true when
 * quiet, to out. Keys are XML-escaped; a key holding a byte XML 1.0 cannot carry (a control
 * character other than tab, LF, CR) fails with S3D_EINVAL naming it. */
S3D_NODISCARD int s3d_xml_build_delete(const char *const *keys, size_t n, int quiet,
                                       struct s3d_dynbuf *out);

/* GetObjectTagging: the value of the tag named key, malloc'ed into *value (NULL when the
 * object has no such tag). S3D_EPROTO when the body is not a <Tagging> document. */
S3D_NODISCARD int s3d_xml_parse_tag(const char *body, size_t len, const char *key, char **value);

/* Appends a PutObjectTagging body with the one tag key = value (XML-escaped) to out. */
S3D_NODISCARD int s3d_xml_build_tagging(const char *key, const char *value, struct s3d_dynbuf *out);

/* Appends s[0..len) to out escaped for element text: & < > become entities, and CR becomes
 * &#13; (a parser would otherwise turn it into LF). Quotes need no escaping in text and are
 * kept. Other bytes pass through unchanged. Returns 0 or a dynbuf error (recorded). */
S3D_NODISCARD int s3d_xml_escape(struct s3d_dynbuf *out, const char *s, size_t len);

#endif
