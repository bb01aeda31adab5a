/* ckpt_write_delta.c - incremental saves (s3d_write_options.base): the parts of an object
 * planned against its base (delta_plan.h), uploaded as sent parts and server-side copies,
 * or written to a file with copies from the base file. The writer itself is ckpt_write.c's
 * (ckpt_write_int.h); what is known of the base is ckpt_delta.c's. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/dynbuf.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/ckpt_reader.h"
#include "engine/ckpt_write_int.h"
#include "engine/fileio.h"
#include "format/safetensors.h"
#include "s3/limits.h"
#include "s3/ops.h"

/* ---- incremental (planned) uploads ------------------------------------------------------
 * The parts follow w->plan: a sent part is built at its offset as any other (its CRCs are
 * known already); a copied part is handed out as UploadPartCopy of the base range, and kept
 * only when its answer proves the bytes: the server's ChecksumCRC32C against the CRC the
 * client computes for the range, else its ETag against the MD5 of the bytes the client holds
 * (S3 and Ceph RGW give a copied part the MD5 of its bytes as ETag). Ceph RGW 16 ignores
 * x-amz-copy-source-if-match, so the guard alone would let a base replaced after it was
 * opened slip other bytes in. A part that is not proved, or whose copy is refused, is sent:
 * UploadPart under the same number replaces what the copy stored. */

/* Moves the producer cursor to object offset off. */
static void cursor_seek(struct shard_writer *w, uint64_t off)
{
    size_t i = 0;
    while (i + 1 < w->nsrcs && w->io.start[i + 1] <= off)
        i++;
    w->cur_src = i;
    w->cur_off = off - w->io.start[i];
    while (w->cur_src < w->nsrcs && w->cur_off == w->srcs[w->cur_src].len &&
           w->cur_src + 1 < w->nsrcs) {
        w->cur_src++;
        w->cur_off = 0;
    }
}

static int copy_source_of(struct shard_writer *w, int32_t shard, const char **out)
{
    struct s3d_reader *r = w->base->r;
    struct s3d_dynbuf b;
    const char *uri;
    struct s3d_loc loc;
    uint64_t hb, ob;
    int rc;
    if (w->copy_source[shard] != NULL) {
        *out = w->copy_source[shard];
        return 0;
    }
    rc = s3d_reader_shard(r, (size_t)shard, &uri, &hb, &ob);
    if (rc == 0)
        rc = s3d_loc_parse(uri, &loc);
    if (rc < 0)
        return rc;
    s3d_dynbuf_init(&b, 8192);
    rc = s3d_op_copy_source(&b, loc.bucket, loc.key);
    if (rc < 0) {
        s3d_dynbuf_free(&b);
        return rc;
    }
    w->copy_source[shard] = b.data; /* owned from here (freed with the writer) */
    *out = b.data;
    return 0;
}

static int mpd_next(void *ctx, struct s3d_put_part *out)
{
    struct mp_ctx *m = ctx;
    struct shard_writer *w = m->w;
    int rc;

    for (;;) {
        size_t idx;
        const struct s3d_dpart *dp;
        struct part *p;
        if (w->pending != NULL) {
            p = w->pending;
            rc = s3d_cw_part_ready(w, p, 0);
            if (rc <= 0)
                return rc < 0 ? rc : S3D_FEED_NOT_YET;
            w->pending = NULL;
            S3D_DELTA_ADD(&w->base->bytes_sent, p->length);
            return s3d_cw_part_hand_out(p, p->number, out);
        }
        if (w->n_resend > 0) {
            idx = w->resend[0];
        } else if (w->next_plan < w->nplan) {
            idx = w->next_plan;
        } else {
            return S3D_FEED_DONE;
        }
        dp = &w->plan[idx];
        if (dp->src >= 0 && w->n_resend == 0) {
            const char *source;
            rc = copy_source_of(w, dp->src, &source);
            if (rc < 0)
                return rc;
            memset(out, 0, sizeof(*out));
            out->part_number = (uint32_t)idx + 1;
            out->length = dp->len;
            out->copy_source = source;
            out->copy_offset = dp->src_off;
            out->copy_if_match = w->base->r->shards[dp->src].etag;
            out->copy_crc = w->plan_crc[idx];
            out->user = (void *)dp;
            w->next_plan++;
            return S3D_FEED_OK;
        }
        p = &w->parts[idx];
        if (p->number == 0)
            p->number = (uint32_t)idx + 1;
        cursor_seek(w, dp->off);
        rc = s3d_cw_part_build(w, p, dp->len, 0);
        if (rc != 0)
            return rc; /* S3D_FEED_NOT_YET: no chunk free yet (kept in p, retried) */
        if (w->n_resend > 0)
            memmove(w->resend, w->resend + 1, --w->n_resend * sizeof(*w->resend));
        else
            w->next_plan++;
        w->pending = p;
    }
}

