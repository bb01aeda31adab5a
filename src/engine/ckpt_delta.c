/* ckpt_delta.c - the base of an incremental save and host views of the bytes it writes
 * (contract in ckpt_delta.h).
 *
 * A tensor is unchanged when the base has one of the same name, dtype, shape and byte count
 * whose stored CRC-32C equals the CRC of the bytes being saved. The CRC is what the save
 * computes anyway (it goes in the header); here it is computed before planning, one pass over
 * host memory, or over device memory through one staging chunk at a time. A CRC match picks
 * the candidates; the copy itself is proved later against the bytes (ckpt_write.c). */
#include "engine/ckpt_delta.h"

#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_reader.h"
#include "engine/pool.h"

int s3d_delta_base_open(struct s3d_client *c, const char *uri, int target_s3,
                        struct s3d_ckpt_base *b)
{
    struct s3d_loc loc;
    int rc;

    b->r = NULL;
    if (uri == NULL || uri[0] == '\0')
        return 0;
    rc = s3d_loc_parse(uri, &loc);
    if (rc < 0) {
        S3D_INFO("base %s: not used, a full save: %s", uri, s3d_last_error_message());
        return 0;
    }
    if (loc.is_s3 != target_s3) {
        S3D_INFO("base %s: not used, a full save: the base is %s and the checkpoint %s", uri,
                 loc.is_s3 ? "on S3" : "a file", target_s3 ? "on S3" : "a file");
        return 0;
    }
    rc = s3d_reader_open(c, uri, &b->r);
    if (rc == S3D_ENOMEM || rc == S3D_ECANCELED)
        return rc;
    if (rc < 0) {
        S3D_INFO("base %s: not used, a full save: %s", uri, s3d_last_error_message());
        b->r = NULL;
    }
    return 0;
}

void s3d_delta_base_close(struct s3d_ckpt_base *b)
{
    s3d_reader_close(b->r);
    b->r = NULL;
}

