/* ckpt_read.c - reading the tensors of an open checkpoint (ckpt_open.c) into host or GPU
 * memory.
 *
 * Read from S3: the destinations become pieces, planned into ranged GET jobs (ckpt_plan.h):
 * big host pieces are fetched straight into the destination; small or device pieces are
 * coalesced into staging chunks from the client's pool and scattered from there (memcpy to
 * host, async host-to-device copy on a per-device stream). A chunk goes back to the pool when
 * the event recorded after its copies completes; until then no more staged jobs start than
 * the pool has chunks, which bounds host memory. CRC32C is summed over each segment while it
 * sits in host memory, and the segments of a tensor are combined in order at the end.
 *
 * Read from files: the ranges go to s3d_file_read_ranges (fileio.h), which does the same with
 * O_DIRECT or cuFile. */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/opts.h"
#include "common/prefault.h"
#include "device/device.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_plan.h"
#include "engine/ckpt_reader.h"
#include "engine/client_impl.h"
#include "engine/fileio.h"
#include "engine/pool.h"
#include "engine/resources.h"
#include "engine/xfer.h"
#include "s3/ops.h"
#include "format/safetensors.h"
#include "s3direct/checkpoint.h"
#include "s3direct/transfer.h"

/* Host pieces at least this big are fetched straight into their destination. */
#define S3D_DIRECT_MIN (1u << 20)

/* ---- reading --------------------------------------------------------------------------- */

/* One validated destination. */
struct dest {
    size_t tensor;
    uint64_t src_off; /* inside the tensor */
    uint64_t len;
    int verify;   /* whole tensor with a stored CRC, and verification on */
    uint32_t crc; /* computed */
};

static int check_dests(struct s3d_reader *r, struct s3d_device *dev,
                       const struct s3d_tensor_dest *d, size_t n, int no_verify, struct dest *out)
{
    for (size_t i = 0; i < n; i++) {
        const struct s3d_st_tensor *t;
        uint64_t nbytes, len;
        if (d[i].index >= r->n_tensors)
            return s3d_fail(S3D_ENOTENSOR,
                            "destination %zu: tensor index %zu out of range "
                            "(%zu tensors)",
                            i, d[i].index, r->n_tensors);
        t = tref_tensor(r, d[i].index);
        nbytes = t->end - t->begin;
        if (d[i].src_offset > nbytes)
            return s3d_fail(S3D_EDEST, "tensor '%s': offset %llu is past its %llu bytes", t->name,
                            (unsigned long long)d[i].src_offset, (unsigned long long)nbytes);
        len = d[i].length ? d[i].length : nbytes - d[i].src_offset;
        if (len > nbytes - d[i].src_offset)
            return s3d_fail(S3D_EDEST, "tensor '%s': range %llu+%llu is past its %llu bytes",
                            t->name, (unsigned long long)d[i].src_offset, (unsigned long long)len,
                            (unsigned long long)nbytes);
        if (d[i].capacity < len)
            return s3d_fail(S3D_EDEST, "tensor '%s': destination holds %llu bytes, needs %llu",
                            t->name, (unsigned long long)d[i].capacity, (unsigned long long)len);
        if (len > 0 && d[i].ptr == NULL)
            return s3d_fail(S3D_EINVAL, "tensor '%s': destination pointer is NULL", t->name);
        if (d[i].device >= 0 && !s3d_device_has_gpu(dev))
            return s3d_fail(S3D_ENODEVICE,
                            "tensor '%s': destination on cuda:%d, but there is "
                            "no GPU (%s)",
                            t->name, d[i].device, s3d_device_why_host(dev));
        if (d[i].device >= S3D_MAX_DEVICES)
            return s3d_fail(S3D_ENODEVICE, "tensor '%s': device %d out of range", t->name,
                            d[i].device);
        out[i].tensor = d[i].index;
        out[i].src_off = d[i].src_offset;
        out[i].len = len;
        out[i].verify = !no_verify && t->has_crc32c && d[i].src_offset == 0 && len == nbytes;
        out[i].crc = 0;
    }
    return 0;
}