/* Is etag (quotes optional) the lowercase or uppercase hex MD5 hex? */
static int etag_is_md5(const char *etag, const char *hex)
{
    size_t n = strlen(etag);
    if (n == 34 && etag[0] == '"' && etag[33] == '"') {
        etag++;
        n = 32;
    }
    if (n != 32)
        return 0;
    for (size_t i = 0; i < 32; i++) {
        char a = etag[i], b = hex[i];
        if (a >= 'A' && a <= 'F')
            a = (char)(a - 'A' + 'a');
        if (a != b)
            return 0;
    }
    return 1;
}

/* ---- MD5s ahead ---------------------------------------------------------------------------
 * Proving a copied part by its MD5 ETag costs an MD5 of its bytes (about 0.7 GB/s a core
 * here): done on the event loop's thread it stalls every transfer of the save. So a thread of
 * its own computes the MD5 of each copied part in plan order from the start of the upload,
 * while the server copies; the check waits for the part's digest. Parts with bytes on a
 * device are left to the check (their staging copies belong to the writer's thread). The
 * thread stops as soon as the server answers a copy with its own CRC-32C (S3 with the
 * upload's checksum algorithm set), which makes MD5s needless. */
struct s3d_md5_ahead {
    struct shard_writer *w;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;           /* under mu */
    char (*hex)[33];    /* per plan part, valid when state is 1 */
    signed char *state; /* per plan part, under mu: 0 not yet, 1 done, -1 not done here */
};

static int on_host(const struct s3d_delta_io *io, uint64_t off, uint64_t len)
{
    for (size_t i = 0; i < io->nsrcs; i++) {
        uint64_t a = io->start[i], b = a + io->srcs[i].len;
        if (b > off && a < off + len && io->srcs[i].device >= 0)
            return 0;
    }
    return 1;
}