/* The source holding object offset off (the last whose start is <= off). */
static size_t src_at(const struct s3d_delta_io *io, uint64_t off)
{
    size_t lo = 0, hi = io->nsrcs;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (io->start[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* fn over [at, at + len) of device source s, through one staging chunk at a time. */
static int walk_device(const struct s3d_delta_io *io, const struct s3d_wsrc *s, uint64_t at,
                       uint64_t len, int (*fn)(void *, const void *, size_t), void *user)
{
    struct s3d_stream *st;
    void *chunk;
    size_t cs;
    int rc = s3d_stream_set_get(io->streams, s->device, &st);
    if (rc < 0)
        return rc;
    S3D_ASSERT(io->pool != NULL);
    cs = s3d_pool_chunk_size(io->pool);
    chunk = s3d_pool_get(io->pool, io->cancel);
    if (chunk == NULL)
        return s3d_fail(S3D_ECANCELED, "save canceled");
    while (rc == 0 && len > 0) {
        uint64_t n = S3D_MIN(len, (uint64_t)cs);
        rc = s3d_device_copy_dtoh(io->dev, st, chunk, (uint64_t)(uintptr_t)s->ptr + at, n);
        /* Waited for even after a failure: the chunk goes back to the pool. */
        if (rc == 0)
            rc = s3d_device_stream_sync(io->dev, st);
        else
            s3d_ignore_rc(s3d_device_stream_sync(io->dev, st));
        if (rc == 0)
            rc = fn(user, chunk, (size_t)n);
        at += n;
        len -= n;
    }
    s3d_pool_put(io->pool, chunk);
    return rc;
}

int s3d_delta_walk(const struct s3d_delta_io *io, uint64_t off, uint64_t len,
                   int (*fn)(void *user, const void *p, size_t n), void *user)
{
    size_t i = src_at(io, off);
    int rc = 0;
    while (rc == 0 && len > 0 && i < io->nsrcs) {
        const struct s3d_wsrc *s = &io->srcs[i];
        uint64_t at = off - io->start[i];
        uint64_t n = at < s->len ? S3D_MIN(s->len - at, len) : 0;
        if (n > 0) {
            if (s->device < 0) {
                /* Host memory: in pieces a size_t holds, whatever the platform. */
                const char *p = s->ptr + at;
                uint64_t left = n;
                while (rc == 0 && left > 0) {
                    size_t piece = (size_t)S3D_MIN(left, (uint64_t)1 << 30);
                    rc = fn(user, p, piece);
                    p += piece;
                    left -= piece;
                }
            } else {
                rc = walk_device(io, s, at, n, fn, user);
            }
        }
        off += n;
        len -= n;
        i++;
    }
    if (rc == 0 && len > 0)
        rc = s3d_fail(S3D_EINVAL, "delta walk: %llu bytes past the object's end",
                      (unsigned long long)len);
    return rc;
}

static int crc_fn(void *user, const void *p, size_t n)
{
    uint32_t *crc = user;
    *crc = s3d_crc32c(*crc, p, n);
    return 0;
}

int s3d_delta_tensor_crcs(const struct s3d_delta_io *io, uint32_t *crcs)
{
    for (size_t i = 0; i < io->nsrcs; i++) {
        const struct s3d_wsrc *s = &io->srcs[i];
        uint32_t crc = 0;
        int rc;
        if (s->tensor < 0)
            continue;
        rc = s3d_delta_walk(io, io->start[i], s->len, crc_fn, &crc);
        if (rc < 0)
            return rc;
        crcs[s->tensor] = crc;
    }
    return 0;
}

int s3d_delta_range_crc(const struct s3d_delta_io *io, const uint32_t *crcs, uint64_t off,
                        uint64_t len, uint32_t *out)
{
    uint32_t crc = 0;
    size_t i = src_at(io, off);
    while (len > 0 && i < io->nsrcs) {
        const struct s3d_wsrc *s = &io->srcs[i];
        uint64_t at = off - io->start[i];
        uint64_t n = at < s->len ? S3D_MIN(s->len - at, len) : 0;
        if (n > 0) {
            uint32_t piece = 0;
            if (s->tensor >= 0 && at == 0 && n == s->len) {
                piece = crcs[s->tensor];
            } else {
                int rc = s3d_delta_walk(io, off, n, crc_fn, &piece);
                if (rc < 0)
                    return rc;
            }
            crc = s3d_crc32c_combine(crc, piece, n);
        }
        off += n;
        len -= n;
        i++;
    }
    if (len > 0)
        return s3d_fail(S3D_EINVAL, "delta CRC: a range past the object's end");
    *out = crc;
    return 0;
}

static int md5_fn(void *user, const void *p, size_t n)
{
    if (EVP_DigestUpdate(user, p, n) != 1)
        return s3d_fail(S3D_ENOMEM, "MD5 update failed");
    return 0;
}

int s3d_delta_range_md5(const struct s3d_delta_io *io, uint64_t off, uint64_t len, char hex[33])
{
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dn = 0;
    int rc;
    if (m == NULL || EVP_DigestInit_ex(m, EVP_md5(), NULL) != 1) {
        EVP_MD_CTX_free(m);
        return s3d_fail(S3D_ENOMEM, "MD5 init failed");
    }
    rc = s3d_delta_walk(io, off, len, md5_fn, m);
    if (rc == 0 && (EVP_DigestFinal_ex(m, d, &dn) != 1 || dn != 16))
        rc = s3d_fail(S3D_ENOMEM, "MD5 final failed");
    EVP_MD_CTX_free(m);
    if (rc == 0)
        for (unsigned int k = 0; k < 16; k++)
            snprintf(hex + 2 * k, 3, "%02x", d[k]);
    return rc;
}

/* 1 when base tensor bt can stand for t (with CRC crc). */
static int same_tensor(const struct s3d_st_tensor *bt, const struct s3d_tensor_src *t, uint32_t crc)
{
    if (!bt->has_crc32c || bt->crc32c != crc || bt->dtype != t->dtype || bt->ndim != t->ndim ||
        bt->end - bt->begin != t->nbytes)
        return 0;
    for (int32_t d = 0; d < t->ndim; d++)
        if (bt->shape[d] != t->shape[d])
            return 0;
    return 1;
}

size_t s3d_delta_match(const struct s3d_reader *base, const struct s3d_tensor_src *t, size_t n,
                       const uint32_t *crcs, int32_t *shard, uint64_t *offset)
{
    size_t matched = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        shard[i] = -1;
        offset[i] = 0;
        if (t[i].nbytes == 0 || s3d_reader_find(base, t[i].name, &k) != 0)
            continue;
        if (same_tensor(tref_tensor(base, k), &t[i], crcs[i])) {
            const struct shard *sh = &base->shards[base->tensors[k].shard];
            shard[i] = (int32_t)base->tensors[k].shard;
            offset[i] = sh->header_bytes + tref_tensor(base, k)->begin;
            matched++;
        }
    }
    return matched;
}
