/* api_copy.c - s3d_copy_object (transfer.h): an object copied to another key.
 *
 * Memory: a copy holds at most s3d_client_buffers() slots of part_size bytes (the fixed
 * concurrency, or what staging_bytes holds while it adapts), fetched a window at a time and
 * handed out as the parts of the upload; below the multipart threshold one buffer of the
 * object's size. */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "engine/api_transfer_int.h"
#include "engine/client_impl.h"
#include "engine/own_checksum.h"
#include "engine/part_size.h"
#include "engine/slots.h"
#include "engine/xfer.h"
#include "s3/ops.h"
#include "s3direct/transfer.h"

/* ---- copy: ranged GETs of a window of parts, then those parts uploaded --------------------- */

struct copy_ctx {
    struct s3d_client *c;
    const char *bucket, *key;
    const char *etag; /* of the source version the copy started on (If-Match) */
    uint64_t size, part, next_off;
    uint32_t next_number;
    struct topts *o;
    struct s3d_slots slots;
    struct s3d_get_job *win; /* the fetched window, one per slot */
    size_t win_n, win_next;
};

static int copy_next(void *ctx, struct s3d_put_part *p)
{
    struct copy_ctx *x = ctx;
    struct s3d_get_job *j;
    size_t k;
    int rc;
    if (x->win_next == x->win_n) {
        if (x->next_off >= x->size)
            return S3D_FEED_DONE;
        /* Fetch the next window only when every slot is back: memory stays bounded. */
        if (s3d_slots_free_count(&x->slots) < x->slots.n)
            return S3D_FEED_NOT_YET;
        x->win_n = 0;
        x->win_next = 0;
        for (k = 0; k < x->slots.n && x->next_off < x->size; k++) {
            j = &x->win[k];
            memset(j, 0, sizeof(*j));
            j->bucket = x->bucket;
            j->key = x->key;
            j->if_match = x->etag;
            j->object_size = x->size;
            j->offset = x->next_off;
            j->length = S3D_MIN(x->part, x->size - x->next_off);
            j->dst = s3d_slot_get(&x->slots);
            if (j->dst == NULL)
                return s3d_fail(S3D_ENOMEM, "out of memory for a copy buffer");
            x->next_off += j->length;
            x->win_n++;
        }
        rc = s3d_xfer_get(x->c, x->win, x->win_n, NULL, x->o->max_conc, NULL, NULL, x->o->cancel);
        if (rc < 0)
            return rc;
    }
    j = &x->win[x->win_next++];
    s3d_slot_as_part(&x->slots, j->dst, j->length, x->next_number++, p);
    return S3D_FEED_OK;
}

static int copy_release(void *ctx, const struct s3d_put_part *p)
{
    struct copy_ctx *x = ctx;
    s3d_slot_put(&x->slots, p->user);
    return 0;
}

/* A copy below the multipart threshold: one GET of the whole source (its version pinned by
 * If-Match), then one PUT. */
static int copy_single(struct s3d_client *c, const char *src_bucket, const char *src_key,
                       const char *dst_bucket, const char *dst_key,
                       const struct s3d_object_info *info, const struct s3d_want_crc *want,
                       const struct s3d_put_options *po)
{
    char *buf = malloc(info->size ? info->size : 1);
    int rc = 0;
    if (buf == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory");
    if (info->size > 0)
        rc = s3d_op_get_range(&c->s3, src_bucket, src_key, 0, info->size, buf, info->etag,
                              info->size);
    if (rc == 0 && want->b64[0] != '\0')
        rc = s3d_own_verify(src_bucket, src_key, want, s3d_crc32c(0, buf, (size_t)info->size));
    if (rc == 0) {
        struct iovec v = {.iov_base = buf, .iov_len = (size_t)info->size};
        rc = s3d_xfer_put_single(c, dst_bucket, dst_key, &v, 1, po);
    }
    free(buf);
    return rc;
}

/* A multipart copy: windows of ranged GETs into the slots, handed out as parts (copy_next). */
static int copy_multipart(struct s3d_client *c, const char *src_bucket, const char *src_key,
                          const char *dst_bucket, const char *dst_key,
                          const struct s3d_object_info *info, struct topts *o,
                          const struct s3d_put_options *po)
{
    struct copy_ctx x = {.c = c,
                         .bucket = src_bucket,
                         .key = src_key,
                         .etag = info->etag,
                         .size = info->size,
                         .part = s3d_upload_part_size(o->part_size, info->size),
                         .next_number = 1,
                         .o = o};
    const struct s3d_put_hooks h = {.next = copy_next, .release = copy_release, .ctx = &x};
    int rc = s3d_slots_init(&x.slots, s3d_client_buffers(c, o->max_conc, x.part), x.part);
    x.win = calloc(x.slots.n, sizeof(*x.win));
    if (rc == 0 && x.win == NULL)
        rc = s3d_fail(S3D_ENOMEM, "out of memory");
    if (rc == 0)
        rc = s3d_xfer_put_multipart(c, dst_bucket, dst_key, &h, po);
    s3d_slots_free(&x.slots);
    free(x.win);
    return rc;
}

int s3d_copy_object(struct s3d_client *c, const char *src_bucket, const char *src_key,
                    const char *dst_bucket, const char *dst_key,
                    const struct s3d_transfer_options *opts)
{
    struct s3d_object_info info;
    struct s3d_put_options po;
    struct s3d_op_sums sums;
    struct s3d_want_crc want;
    struct topts o;
    int rc = s3d_topts_check_args(c, src_bucket, src_key);
    if (rc == 0)
        rc = s3d_topts_check_args(c, dst_bucket, dst_key);
    if (rc == 0)
        rc = s3d_topts_resolve(c, opts, &o);
    if (rc < 0)
        return rc;
    rc = s3d_op_head_sums(&c->s3, src_bucket, src_key, &info, &sums);
    if (rc == 0) /* the HEAD carries the server's checksum: no second one */
        rc = s3d_own_object_checksum(c, src_bucket, src_key, &info, &sums, 1, &want);
    if (rc < 0)
        return rc;
    S3D_ASSERT(rc == 0); /* both return 0 or a negative code: want is filled */
    s3d_topts_put(&o, info.size,
             o.content_type ? o.content_type : (info.content_type[0] ? info.content_type : NULL),
             &po);
    /* The bytes read from the source are checked against its checksum before the copy is
     * stored (and given a CRC of its own). */
    po.expect_crc32c = want.b64;
    if (info.size < c->multipart_threshold)
        return copy_single(c, src_bucket, src_key, dst_bucket, dst_key, &info, &want, &po);
    return copy_multipart(c, src_bucket, src_key, dst_bucket, dst_key, &info, &o, &po);
}
