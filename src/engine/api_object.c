/* api_object.c - the public single operations of object.h: argument checks, the fork check,
 * then the internal operation on the client's S3 context (s3/ops.h). */
#include <string.h>

#include "common/error.h"
#include "common/opts.h"
#include "engine/client_impl.h"
#include "s3/ops.h"
#include "s3/uri.h"
#include "s3direct/object.h"

static int check_bucket(struct s3d_client *c, const char *bucket)
{
    int rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if (bucket == NULL)
        return s3d_fail(S3D_EINVAL, "bucket is NULL");
    return s3d_bucket_name_check(bucket, strlen(bucket));
}

static int check_key(struct s3d_client *c, const char *bucket, const char *key)
{
    int rc = check_bucket(c, bucket);
    if (rc < 0)
        return rc;
    if (key == NULL || key[0] == '\0')
        return s3d_fail(S3D_EINVAL, "s3://%s: empty key", bucket);
    if (strlen(key) > S3D_KEY_MAX)
        return s3d_fail(S3D_EINVAL, "s3://%s: key is longer than %d bytes", bucket, S3D_KEY_MAX);
    return 0;
}

int s3d_head_object(struct s3d_client *c, const char *bucket, const char *key,
                    struct s3d_object_info *out)
{
    int rc = check_key(c, bucket, key);
    if (rc < 0)
        return rc;
    struct s3d_object_info full;
    if (out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_head_object: out is NULL");
    rc = s3d_op_head(&c->s3, bucket, key, &full);
    s3d_out_copy(out, &full, sizeof(full), S3D_OBJECT_INFO_SIZE_V1);
    return rc;
}

int s3d_create_bucket(struct s3d_client *c, const char *bucket)
{
    int rc = check_bucket(c, bucket);
    return rc < 0 ? rc : s3d_op_create_bucket(&c->s3, bucket);
}

int s3d_delete_bucket(struct s3d_client *c, const char *bucket)
{
    int rc = check_bucket(c, bucket);
    return rc < 0 ? rc : s3d_op_delete_bucket(&c->s3, bucket);
}

int s3d_delete_object(struct s3d_client *c, const char *bucket, const char *key)
{
    int rc = check_key(c, bucket, key);
    return rc < 0 ? rc : s3d_op_delete_object(&c->s3, bucket, key);
}

int s3d_delete_objects(struct s3d_client *c, const char *bucket, const char *const *keys, size_t n)
{
    size_t i;
    int rc = check_bucket(c, bucket);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_delete_objects: keys is NULL");
    for (i = 0; i < n; i++)
        if (keys[i] == NULL || keys[i][0] == '\0')
            return s3d_fail(S3D_EINVAL, "s3d_delete_objects: key %zu is empty", i);
    return s3d_op_delete_objects(&c->s3, bucket, keys, n);
}

int s3d_list_objects(struct s3d_client *c, const char *bucket, const char *prefix,
                     const char *delimiter, s3d_list_fn fn, void *user)
{
    int rc = check_bucket(c, bucket);
    if (rc < 0)
        return rc;
    if (fn == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_list_objects: fn is NULL");
    return s3d_op_list_objects(&c->s3, bucket, prefix, delimiter, fn, user);
}

int s3d_list_uploads(struct s3d_client *c, const char *bucket, const char *prefix,
                     s3d_upload_entry_fn fn, void *user)
{
    int rc = check_bucket(c, bucket);
    if (rc < 0)
        return rc;
    if (fn == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_list_uploads: fn is NULL");
    return s3d_op_list_uploads(&c->s3, bucket, prefix, fn, user);
}

int s3d_list_buckets(struct s3d_client *c, s3d_bucket_fn fn, void *user)
{
    int rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if (fn == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_list_buckets: fn is NULL");
    return s3d_op_list_buckets(&c->s3, fn, user);
}

int s3d_abort_multipart_upload(struct s3d_client *c, const char *bucket, const char *key,
                               const char *upload_id)
{
    int rc = check_key(c, bucket, key);
    if (rc < 0)
        return rc;
    if (upload_id == NULL || upload_id[0] == '\0')
        return s3d_fail(S3D_EINVAL, "s3d_abort_multipart_upload: empty upload id");
    return s3d_op_abort_multipart(&c->s3, bucket, key, upload_id);
}

int s3d_presign(struct s3d_client *c, const char *method, const char *bucket, const char *key,
                uint32_t expires_s, char *out, size_t out_cap)
{
    int rc = check_key(c, bucket, key);
    if (rc < 0)
        return rc;
    if (method == NULL || out == NULL || out_cap == 0)
        return s3d_fail(S3D_EINVAL, "s3d_presign: NULL method or output buffer");
    return s3d_op_presign(&c->s3, method, bucket, key, expires_s, out, out_cap);
}