/* State of one S3 read. Only the calling thread touches it (the xfer hooks run there). */
struct s3read {
    struct s3d_reader *r;
    struct dest *dests;
    struct s3d_rpiece *pieces;
    struct s3d_rplan plan;
    struct s3d_get_job *jobs;
    void **chunks; /* per job: its staging chunk, or NULL */
    struct s3d_device *dev;
    struct s3d_pool *pool;
    struct s3d_stream_set streams; /* waits for the caller's streams */
    const struct s3d_read_options *o;
    /* Chunks whose device copies are queued: released when their event completes. */
    struct inflight {
        void *chunk;
        struct s3d_event *ev;
        size_t job; /* its plan job, whose device segments land when ev completes */
    } * inflight;
    size_t n_inflight;
    /* Tensors as they arrive (o->on_ready): per piece, its segments still to land; the
     * segments of piece p, in order, are pseg[pseg_at[p] .. pseg_at[p + 1]). NULL when off. */
    size_t *left;
    size_t *pseg_at;
    size_t *pseg;
    /* Destinations complete in this hook call, reported at its end in array order (a job
     * holds adjacent tensors of the file, which a custom order may want the other way). */
    size_t *done;
    size_t n_done;
};

/* The CRC check of one destination whose bytes are all read. */
static int check_crc(const struct s3d_reader *r, const struct dest *d)
{
    const struct s3d_st_tensor *t = tref_tensor(r, d->tensor);
    if (!d->verify || d->crc == t->crc32c)
        return 0;
    return s3d_fail(S3D_ECHECKSUM, "tensor '%s' in %s: CRC32C mismatch (stored %08x, read %08x)",
                    t->name, r->shards[r->tensors[d->tensor].shard].uri, t->crc32c, d->crc);
}

/* Tells the caller that destination i is complete. */
static int report_ready(const struct s3d_read_options *o, size_t i)
{
    if (o->on_ready(o->ready_user, i) != 0)
        return s3d_fail(S3D_ECANCELED, "read stopped by the caller");
    return 0;
}

/* Segment k is in its destination (host memory written, or its device copy complete): when
 * it was the last of its piece, the piece's CRC is combined from its segments in order,
 * checked, and the destination reported. */
static int seg_landed(struct s3read *s, size_t k)
{
    size_t p = s->plan.segs[k].piece;
    struct dest *d;
    int rc;
    if (s->left == NULL || --s->left[p] > 0)
        return 0;
    d = &s->dests[s->pieces[p].dest];
    if (d->verify) {
        for (size_t q = s->pseg_at[p]; q < s->pseg_at[p + 1]; q++) {
            const struct s3d_rseg *seg = &s->plan.segs[s->pseg[q]];
            d->crc =
                seg->piece_off == 0 ? seg->crc : s3d_crc32c_combine(d->crc, seg->crc, seg->len);
        }
        if ((rc = check_crc(s->r, d)) < 0)
            return rc;
    }
    s->done[s->n_done++] = s->pieces[p].dest;
    return 0;
}