static void *ahead_main(void *arg)
{
    struct s3d_md5_ahead *a = arg;
    struct shard_writer *w = a->w;
    for (size_t k = 0; k < w->nplan; k++) {
        const struct s3d_dpart *dp = &w->plan[k];
        char hex[33];
        int ok, stop;
        if (dp->src < 0)
            continue;
        pthread_mutex_lock(&a->mu);
        stop = a->stop;
        pthread_mutex_unlock(&a->mu);
        ok = !stop && on_host(&w->io, dp->off, dp->len) &&
             s3d_delta_range_md5(&w->io, dp->off, dp->len, hex) == 0;
        pthread_mutex_lock(&a->mu);
        if (ok)
            memcpy(a->hex[k], hex, sizeof(hex));
        a->state[k] = ok ? 1 : -1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
    }
    pthread_mutex_lock(&a->mu);
    for (size_t k = 0; k < w->nplan; k++)
        if (a->state[k] == 0)
            a->state[k] = -1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Starts the thread; NULL (MD5s computed by the check) when it cannot start. */
static struct s3d_md5_ahead *ahead_start(struct shard_writer *w)
{
    struct s3d_md5_ahead *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->w = w;
    a->hex = calloc(w->nplan, sizeof(*a->hex));
    a->state = calloc(w->nplan, sizeof(*a->state));
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (a->hex == NULL || a->state == NULL || pthread_create(&a->th, NULL, ahead_main, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->hex);
        free(a->state);
        free(a);
        return NULL;
    }
    return a;
}

static void ahead_stop(struct s3d_md5_ahead *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_mutex_unlock(&a->mu);
}

static void ahead_free(struct s3d_md5_ahead *a)
{
    if (a == NULL)
        return;
    ahead_stop(a);
    pthread_join(a->th, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->hex);
    free(a->state);
    free(a);
}

/* The MD5 of plan part k as hex: the thread's, or computed here. */
static int md5_of(struct shard_writer *w, size_t k, char hex[33])
{
    struct s3d_md5_ahead *a = w->ahead;
    if (a != NULL) {
        int state;
        pthread_mutex_lock(&a->mu);
        while (a->state[k] == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        state = a->state[k];
        if (state == 1)
            memcpy(hex, a->hex[k], 33);
        pthread_mutex_unlock(&a->mu);
        if (state == 1)
            return 0;
    }
    return s3d_delta_range_md5(&w->io, w->plan[k].off, w->plan[k].len, hex);
}

static int mpd_check(void *ctx, const struct s3d_put_part *part, const char *etag,
                     const char *crc32c, const char *why)
{
    struct mp_ctx *m = ctx;
    struct shard_writer *w = m->w;
    const struct s3d_dpart *dp = part->user;
    size_t idx = (size_t)(dp - w->plan);
    const char *verdict = NULL;
    char hex[33];
    int rc;

    if (etag == NULL) {
        verdict = why;
    } else if (crc32c != NULL && crc32c[0] != '\0') {
        char want[S3D_CRC32C_B64_LEN];
        ahead_stop(w->ahead); /* the server's checksums prove the copies */
        s3d_crc32c_base64(part->copy_crc, want);
        if (strcmp(want, crc32c) != 0)
            verdict = "its CRC-32C differs from the bytes saved";
    } else {
        rc = md5_of(w, idx, hex);
        if (rc < 0)
            return rc;
        if (!etag_is_md5(etag, hex))
            verdict = "its ETag is not the MD5 of the bytes saved";
    }
    if (verdict == NULL) {
        S3D_DELTA_ADD(&w->base->bytes_copied, dp->len);
        S3D_DELTA_ADD(&w->base->parts_copied, 1u);
        return 0;
    }
    S3D_INFO("s3://%s: part %u copied from the base is sent instead: %s", m->key, part->part_number,
             verdict);
    S3D_DELTA_ADD(&w->base->copies_refused, 1u);
    w->resend[w->n_resend++] = idx;
    return 1;
}

/* Largest copied part: copies of one base run go up as several requests at once. */
#define DELTA_MAX_COPY (256ull << 20)
/* Local files: ranges shorter than this are written, not copied (a system call each). */
#define DELTA_FILE_MIN_COPY (64ull << 10)

struct order_key {
    int32_t shard; /* -1: changed */
    uint64_t offset;
    size_t i;
};

static int order_cmp(const void *a, const void *b)
{
    const struct order_key *x = a, *y = b;
    if ((x->shard < 0) != (y->shard < 0))
        return x->shard < 0 ? -1 : 1;
    if (x->shard >= 0 && x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    if (x->shard >= 0 && x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

int s3d_cw_delta_order(struct shard_writer *w, const struct s3d_tensor_src *t, size_t n,
                       struct s3d_tensor_src **out)
{
    struct s3d_wsrc *srcs = s3d_calloc(n, sizeof(*srcs));
    uint64_t *start = s3d_calloc(n, sizeof(*start)), *offset = s3d_calloc(n, sizeof(*offset));
    uint32_t *crcs = s3d_calloc(n, sizeof(*crcs));
    int32_t *shard = s3d_calloc(n, sizeof(*shard));
    struct order_key *keys = s3d_calloc(n, sizeof(*keys));
    struct s3d_tensor_src *pt = s3d_calloc(n, sizeof(*pt));
    struct s3d_delta_io io = w->io;
    int rc = 0;

    *out = NULL;
    if (srcs == NULL || start == NULL || offset == NULL || crcs == NULL || shard == NULL ||
        keys == NULL || pt == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory planning a save");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        srcs[i].ptr = t[i].ptr;
        srcs[i].len = t[i].nbytes;
        srcs[i].device = t[i].device < 0 ? -1 : t[i].device;
        srcs[i].tensor = (long)i;
        start[i] = i == 0 ? 0 : start[i - 1] + srcs[i - 1].len;
    }
    io.srcs = srcs;
    io.nsrcs = n;
    io.start = start;
    rc = s3d_delta_tensor_crcs(&io, crcs);
    if (rc < 0)
        goto out;
    s3d_delta_match(w->base->r, t, n, crcs, shard, offset);
    for (size_t i = 0; i < n; i++) {
        keys[i].shard = shard[i];
        keys[i].offset = offset[i];
        keys[i].i = i;
    }
    qsort(keys, n, sizeof(*keys), order_cmp);
    for (size_t j = 0; j < n; j++) {
        pt[j] = t[keys[j].i];
        w->crcs[j] = crcs[keys[j].i];
    }
    w->crc_known = 1;
    *out = pt;
    pt = NULL;
out:
    free(srcs);
    free(start);
    free(offset);
    free(crcs);
    free(shard);
    free(keys);
    free(pt);
    return rc;
}

/* With a base: every tensor's CRC first (one pass over host bytes, or through staging
 * chunks), then the tensors the base holds unchanged, then the plan (delta_plan.h). Leaves
 * w->plan NULL when nothing can be copied (a full save, with the CRCs already known). The
 * header is patched and sealed here: its CRCs no longer wait for the upload. */
int s3d_cw_delta_prepare(struct shard_writer *w, const struct s3d_loc *loc, char *header,
                         const size_t *crc_pos, const struct s3d_tensor_src *t)
{
    struct s3d_dplan_limits lim;
    struct s3d_dseg *segs = NULL;
    int32_t *shard = NULL;
    uint64_t *offset = NULL;
    size_t matched, ncopy = 0;
    int rc = 0;

    if (!w->crc_known) {
        rc = s3d_delta_tensor_crcs(&w->io, w->crcs);
        if (rc < 0)
            return rc;
        w->crc_known = 1;
    }
    for (size_t i = 0; i < w->ntensors; i++)
        s3d_st_patch_crc(header, crc_pos[i], w->crcs[i]);
    s3d_st_seal(header);
    shard = s3d_calloc(w->ntensors + 1, sizeof(*shard));
    offset = s3d_calloc(w->ntensors + 1, sizeof(*offset));
    segs = s3d_calloc(w->nsrcs, sizeof(*segs));
    if (shard == NULL || offset == NULL || segs == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory planning %s", loc->path);
        goto out;
    }
    matched = s3d_delta_match(w->base->r, t, w->ntensors, w->crcs, shard, offset);
    if (matched == 0) {
        S3D_INFO("%s: no tensor is unchanged in the base: a full save", loc->path);
        goto out;
    }
    segs[0].len = w->srcs[0].len;
    segs[0].src = -1;
    for (size_t i = 0; i < w->ntensors; i++) {
        segs[i + 1].len = w->srcs[i + 1].len;
        segs[i + 1].src = shard[i];
        segs[i + 1].src_off = offset[i];
    }
    memset(&lim, 0, sizeof(lim));
    if (loc->is_s3) {
        lim.part_size = w->part_size;
        lim.min_part = S3D_MIN_PART_SIZE;
        lim.min_copy = S3D_MIN_PART_SIZE;
        lim.max_copy = DELTA_MAX_COPY;
        lim.max_parts = S3D_MAX_PARTS;
    } else {
        lim.part_size = lim.max_copy = UINT64_C(1) << 62;
        lim.min_copy = DELTA_FILE_MIN_COPY;
        lim.max_parts = UINT32_MAX;
    }
    rc = s3d_delta_plan(segs, w->nsrcs, &lim, &w->plan, &w->nplan);
    if (rc == S3D_ETOOBIG) {
        S3D_INFO("%s: copies from the base would need too many parts: a full save", loc->path);
        rc = 0;
        goto out;
    }
    if (rc < 0)
        goto out;
    w->plan_crc = s3d_calloc(w->nplan, sizeof(*w->plan_crc));
    if (w->plan_crc == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory planning %s", loc->path);
        goto out;
    }
    for (size_t k = 0; k < w->nplan && rc == 0; k++) {
        if (w->plan[k].src < 0)
            continue;
        ncopy++;
        rc = s3d_delta_range_crc(&w->io, w->crcs, w->plan[k].off, w->plan[k].len, &w->plan_crc[k]);
    }
    if (rc == 0 && ncopy == 0)
        S3D_INFO("%s: the %zu unchanged tensors are too small or too scattered to copy (parts "
                 "of at least 5 MiB): a full save",
                 loc->path, matched);
    S3D_DELTA_ADD(&w->base->tensors_reused, (uint64_t)matched);
    if (rc == 0 && ncopy > 0)
        __atomic_store_n(&w->base->base_used, 1, __ATOMIC_RELAXED); /* shards on threads */
out:
    if (rc < 0 || ncopy == 0) {
        free(w->plan);
        free(w->plan_crc);
        w->plan = NULL;
        w->plan_crc = NULL;
        w->nplan = 0;
    }
    free(segs);
    free(shard);
    free(offset);
    return rc;
}

int s3d_cw_write_s3_planned(struct shard_writer *w, const struct s3d_loc *loc,
                            const struct s3d_put_options *po)
{
    struct mp_ctx m = {.w = w, .key = loc->path + 5};
    struct s3d_put_hooks hooks = {
        .next = mpd_next, .release = s3d_cw_mp_release, .check_copy = mpd_check, .ctx = &m};
    int rc;
    w->parts = s3d_calloc(w->nplan, sizeof(*w->parts));
    w->resend = s3d_calloc(w->nplan, sizeof(*w->resend));
    if (w->parts == NULL || w->resend == NULL) {
        free(w->resend);
        free(w->parts);
        w->parts = NULL;
        return s3d_fail(S3D_ENOMEM, "out of memory for %zu parts", w->nplan);
    }
    w->ahead = ahead_start(w);
    rc = s3d_xfer_put_multipart(w->c, loc->bucket, loc->key, &hooks, po);
    ahead_free(w->ahead);
    w->ahead = NULL;
    s3d_ignore_rc(s3d_stream_set_sync(&w->streams));
    for (size_t i = 0; i < w->nplan; i++)
        s3d_cw_part_release(w, &w->parts[i]);
    free(w->parts);
    free(w->resend);
    w->parts = NULL;
    w->resend = NULL;
    return rc;
}

/* A planned write to a file: sent ranges written from memory, copied ones copied from the
 * base file (the descriptor its reader opened, so the version whose header was read) and
 * read back; a copy whose bytes are not the ones saved is written from memory instead. The
 * header goes last, as in a full write. */
int s3d_cw_write_file_planned(struct shard_writer *w, struct s3d_file_writer *fw,
                              const struct s3d_loc *loc)
{
    struct s3d_file_seg *segs = s3d_calloc(w->nsrcs, sizeof(*segs));
    int rc = 0;
    if (segs == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory writing %s", loc->path);
    S3D_DELTA_ADD(&w->base->bytes_sent, w->srcs[0].len); /* the header */
    for (size_t k = 0; k < w->nplan && rc == 0; k++) {
        uint64_t bytes = 0;
        const struct s3d_dpart *dp = &w->plan[k];
        size_t first = 0, cnt = 0;
        if (dp->src >= 0) {
            uint32_t crc = 0;
            rc = s3d_file_writer_copy(fw, dp->off, w->base->r->shards[dp->src].fd, dp->src_off,
                                      dp->len, &crc);
            if (rc < 0)
                break;
            if (crc == w->plan_crc[k]) {
                S3D_DELTA_ADD(&w->base->bytes_copied, dp->len);
                S3D_DELTA_ADD(&w->base->parts_copied, 1u);
                continue;
            }
            S3D_INFO("%s: bytes copied from the base at %llu are not the ones saved (the base "
                     "changed): written instead",
                     loc->path, (unsigned long long)dp->off);
            S3D_DELTA_ADD(&w->base->copies_refused, 1u);
        }
        /* Planned with no size rule, a range is whole sources: the header (written last) and
         * tensors. */
        for (size_t i = 1; i < w->nsrcs; i++) {
            if (w->io.start[i] < dp->off || w->io.start[i] + w->srcs[i].len > dp->off + dp->len)
                continue;
            if (cnt == 0)
                first = i;
            segs[cnt].src = w->srcs[i].ptr;
            segs[cnt].length = w->srcs[i].len;
            segs[cnt].device = w->srcs[i].device;
            bytes += w->srcs[i].len;
            cnt++;
        }
        if (cnt > 0) {
            rc = s3d_file_writer_write(fw, w->io.start[first], segs, cnt, NULL);
            if (rc == 0)
                S3D_DELTA_ADD(&w->base->bytes_sent, bytes);
        }
    }
    free(segs);
    return rc;
}
