/* ckpt_write.c - writing tensors as a safetensors checkpoint to S3 or local files.
 *
 * The header must come first in the object, but it holds each tensor's CRC32C, known only
 * once the bytes have passed. So the header is built first with placeholder CRCs (its length
 * is final: see format/safetensors.h), and:
 *   - S3, multipart: part 1 (header + first data bytes) is prepared first, its CRCs
 *     recorded, and its staging chunks given back (held for the whole save, they let as
 *     many concurrent saves as the pool has chunks wait forever for each other); parts
 *     2..N are produced in order and uploaded; when every CRC is known part 1 is built
 *     again (its device bytes copied a second time and checked against the first CRCs),
 *     the header is patched in place and part 1 goes last. CompleteMultipartUpload then
 *     makes the object appear; any failure aborts the upload, so the previous object stays.
 *   - S3, small objects: the same single part, uploaded with one PutObject.
 *   - Files: the data is written after the header's place in a temporary file, the patched
 *     header last, then fsync and rename (fileio.h).
 *
 * A part is an iovec over the sources: host tensors are sent from their own memory (no
 * copy); device tensors are copied into staging chunks from the client's pool (async
 * device-to-host on a stream that first waits for the caller's stream) and sent from there.
 * A part with device bytes is handed to the uploader only when its copy event completes;
 * its chunks go back to the pool when the server has accepted it. Held chunks never exceed
 * the pool, which bounds host memory.
 *
 *   object:  [hdr|t0 ......|t1 ...|t2 ........................]
 *   parts:   [ part 1 (last) ][ part 2      ][ part 3 ][ p4 ]
 *   part 2 = iov{ t1 bytes (host ptr), t2 bytes (chunk A, from the GPU) }
 *
 * CRCs: every piece of a tensor that passes through host memory gets its own CRC, recorded
 * in object order; they are combined per tensor (s3d_crc32c_combine) before the header is
 * patched. */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/dynbuf.h"
#include "common/error.h"
#include "common/log.h"
#include "common/opts.h"
#include "device/device.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_delta.h"
#include "engine/ckpt_reader.h"
#include "engine/ckpt_write.h"
#include "engine/ckpt_write_int.h"
#include "engine/client_impl.h"
#include "engine/delta_plan.h"
#include "engine/fileio.h"
#include "engine/part_size.h"
#include "engine/pool.h"
#include "engine/resources.h"
#include "engine/xfer.h"
#include "format/index.h"
#include "format/safetensors.h"
#include "s3/ops.h"
#include "s3direct/checkpoint.h"
#include "s3direct/transfer.h"