static int size_cmp(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Reports the destinations completed since the last call, in array order. */
static int report_done(struct s3read *s)
{
    int rc = 0;
    if (s->n_done > 1)
        qsort(s->done, s->n_done, sizeof(*s->done), size_cmp);
    for (size_t k = 0; k < s->n_done && rc == 0; k++)
        rc = report_ready(s->o, s->done[k]);
    s->n_done = 0;
    return rc;
}

/* The device segments of job j have landed (the event after their copies completed). */
static int job_copies_landed(struct s3read *s, size_t j)
{
    const struct s3d_rjob *pj = &s->plan.jobs[j];
    for (size_t k = pj->seg0; k < pj->seg0 + pj->nseg; k++) {
        int rc;
        if (s->pieces[s->plan.segs[k].piece].device < 0)
            continue;
        if ((rc = seg_landed(s, k)) < 0)
            return rc;
    }
    return report_done(s);
}

/* Sets up the per-piece counts and segment lists for on_ready. */
static int ready_init(struct s3read *s, size_t np)
{
    s->left = s3d_calloc(np + 1, sizeof(*s->left));
    s->pseg_at = s3d_calloc(np + 1, sizeof(*s->pseg_at));
    s->pseg = s3d_calloc(s->plan.nsegs + 1, sizeof(*s->pseg));
    s->done = s3d_calloc(np + 1, sizeof(*s->done));
    if (s->left == NULL || s->pseg_at == NULL || s->pseg == NULL || s->done == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", np);
    for (size_t k = 0; k < s->plan.nsegs; k++)
        s->left[s->plan.segs[k].piece]++;
    for (size_t p = 0; p < np; p++)
        s->pseg_at[p + 1] = s->pseg_at[p] + s->left[p];
    /* Segments of a piece come out of the plan in piece order, so filling in segment order
     * keeps each piece's list in order. */
    for (size_t k = 0; k < s->plan.nsegs; k++) {
        size_t p = s->plan.segs[k].piece;
        s->pseg[s->pseg_at[p + 1] - s->left[p]] = k;
        s->left[p]--;
    }
    for (size_t p = 0; p < np; p++)
        s->left[p] = s->pseg_at[p + 1] - s->pseg_at[p];
    return 0;
}

/* The first destination each job serves (the smallest index among its segments). */
struct job_key {
    size_t first_dest;
    size_t job;
};

static int job_key_cmp(const void *a, const void *b)
{
    const struct job_key *x = a, *y = b;
    if (x->first_dest != y->first_dest)
        return x->first_dest < y->first_dest ? -1 : 1;
    return x->job < y->job ? -1 : x->job > y->job;
}

/* With on_ready, jobs start in the order of the destinations they serve, so that the tensors
 * the caller put first are asked for first. */
static int ready_start_order(const struct s3read *s, size_t *order)
{
    struct job_key *keys = s3d_calloc(s->plan.njobs + 1, sizeof(*keys));
    if (keys == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", s->plan.njobs);
    for (size_t j = 0; j < s->plan.njobs; j++) {
        const struct s3d_rjob *pj = &s->plan.jobs[j];
        keys[j].job = j;
        keys[j].first_dest = SIZE_MAX;
        for (size_t k = pj->seg0; k < pj->seg0 + pj->nseg; k++)
            keys[j].first_dest = S3D_MIN(keys[j].first_dest, s->pieces[s->plan.segs[k].piece].dest);
    }
    qsort(keys, s->plan.njobs, sizeof(*keys), job_key_cmp);
    for (size_t j = 0; j < s->plan.njobs; j++)
        order[j] = keys[j].job;
    free(keys);
    return 0;
}

static int read_prepare(void *ctx, struct s3d_get_job *job)
{
    struct s3read *s = ctx;
    size_t j = (size_t)(uintptr_t)job->user;
    const struct s3d_rjob *pj = &s->plan.jobs[j];
    if (pj->direct) {
        const struct s3d_rseg *seg = &s->plan.segs[pj->seg0];
        job->dst = (char *)s->pieces[seg->piece].dst + seg->piece_off;
        /* Fresh host memory (a new tensor) is mapped in one call rather than one page fault
         * per 4 KiB while the bytes arrive (common/prefault.h). Direct jobs are host. */
        s3d_prefault_write(job->dst, (size_t)pj->len);
        return S3D_FEED_OK;
    }
    s->chunks[j] = s3d_pool_try_get(s->pool);
    if (s->chunks[j] == NULL)
        return S3D_FEED_NOT_YET; /* every chunk is busy: wait for a copy to finish */
    job->dst = s->chunks[j];
    return S3D_FEED_OK;
}

/* Releases the chunks whose copies are done: S3D_POLL_BUSY while copies are pending. */
static int read_poll(void *ctx)
{
    struct s3read *s = ctx;
    size_t i = 0, j;
    int rc;
    while (i < s->n_inflight) {
        rc = s3d_device_event_query(s->dev, s->inflight[i].ev);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            i++;
            continue;
        }
        s3d_pool_put(s->pool, s->inflight[i].chunk);
        s3d_device_event_free(s->dev, s->inflight[i].ev);
        j = s->inflight[i].job;
        s->inflight[i] = s->inflight[--s->n_inflight];
        if ((rc = job_copies_landed(s, j)) < 0)
            return rc;
    }
    return s->n_inflight > 0 ? S3D_POLL_BUSY : S3D_POLL_IDLE;
}

static int read_done(void *ctx, struct s3d_get_job *job)
{
    struct s3read *s = ctx;
    size_t j = (size_t)(uintptr_t)job->user;
    const struct s3d_rjob *pj = &s->plan.jobs[j];
    const char *base = job->dst;
    int device_ordinal = -1, rc;

    for (size_t k = pj->seg0; k < pj->seg0 + pj->nseg; k++) {
        struct s3d_rseg *seg = &s->plan.segs[k];
        const struct s3d_rpiece *pc = &s->pieces[seg->piece];
        const char *src = base + seg->job_off;
        if (s->dests[pc->dest].verify)
            seg->crc = s3d_crc32c(0, src, seg->len);
        if (pc->device < 0) {
            if (!pj->direct)
                memcpy((char *)pc->dst + seg->piece_off, src, seg->len);
            if ((rc = seg_landed(s, k)) < 0)
                return rc;
        } else {
            struct s3d_stream *st;
            rc = s3d_stream_set_get(&s->streams, pc->device, &st);
            if (rc < 0)
                return rc;
            rc = s3d_device_copy_htod(s->dev, st, (uint64_t)(uintptr_t)pc->dst + seg->piece_off,
                                      src, seg->len);
            if (rc < 0)
                return rc;
            /* A chunk holds the bytes of one contiguous object range; in practice one device
             * per job. With several, the event goes on the last stream and the others are
             * synchronized now (rare: keeps one event per chunk). */
            if (device_ordinal >= 0 && device_ordinal != pc->device) {
                rc = s3d_device_stream_sync(s->dev, s->streams.stream[device_ordinal]);
                if (rc < 0)
                    return rc;
            }
            device_ordinal = pc->device;
        }
    }
    if ((rc = report_done(s)) < 0)
        return rc;
    if (pj->direct)
        return 0;
    if (device_ordinal < 0) {
        s3d_pool_put(s->pool, s->chunks[j]);
    } else {
        struct s3d_event *ev;
        /* Events are cheap to create (microseconds); one per chunk in flight. */
        rc = s3d_device_event_new(s->dev, device_ordinal, &ev);
        if (rc < 0)
            return rc;
        rc = s3d_device_event_record(s->dev, ev, s->streams.stream[device_ordinal]);
        if (rc < 0) {
            s3d_device_event_free(s->dev, ev);
            return rc;
        }
        s->inflight[s->n_inflight].chunk = s->chunks[j];
        s->inflight[s->n_inflight].ev = ev;
        s->inflight[s->n_inflight].job = j;
        s->n_inflight++;
    }
    s->chunks[j] = NULL;
    return 0;
}

/* Combines the segment CRCs of each piece (in order) into its destination's CRC. */
static void combine_crcs(struct s3read *s)
{
    for (size_t k = 0; k < s->plan.nsegs; k++) {
        const struct s3d_rseg *seg = &s->plan.segs[k];
        struct dest *d = &s->dests[s->pieces[seg->piece].dest];
        if (d->verify)
            d->crc =
                seg->piece_off == 0 ? seg->crc : s3d_crc32c_combine(d->crc, seg->crc, seg->len);
    }
}

static int read_s3(struct s3d_reader *r, struct dest *dests, const struct s3d_tensor_dest *d,
                   size_t n, const struct s3d_read_options *o)
{
    struct s3read s;
    struct s3d_get_hooks hooks;
    size_t np = 0, chunks_total, *order = NULL;
    int first_device = -1, rc, sync_rc;

    memset(&s, 0, sizeof(s));
    s.r = r;
    s.o = o;
    s.dests = dests;
    s.dev = NULL;
    /* Host-only reads use a plain pool and never open the device layer; the first device
     * destination decides the context the pool is pinned in. */
    for (size_t i = 0; i < n && first_device < 0; i++)
        if (dests[i].len > 0 && d[i].device >= 0)
            first_device = d[i].device;
    if (first_device >= 0 && (rc = s3d_client_device(r->client, &s.dev)) < 0)
        return rc;
    /* The destination may still be read by the caller's kernels (load_into), or be a block
     * the caching allocator recycled from a tensor whose kernels are pending. */
    s3d_stream_set_init(&s.streams, s.dev);
    s3d_stream_set_wait_caller(&s.streams, o->cuda_stream, o->cuda_streams, o->n_cuda_streams);
    rc = s3d_client_pool(r->client, first_device, &s.pool);
    if (rc < 0)
        return rc;
    s.pieces = s3d_calloc(n, sizeof(*s.pieces));
    if (s.pieces == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const struct s3d_st_tensor *t;
        const struct tref *tr;
        if (dests[i].len == 0)
            continue;
        tr = &r->tensors[dests[i].tensor];
        t = tref_tensor(r, dests[i].tensor);
        s.pieces[np].shard = tr->shard;
        s.pieces[np].obj_off = r->shards[tr->shard].hdr.data_start + t->begin + dests[i].src_off;
        s.pieces[np].len = dests[i].len;
        s.pieces[np].dst = d[i].ptr;
        s.pieces[np].device = d[i].device;
        s.pieces[np].dest = i;
        np++;
    }
    rc = s3d_rplan_build(s.pieces, np, s3d_pool_chunk_size(s.pool), S3D_DIRECT_MIN, &s.plan);
    if (rc < 0)
        goto out;
    chunks_total = s3d_pool_chunk_count(s.pool);
    s.jobs = s3d_calloc(s.plan.njobs, sizeof(*s.jobs));
    s.chunks = s3d_calloc(s.plan.njobs, sizeof(*s.chunks));
    s.inflight = s3d_calloc(chunks_total, sizeof(*s.inflight));
    order = s3d_calloc(s.plan.njobs, sizeof(*order));
    if (s.jobs == NULL || s.chunks == NULL || s.inflight == NULL || order == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", s.plan.njobs);
        goto out;
    }
    /* The long jobs start first (s3d_rplan_start_order), or with on_ready the jobs of the
     * first destinations; the hooks find a job's plan entry through user. */
    if (o->on_ready != NULL) {
        if ((rc = ready_init(&s, np)) < 0 || (rc = ready_start_order(&s, order)) < 0)
            goto out;
    } else {
        s3d_rplan_start_order(&s.plan, order);
    }
    for (size_t k = 0; k < s.plan.njobs; k++) {
        size_t j = order[k];
        const struct shard *sh = &r->shards[s.plan.jobs[j].shard];
        s.jobs[k].bucket = sh->loc.bucket;
        s.jobs[k].key = sh->loc.key;
        s.jobs[k].if_match = sh->etag;
        s.jobs[k].object_size = sh->object_size;
        s.jobs[k].offset = s.plan.jobs[j].obj_off;
        s.jobs[k].length = s.plan.jobs[j].len;
        s.jobs[k].user = (void *)(uintptr_t)j;
    }
    hooks.prepare = read_prepare;
    hooks.done = read_done;
    hooks.poll = read_poll;
    hooks.ctx = &s;
    rc = s3d_xfer_get(r->client, s.jobs, s.plan.njobs, &hooks, 0, o->progress, o->progress_user,
                      o->cancel);
    /* Whatever happened, every queued copy must finish before its chunk goes back. */
    sync_rc = s3d_stream_set_sync(&s.streams);
    if (rc == 0 && sync_rc < 0)
        rc = sync_rc;
    for (size_t i = 0; i < s.n_inflight; i++) {
        s3d_pool_put(s.pool, s.inflight[i].chunk);
        s3d_device_event_free(s.dev, s.inflight[i].ev);
        if (rc == 0) /* the streams are synchronized: its copies are complete */
            rc = job_copies_landed(&s, s.inflight[i].job);
    }
    s.n_inflight = 0;
    if (rc == 0 && s.left == NULL)
        combine_crcs(&s);
out:
    if (s.chunks != NULL)
        for (size_t j = 0; j < s.plan.njobs; j++)
            s3d_pool_put(s.pool, s.chunks[j]);
    s3d_stream_set_free(&s.streams);
    free(order);
    free(s.left);
    free(s.pseg_at);
    free(s.pseg);
    free(s.done);
    free(s.inflight);
    free(s.chunks);
    free(s.jobs);
    s3d_rplan_free(&s.plan);
    free(s.pieces);
    return rc;
}

/* The file range destination d (validated as dd) reads from its shard. */
static void file_range(const struct s3d_reader *r, struct dest *dd, const struct s3d_tensor_dest *d,
                       struct s3d_file_range *out)
{
    const struct s3d_st_tensor *t = tref_tensor(r, dd->tensor);
    out->file_offset =
        r->shards[r->tensors[dd->tensor].shard].hdr.data_start + t->begin + dd->src_off;
    out->length = dd->len;
    out->dst = d->ptr;
    out->device = d->device;
    out->crc_out = dd->verify ? &dd->crc : NULL;
}

/* The file I/O options of a read: the caller's, with progress summed over the shards in acc
 * and the bytes of each path in counts. */
static void file_opts(const struct s3d_read_options *o, struct s3d_progress_acc *acc,
                      struct s3d_file_io_counts *counts, struct s3d_file_io_opts *fo)
{
    memset(fo, 0, sizeof(*fo));
    fo->mode = o->file_io;
    fo->progress = o->progress ? s3d_progress_acc_cb : NULL;
    fo->progress_user = acc;
    fo->cancel = o->cancel;
    fo->cuda_stream = o->cuda_stream;
    fo->cuda_streams = o->cuda_streams;
    fo->n_cuda_streams = o->n_cuda_streams;
    fo->counts = counts;
}

/* Batches of a read from files with on_ready: the first destination alone (the first tensor
 * comes as soon as it can), then batches twice as big, up to this many bytes, each one call
 * of s3d_file_read_ranges_fd (which overlaps the reads and device copies inside it). */
#define S3D_READY_BATCH_MAX (64u << 20)

/* Reads from files in the order of the destinations, reporting each batch's destinations
 * once the batch is in place and checked. ranges has room for n. */
static int read_files_ready(struct s3d_reader *r, struct s3d_device *dev, struct s3d_pool *pool,
                            struct dest *dests, const struct s3d_tensor_dest *d, size_t n,
                            const struct s3d_read_options *o, struct s3d_file_range *ranges,
                            struct s3d_progress_acc *acc, struct s3d_file_io_counts *counts)
{
    uint64_t cap = 1;
    size_t i = 0;
    while (i < n) {
        struct s3d_file_io_opts fo;
        size_t first = i, k = 0;
        uint32_t sh = r->tensors[dests[i].tensor].shard;
        uint64_t bytes = 0;
        int rc;
        /* Consecutive destinations in one shard, until the batch reaches cap bytes. */
        while (i < n && r->tensors[dests[i].tensor].shard == sh && (k == 0 || bytes < cap)) {
            file_range(r, &dests[i], &d[i], &ranges[k]);
            bytes += dests[i].len;
            k++;
            i++;
        }
        cap = S3D_MIN((uint64_t)S3D_READY_BATCH_MAX, S3D_MAX(cap, bytes) * 2);
        file_opts(o, acc, counts, &fo);
        rc = s3d_file_read_ranges_fd(dev, pool, r->shards[sh].fd, r->shards[sh].loc.path, ranges, k,
                                     &fo);
        acc->base += bytes;
        for (size_t q = first; rc == 0 && q < i; q++)
            if ((rc = check_crc(r, &dests[q])) == 0 && dests[q].len > 0)
                rc = report_ready(o, q);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int read_files(struct s3d_reader *r, struct dest *dests, const struct s3d_tensor_dest *d,
                      size_t n, const struct s3d_read_options *o, struct s3d_file_io_counts *counts)
{
    struct s3d_file_range *ranges = s3d_calloc(n, sizeof(*ranges));
    struct s3d_progress_acc acc = {.fn = o->progress, .user = o->progress_user};
    struct s3d_device *dev = NULL;
    struct s3d_pool *pool = NULL;
    int need_pool = o->file_io == S3D_FILE_IO_DIRECT, first_device = -1;
    int rc = 0;

    if (ranges == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", n);
    for (size_t i = 0; i < n; i++) {
        acc.total += dests[i].len;
        if (d[i].device >= 0 && first_device < 0) {
            need_pool = 1;
            first_device = d[i].device;
        }
    }
    if (first_device >= 0) /* host-only reads never open the device layer */
        rc = s3d_client_device(r->client, &dev);
    if (rc == 0 && need_pool)
        rc = s3d_client_pool(r->client, first_device, &pool);
    if (rc == 0 && o->on_ready != NULL) {
        rc = read_files_ready(r, dev, pool, dests, d, n, o, ranges, &acc, counts);
        free(ranges);
        return rc;
    }
    for (size_t sh = 0; rc == 0 && sh < r->n_shards; sh++) {
        struct s3d_file_io_opts fo;
        size_t k = 0;
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++) {
            if (r->tensors[dests[i].tensor].shard != sh)
                continue;
            file_range(r, &dests[i], &d[i], &ranges[k]);
            bytes += dests[i].len;
            k++;
        }
        if (k == 0)
            continue;
        file_opts(o, &acc, counts, &fo);
        rc = s3d_file_read_ranges_fd(dev, pool, r->shards[sh].fd, r->shards[sh].loc.path, ranges, k,
                                     &fo);
        acc.base += bytes;
    }
    free(ranges);
    return rc;
}

/* s3d_read_options.stats of a read that succeeded. */
static void fill_stats(const struct s3d_read_options *o, const struct s3d_file_io_counts *counts)
{
    struct s3d_read_stats st;
    if (o->stats == NULL)
        return;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    st.bytes_cufile = counts->cufile;
    st.bytes_direct = counts->direct;
    st.bytes_buffered = counts->buffered;
    s3d_out_copy(o->stats, &st, sizeof(st), S3D_READ_STATS_SIZE_V1);
}

int s3d_reader_read(struct s3d_reader *r, const struct s3d_tensor_dest *dests, size_t n,
                    const struct s3d_read_options *opts)
{
    struct s3d_file_io_counts counts = {0, 0, 0};
    struct s3d_read_options o;
    struct s3d_device *dev = NULL;
    struct dest *dd = NULL;
    int rc;

    if (r == NULL || (dests == NULL && n > 0))
        return s3d_fail(S3D_EINVAL, "s3d_reader_read: NULL argument");
    rc = s3d_client_check(r->client);
    if (rc < 0)
        return rc;
    s3d_opts_copy(&o, sizeof(o), opts);
    if (n == 0) {
        fill_stats(&o, &counts);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (dests[i].device >= 0) { /* host-only reads never open the device layer */
            if ((rc = s3d_client_device(r->client, &dev)) < 0)
                return rc;
            break;
        }
    dd = s3d_calloc(n, sizeof(*dd));
    if (dd == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory for %zu destinations", n);
    rc = check_dests(r, dev, dests, n, o.no_verify, dd);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n && o.on_ready != NULL; i++)
        if (dd[i].len == 0 && (rc = report_ready(&o, i)) < 0)
            goto out;
    /* All shards of one checkpoint live in one place (the index resolves them beside it). */
    rc = r->shards[0].loc.is_s3 ? read_s3(r, dd, dests, n, &o)
                                : read_files(r, dd, dests, n, &o, &counts);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n && o.on_ready == NULL; i++)
        if ((rc = check_crc(r, &dd[i])) < 0)
            goto out;
    fill_stats(&o, &counts);
out:
    free(dd);
    return rc;
}