static int add_rec(struct shard_writer *w, size_t tensor, uint64_t len, uint32_t crc, size_t *idx)
{
    if (w->nrecs == w->cap_recs) {
        size_t cap = w->cap_recs ? w->cap_recs * 2 : 256;
        struct crcrec *r = s3d_reallocarray(w->recs, cap, sizeof(*r));
        if (r == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory for checksums");
        w->recs = r;
        w->cap_recs = cap;
    }
    w->recs[w->nrecs].tensor = tensor;
    w->recs[w->nrecs].len = len;
    w->recs[w->nrecs].crc = crc;
    if (idx != NULL)
        *idx = w->nrecs;
    w->nrecs++;
    return 0;
}

void s3d_cw_part_release(struct shard_writer *w, struct part *p)
{
    for (size_t i = 0; i < p->nchunks; i++)
        s3d_pool_put(w->pool, p->chunks[i]);
    if (p->ev != NULL)
        s3d_device_event_free(w->dev, p->ev);
    free(p->chunks);
    free(p->iov);
    free(p->icrc);
    free(p->icrc_known);
    free(p->pend);
    memset(p, 0, sizeof(*p));
}

static int iov_push(struct part *p, int *cap, const void *base, uint64_t len, uint32_t crc,
                    int known)
{
    if (p->iovcnt == *cap) {
        int ncap = *cap ? *cap * 2 : 8;
        struct iovec *v = s3d_reallocarray(p->iov, (size_t)ncap, sizeof(*v));
        uint32_t *c;
        unsigned char *k;
        if (v != NULL)
            p->iov = v;
        c = v == NULL ? NULL : s3d_reallocarray(p->icrc, (size_t)ncap, sizeof(*c));
        if (c != NULL)
            p->icrc = c;
        k = c == NULL ? NULL : s3d_reallocarray(p->icrc_known, (size_t)ncap, sizeof(*k));
        if (k == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory building a part");
        p->icrc_known = k;
        *cap = ncap;
    }
    p->iov[p->iovcnt].iov_base = (void *)base;
    p->iov[p->iovcnt].iov_len = (size_t)len;
    p->icrc[p->iovcnt] = crc;
    p->icrc_known[p->iovcnt] = (unsigned char)(known != 0);
    p->iovcnt++;
    return 0;
}

/* Chunks a part of len bytes may need at most (its device bytes packed into chunks). */
static size_t chunks_for(const struct shard_writer *w, uint64_t len)
{
    size_t cs = s3d_pool_chunk_size(w->pool);
    return (size_t)((len + cs - 1) / cs);
}

/* The device bytes among the next len bytes at the cursor (which does not move). */
static uint64_t device_bytes_at_cursor(const struct shard_writer *w, uint64_t len)
{
    size_t s = w->cur_src;
    uint64_t off = w->cur_off, left = len, dev_bytes = 0;
    while (left > 0) {
        const struct s3d_wsrc *sr = &w->srcs[s];
        uint64_t take = S3D_MIN(sr->len - off, left);
        if (sr->device >= 0)
            dev_bytes += take;
        left -= take;
        off += take;
        if (off == sr->len) {
            s++;
            off = 0;
        }
    }
    return dev_bytes;
}

/* Takes every staging chunk the device bytes of the next len bytes need, all at once, before
 * anything is consumed, so that a call that returns 1 (too few free, !blocking) takes none
 * and starts again from the same place. */
static int part_reserve(struct shard_writer *w, struct part *p, uint64_t len, int blocking)
{
    uint64_t dev_bytes = device_bytes_at_cursor(w, len);
    size_t need = 0;
    int rc;
    /* Pieces are packed back to back, but one never straddles the end of a chunk without
     * being split, so ceil(dev_bytes / chunk) chunks suffice. */
    if (dev_bytes > 0) {
        size_t cs = s3d_pool_chunk_size(w->pool);
        need = (size_t)((dev_bytes + cs - 1) / cs);
    }
    /* Never wait for more chunks than the pool holds: that wait would never end. */
    if (need > 0 && need > s3d_pool_chunk_count(w->pool))
        return s3d_fail(S3D_ETOOBIG, "a %llu-byte part needs %zu staging chunks, the pool has %zu",
                        (unsigned long long)len, need, s3d_pool_chunk_count(w->pool));
    if (p->nchunks >= need)
        return 0;
    /* All the missing chunks at once or none: a save holding some while it waits for the
     * rest deadlocks with another doing the same (concurrent saves on one client's pool). */
    {
        size_t more = need - p->nchunks;
        void **v = s3d_reallocarray(p->chunks, need, sizeof(*v));
        if (v == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory building a part");
        p->chunks = v;
        rc = s3d_pool_get_n(w->pool, more, p->chunks + p->nchunks, blocking, w->o->cancel);
        if (rc < 0)
            return s3d_fail(S3D_ECANCELED, "save canceled");
        if (rc == 1)
            return 1;
        p->nchunks = need;
    }
    return 0;
}

/* Adds take host bytes of sr at the cursor to p, referenced where they are, with their CRC:
 * one pass over the bytes gives the tensor's piece and the part's share. */
static int part_add_host(struct shard_writer *w, struct part *p, int *cap,
                         const struct s3d_wsrc *sr, uint64_t take)
{
    const char *src = sr->ptr + w->cur_off;
    int known = sr->tensor >= 0; /* the header is patched before part 1 goes */
    uint32_t crc = known ? s3d_crc32c(0, src, take) : 0;
    int rc = iov_push(p, cap, src, take, crc, known);
    if (rc < 0 || !known || !w->with_crc || w->crc_known || w->replay)
        return rc;
    return add_rec(w, (size_t)sr->tensor, take, crc, NULL);
}

/* A device piece (iov entry iov of p) whose CRC is computed from host once its copy is done
 * (part_ready), recorded for tensor when the save stores CRCs. */
static int part_pend_crc(struct shard_writer *w, struct part *p, size_t tensor, uint64_t piece,
                         const char *host, int iov)
{
    struct pending_crc *pc = s3d_reallocarray(p->pend, p->npend + 1, sizeof(*p->pend));
    int rc;
    if (pc == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory building a part");
    p->pend = pc;
    p->pend[p->npend].rec = SIZE_MAX;
    if (w->with_crc && !w->crc_known && !w->replay) {
        rc = add_rec(w, tensor, piece, 0, &p->pend[p->npend].rec);
        if (rc < 0)
            return rc;
    }
    p->pend[p->npend].iov = iov;
    p->pend[p->npend].host = host;
    p->npend++;
    return 0;
}

/* Builds the part covering the next `len` bytes at the cursor. Host bytes are referenced
 * where they are; device bytes are copied into chunks. Returns 0 when built (p->ev set if
 * copies are in flight), 1 when no chunk is free (nothing consumed: the chunks taken so far
 * are kept in p and the call is repeated later), <0 on error. */
int s3d_cw_part_build(struct shard_writer *w, struct part *p, uint64_t len, int blocking)
{
    size_t cs = w->pool ? s3d_pool_chunk_size(w->pool) : 0;
    uint64_t left;
    int cap = 0, rc, ordinal = -1;
    size_t chunk_i = 0;
    uint64_t chunk_off = 0;

    rc = part_reserve(w, p, len, blocking);
    if (rc != 0)
        return rc;

    p->length = len;
    left = len;
    while (left > 0) {
        const struct s3d_wsrc *sr = &w->srcs[w->cur_src];
        uint64_t take = S3D_MIN(sr->len - w->cur_off, left);
        if (sr->device < 0) {
            rc = part_add_host(w, p, &cap, sr, take);
            if (rc < 0)
                return rc;
        } else {
            uint64_t done = 0;
            while (done < take) {
                uint64_t piece = S3D_MIN(take - done, (uint64_t)cs - chunk_off);
                char *host;
                struct s3d_stream *st;
                /* part_reserve took ceil(device bytes at the cursor / cs) chunks. */
                S3D_ASSERT(p->chunks != NULL && chunk_i < p->nchunks);
                host = (char *)p->chunks[chunk_i] + chunk_off;
                rc = s3d_stream_set_get(&w->streams, sr->device, &st);
                if (rc < 0)
                    return rc;
                if (ordinal >= 0 && ordinal != sr->device) {
                    /* One event per part: copies from another device are waited for now. */
                    rc = s3d_device_stream_sync(w->dev, w->streams.stream[ordinal]);
                    if (rc < 0)
                        return rc;
                }
                ordinal = sr->device;
                rc = s3d_device_copy_dtoh(w->dev, st, host,
                                          (uint64_t)(uintptr_t)sr->ptr + w->cur_off + done, piece);
                if (rc < 0)
                    return rc;
                rc = iov_push(p, &cap, host, piece, 0, 0);
                if (rc < 0)
                    return rc;
                rc = part_pend_crc(w, p, (size_t)sr->tensor, piece, host, p->iovcnt - 1);
                if (rc < 0)
                    return rc;
                done += piece;
                chunk_off += piece;
                if (chunk_off == cs) {
                    chunk_i++;
                    chunk_off = 0;
                }
            }
        }
        left -= take;
        w->cur_off += take;
        if (w->cur_off == sr->len) {
            w->cur_src++;
            w->cur_off = 0;
        }
    }
    /* Skip empty sources so the cursor always rests on a source with bytes left. */
    while (w->cur_src < w->nsrcs && w->srcs[w->cur_src].len == 0)
        w->cur_src++;
    if (ordinal >= 0) {
        rc = s3d_device_event_new(w->dev, ordinal, &p->ev);
        if (rc < 0)
            return rc;
        p->ev_ordinal = ordinal;
        rc = s3d_device_event_record(w->dev, p->ev, w->streams.stream[ordinal]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* 1 when the part's copies are done (and its device CRCs computed), 0 while pending. */
int s3d_cw_part_ready(struct shard_writer *w, struct part *p, int blocking)
{
    int rc;
    if (p->ev != NULL) {
        rc =
            blocking ? s3d_device_event_sync(w->dev, p->ev) : s3d_device_event_query(w->dev, p->ev);
        if (rc < 0)
            return rc;
        if (!blocking && rc == 0)
            return 0;
        s3d_device_event_free(w->dev, p->ev);
        p->ev = NULL;
    }
    for (size_t i = 0; i < p->npend; i++) {
        int k = p->pend[i].iov;
        uint32_t crc = s3d_crc32c(0, p->pend[i].host, p->iov[k].iov_len);
        p->icrc[k] = crc;
        p->icrc_known[k] = 1;
        if (p->pend[i].rec != SIZE_MAX)
            w->recs[p->pend[i].rec].crc = crc;
    }
    p->npend = 0;
    return 1;
}

/* Combines the CRC records per tensor (they are in object order) and patches the header. */
static void finish_crcs(struct shard_writer *w, char *header, const size_t *crc_pos)
{
    uint64_t *seen;
    if (w->crc_known)
        return; /* computed, patched and sealed before the upload (delta_prepare) */
    seen = calloc(w->ntensors ? w->ntensors : 1, sizeof(*seen));
    for (size_t t = 0; t < w->ntensors; t++)
        w->crcs[t] = 0;
    for (size_t i = 0; i < w->nrecs; i++) {
        const struct crcrec *r = &w->recs[i];
        if (seen != NULL && seen[r->tensor] == 0)
            w->crcs[r->tensor] = r->crc;
        else
            w->crcs[r->tensor] = s3d_crc32c_combine(w->crcs[r->tensor], r->crc, r->len);
        if (seen != NULL)
            seen[r->tensor] += r->len;
    }
    free(seen);
    for (size_t t = 0; t < w->ntensors; t++)
        s3d_st_patch_crc(header, crc_pos[t], w->crcs[t]);
    s3d_st_seal(header); /* the header's own CRC, over the final bytes */
}

/* ---- multipart hooks --------------------------------------------------------------------- */

static uint64_t part_len(const struct shard_writer *w, uint32_t number)
{
    uint64_t start = (uint64_t)(number - 1) * w->part_size;
    return S3D_MIN(w->part_size, w->total - start);
}

/* Hands the built part p out to the engine as part number. */
int s3d_cw_part_hand_out(struct part *p, uint32_t number, struct s3d_put_part *out)
{
    uint32_t crc = 0;
    for (int i = 0; i < p->iovcnt; i++) {
        uint32_t c =
            p->icrc_known[i] ? p->icrc[i] : s3d_crc32c(0, p->iov[i].iov_base, p->iov[i].iov_len);
        crc = i == 0 ? c : s3d_crc32c_combine(crc, c, p->iov[i].iov_len);
    }
    out->part_number = number;
    out->iov = p->iov;
    out->iovcnt = p->iovcnt;
    out->length = p->length;
    out->user = p;
    out->has_crc32c = 1;
    out->crc32c = crc;
    return S3D_FEED_OK;
}

/* Part 1, built, copied and summed: keeps the CRC of each of its iov entries and gives its
 * chunks back to the pool until it is built again at the end (part1_rebuild). */
static int part1_park(struct shard_writer *w, struct part *p)
{
    w->part1_crc = s3d_calloc((size_t)(p->iovcnt ? p->iovcnt : 1), sizeof(*w->part1_crc));
    if (w->part1_crc == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory building part 1");
    for (int i = 0; i < p->iovcnt; i++)
        w->part1_crc[i] = p->icrc_known[i] ? p->icrc[i] : 0;
    w->part1_iovcnt = p->iovcnt;
    w->part1_held = 1;
    s3d_cw_part_release(w, p); /* its copies are done: part_ready said so */
    return 0;
}

/* Part 1 built again from the start of the object (the cursor is put back after): 0 when
 * built (copies queued), 1 when no chunk is free yet, < 0 on error. Its tensor CRCs are
 * recorded already, so the build records none. */
static int part1_rebuild(struct shard_writer *w, struct part *p)
{
    const size_t src = w->cur_src;
    const uint64_t off = w->cur_off;
    int rc;
    w->cur_src = 0;
    w->cur_off = 0;
    w->replay = 1;
    rc = s3d_cw_part_build(w, p, part_len(w, 1), 0);
    w->replay = 0;
    w->cur_src = src;
    w->cur_off = off;
    if (rc == 0) {
        p->number = 1;
        w->part1_rebuilt = 1;
    }
    return rc;
}

/* The rebuilt part 1 holds the bytes whose CRCs the header carries: a tensor changed on the
 * device while the save ran fails the save rather than upload bytes its CRC does not cover. */
static int part1_check(const struct shard_writer *w, const struct part *p)
{
    if (p->iovcnt != w->part1_iovcnt)
        return s3d_fail(S3D_EINVAL, "part 1 rebuilt with %d pieces, first built with %d", p->iovcnt,
                        w->part1_iovcnt);
    for (int i = 0; i < p->iovcnt; i++)
        if (p->icrc_known[i] && p->icrc[i] != w->part1_crc[i])
            return s3d_fail(S3D_ECHANGED,
                            "the first %llu bytes of the object changed while the save ran (a "
                            "tensor written during the save)",
                            (unsigned long long)p->length);
    return 0;
}

static int mp_next(void *ctx, struct s3d_put_part *out)
{
    struct mp_ctx *m = ctx;
    struct shard_writer *w = m->w;
    int rc;

    for (;;) {
        if (w->pending != NULL) {
            struct part *p = w->pending;
            rc = s3d_cw_part_ready(w, p, 0);
            if (rc <= 0)
                return rc < 0 ? rc : S3D_FEED_NOT_YET;
            w->pending = NULL;
            if (p->number == 1 && !w->part1_held) {
                /* Goes last, once the header is patched. Its chunks go back now: held for the
                 * whole save, as many concurrent saves as the pool has chunks' worth of part
                 * 1s waited forever for each other's. */
                if ((rc = part1_park(w, p)) < 0)
                    return rc;
                continue;
            }
            if (p->number == 1)
                continue; /* built again and copied: sent below */
            return s3d_cw_part_hand_out(p, p->number, out);
        }
        if (w->next_number <= w->nparts) {
            struct part *p = &w->parts[w->next_number - 1];
            p->number = w->next_number;
            rc = s3d_cw_part_build(w, p, part_len(w, p->number), 0);
            if (rc != 0)
                return rc; /* S3D_FEED_NOT_YET: no chunk free yet (kept in p, retried) */
            w->next_number++;
            w->pending = p;
            continue;
        }
        if (w->part1_held && !w->part1_rebuilt) {
            struct part *p = &w->parts[0];
            if ((rc = part1_rebuild(w, p)) != 0)
                return rc == 1 ? S3D_FEED_NOT_YET : rc;
            w->pending = p;
            continue;
        }
        if (w->part1_held && !w->part1_sent) {
            struct part *p = &w->parts[0];
            if ((rc = part1_check(w, p)) < 0)
                return rc;
            if (w->with_crc)
                finish_crcs(w, m->header, m->crc_pos);
            w->part1_sent = 1;
            return s3d_cw_part_hand_out(p, 1, out);
        }
        return S3D_FEED_DONE;
    }
}

int s3d_cw_mp_release(void *ctx, const struct s3d_put_part *part)
{
    struct mp_ctx *m = ctx;
    s3d_cw_part_release(m->w, part->user);
    return 0;
}

/* ---- one shard --------------------------------------------------------------------------- */

static int write_shard_s3(struct shard_writer *w, const struct s3d_loc *loc, char *header,
                          const size_t *crc_pos)
{
    struct s3d_put_options po;
    int rc;

    memset(&po, 0, sizeof(po));
    po.content_type = "application/octet-stream";
    po.total_hint = w->total;
    po.progress = w->o->progress;
    po.progress_user = w->o->progress_user;
    po.cancel = w->o->cancel;

    w->part_size = s3d_upload_part_size(w->c->part_size, w->total);
    w->nparts = (uint32_t)((w->total + w->part_size - 1) / w->part_size);
    if (w->nparts == 0)
        w->nparts = 1;
    if (w->pool != NULL && 2 * chunks_for(w, w->part_size) + 1 > s3d_pool_chunk_count(w->pool))
        return s3d_fail(S3D_ETOOBIG,
                        "%s: %llu-byte parts need more staging than the %zu-chunk "
                        "pool has: raise staging_bytes",
                        loc->path, (unsigned long long)w->part_size, s3d_pool_chunk_count(w->pool));

    if (w->base->r != NULL && w->with_crc) {
        rc = s3d_cw_delta_prepare(w, loc, header, crc_pos, w->t);
        if (rc < 0)
            return rc;
        if (w->plan != NULL)
            return s3d_cw_write_s3_planned(w, loc, &po);
    }
    S3D_DELTA_ADD(&w->base->bytes_sent, w->total);

    /* One PutObject holds the whole object's device bytes in staging chunks at once: only
     * when they fit in the pool (2 * chunks of a part + 1 fit, checked above), else the
     * object goes as a multipart upload whatever multipart_threshold says (an object below
     * the threshold used to wait forever for more chunks than the pool has). */
    if ((w->total < w->c->multipart_threshold &&
         (w->pool == NULL || chunks_for(w, w->total) <= s3d_pool_chunk_count(w->pool))) ||
        w->nparts == 1) {
        /* One PutObject: build the whole object as part 1, wait for its copies. */
        struct part p;
        memset(&p, 0, sizeof(p));
        p.number = 1;
        rc = s3d_cw_part_build(w, &p, w->total, 1);
        if (rc == 0)
            rc = s3d_cw_part_ready(w, &p, 1);
        if (rc >= 0) {
            if (w->with_crc)
                finish_crcs(w, header, crc_pos);
            rc = s3d_xfer_put_single(w->c, loc->bucket, loc->key, p.iov, p.iovcnt, &po);
            if (rc == 0 && w->o->progress)
                w->o->progress(w->o->progress_user, w->total, w->total);
        }
        /* A part that failed midway still has copies queued into its chunks: wait for them
         * before the chunks go back to the pool, where another transfer may take them. The
         * first error stands. */
        if (rc < 0)
            s3d_ignore_rc(s3d_stream_set_sync(&w->streams));
        s3d_cw_part_release(w, &p);
        return rc;
    }

    {
        struct mp_ctx m = {.w = w, .header = header, .crc_pos = crc_pos};
        struct s3d_put_hooks hooks = {.next = mp_next, .release = s3d_cw_mp_release, .ctx = &m};
        w->parts = s3d_calloc(w->nparts, sizeof(*w->parts));
        if (w->parts == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory for %u parts", w->nparts);
        w->next_number = 1;
        rc = s3d_xfer_put_multipart(w->c, loc->bucket, loc->key, &hooks, &po);
        /* Parts the engine never released (failure): wait for their copies, free them. The
         * upload's rc stands: after a success every copy was already waited for. */
        s3d_ignore_rc(s3d_stream_set_sync(&w->streams));
        for (uint32_t i = 0; i < w->nparts; i++)
            s3d_cw_part_release(w, &w->parts[i]);
        free(w->parts);
        w->parts = NULL;
        free(w->part1_crc);
        w->part1_crc = NULL;
    }
    return rc;
}

static int write_shard_file(struct shard_writer *w, const struct s3d_loc *loc, char *header,
                            uint64_t header_len, const size_t *crc_pos)
{
    struct s3d_file_io_opts fo;
    struct s3d_file_writer *fw = NULL;
    struct s3d_file_seg *segs = NULL;
    int rc;

    memset(&fo, 0, sizeof(fo));
    fo.mode = w->o->file_io;
    fo.progress = w->o->progress;
    fo.progress_user = w->o->progress_user;
    fo.cancel = w->o->cancel;
    fo.progress_total = w->total - header_len;
    fo.cuda_stream = w->o->cuda_stream;
    fo.cuda_streams = w->o->cuda_streams;
    fo.n_cuda_streams = w->o->n_cuda_streams;
    fo.cuda_events = w->o->cuda_events;
    fo.n_cuda_events = w->o->n_cuda_events;
    fo.counts = &w->base->io;
    if (w->base->r != NULL && w->with_crc) {
        rc = s3d_cw_delta_prepare(w, loc, header, crc_pos, w->t);
        if (rc < 0)
            return rc;
    }
    segs = s3d_calloc(w->ntensors, sizeof(*segs));
    if (segs == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory writing %s", loc->path);
    for (size_t t = 0; t < w->ntensors; t++) {
        segs[t].src = w->srcs[t + 1].ptr;
        segs[t].length = w->srcs[t + 1].len;
        segs[t].device = w->srcs[t + 1].device;
    }
    rc = s3d_file_writer_open(w->dev, w->pool, loc->path, &fo, &fw);
    if (rc < 0)
        goto out;
    if (w->plan != NULL) {
        rc = s3d_cw_write_file_planned(w, fw, loc);
    } else {
        rc = s3d_file_writer_write(fw, header_len, segs, w->ntensors,
                                   w->with_crc && !w->crc_known ? w->crcs : NULL);
        if (rc == 0)
            S3D_DELTA_ADD(&w->base->bytes_sent, w->total);
    }
    if (rc < 0)
        goto out;
    if (w->with_crc && !w->crc_known) {
        for (size_t t = 0; t < w->ntensors; t++)
            s3d_st_patch_crc(header, crc_pos[t], w->crcs[t]);
        s3d_st_seal(header); /* the header's own CRC, over the final bytes */
    }
    rc = s3d_file_writer_pwrite(fw, 0, header, (size_t)header_len);
    if (rc < 0)
        goto out;
    rc = s3d_file_writer_commit(fw);
out:
    s3d_file_writer_free(fw);
    free(segs);
    return rc;
}

/* Writes tensors t[0..n) with the metadata as one safetensors object or file at uri;
 * generation (NULL for a lone object) is the id of the sharded save this shard belongs to. */
/* The object's byte sources: the header (hdr), then each tensor in order; their start
 * offsets (*start, malloc'ed, n + 1 entries) and the total. */
static int cw_sources(struct shard_writer *w, const struct s3d_tensor_src *t, size_t n,
                      const struct s3d_dynbuf *hdr, uint64_t **start, const char *uri)
{
    w->srcs[0].ptr = hdr->data;
    w->srcs[0].len = hdr->len;
    w->srcs[0].device = -1;
    w->srcs[0].tensor = -1;
    w->total = hdr->len;
    for (size_t i = 0; i < n; i++) {
        w->srcs[i + 1].ptr = t[i].ptr;
        w->srcs[i + 1].len = t[i].nbytes;
        w->srcs[i + 1].device = t[i].device < 0 ? -1 : t[i].device;
        w->srcs[i + 1].tensor = (long)i;
        w->total += t[i].nbytes;
    }
    w->nsrcs = n + 1;
    w->t = t;
    w->io.start = *start = s3d_calloc(n + 1, sizeof(**start));
    if (*start == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory writing %s", uri);
    for (size_t i = 1; i < w->nsrcs; i++)
        (*start)[i] = (*start)[i - 1] + w->srcs[i - 1].len;
    w->io.srcs = w->srcs;
    w->io.nsrcs = w->nsrcs;
    return 0;
}

int s3d_ckpt_write_one(struct s3d_client *c, struct s3d_device *dev, struct s3d_pool *pool,
                       const char *uri, const struct s3d_tensor_src *t, size_t n,
                       const struct s3d_metadata_entry *meta, size_t n_meta, const char *generation,
                       struct s3d_ckpt_base *base, const struct s3d_write_options *o)
{
    struct shard_writer w;
    struct s3d_dynbuf hdr;
    struct s3d_loc loc;
    struct s3d_tensor_src *ordered = NULL;
    size_t *crc_pos = NULL;
    uint64_t *start = NULL;
    int rc;

    memset(&w, 0, sizeof(w));
    s3d_dynbuf_init(&hdr, 8 + S3D_ST_MAX_HEADER);
    rc = s3d_loc_parse(uri, &loc);
    if (rc < 0)
        return rc;
    w.c = c;
    w.dev = dev;
    /* The caller's kernels that produce the tensors may still be running. */
    s3d_stream_set_init(&w.streams, dev);
    s3d_stream_set_wait_caller(&w.streams, o->cuda_stream, o->cuda_streams, o->n_cuda_streams);
    s3d_stream_set_wait_events(&w.streams, o->cuda_events, o->n_cuda_events);
    w.pool = pool;
    w.o = o;
    w.with_crc = !o->no_checksum;
    w.ntensors = n;
    crc_pos = s3d_calloc(n, sizeof(*crc_pos));
    w.crcs = s3d_calloc(n, sizeof(*w.crcs));
    if (base->r != NULL) {
        w.copy_source = s3d_calloc(s3d_reader_num_shards(base->r), sizeof(*w.copy_source));
        if (w.copy_source == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "out of memory writing %s", uri);
            goto out;
        }
    }
    w.srcs = s3d_calloc(n + 1, sizeof(*w.srcs));
    if (crc_pos == NULL || w.crcs == NULL || w.srcs == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory writing %s", uri);
        goto out;
    }
    w.base = base;
    w.io.dev = dev;
    w.io.pool = pool;
    w.io.streams = &w.streams;
    w.io.cancel = o->cancel;
    if (base->r != NULL && w.with_crc && n > 0) {
        /* Unchanged tensors last, in the base's order (s3d_cw_delta_order). */
        rc = s3d_cw_delta_order(&w, t, n, &ordered);
        if (rc < 0)
            goto out;
        t = ordered;
    }
    rc = s3d_st_build_gen(t, n, meta, n_meta, w.with_crc, generation, &hdr, NULL, crc_pos);
    if (rc < 0) {
        s3d_fail_prefix(rc, "%s", uri);
        goto out;
    }
    rc = cw_sources(&w, t, n, &hdr, &start, uri);
    if (rc < 0)
        goto out;
    if (loc.is_s3)
        rc = write_shard_s3(&w, &loc, hdr.data, crc_pos);
    else
        rc = write_shard_file(&w, &loc, hdr.data, hdr.len, crc_pos);
    if (rc == 0) {
        S3D_DELTA_ADD(&base->bytes_total, w.total);
        S3D_DELTA_ADD(&base->tensors_total, (uint64_t)n);
    }
out:
    s3d_stream_set_free(&w.streams);
    if (w.copy_source != NULL)
        for (size_t i = 0; i < s3d_reader_num_shards(base->r); i++)
            free(w.copy_source[i]);
    free(w.copy_source);
    free(w.plan);
    free(w.plan_crc);
    free(start);
    free(ordered);
    free(w.recs);
    free(w.crcs);
    free(w.srcs);
    free(crc_pos);
    s3d_dynbuf_free(&hdr);
    return rc;
}

/* Writes a small host buffer (the index) atomically. */
int s3d_ckpt_write_small(struct s3d_client *c, struct s3d_device *dev, const char *uri,
                         const char *data, size_t len, const struct s3d_write_options *o)
{
    struct s3d_loc loc;
    int rc = s3d_loc_parse(uri, &loc);
    if (rc < 0)
        return rc;
    if (loc.is_s3) {
        struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
        struct s3d_put_options po;
        memset(&po, 0, sizeof(po));
        po.content_type = "application/json";
        po.cancel = o->cancel;
        return s3d_xfer_put_single(c, loc.bucket, loc.key, &iov, 1, &po);
    } else {
        struct s3d_file_writer *fw = NULL;
        struct s3d_file_io_opts fo;
        memset(&fo, 0, sizeof(fo));
        fo.mode = S3D_FILE_IO_BUFFERED;
        fo.cancel = o->cancel;
        rc = s3d_file_writer_open(dev, NULL, loc.path, &fo, &fw);
        if (rc == 0)
            rc = s3d_file_writer_pwrite(fw, 0, data, len);
        if (rc == 0)
            rc = s3d_file_writer_commit(fw);
        s3d_file_writer_free(fw);
        return rc;
    }
}
