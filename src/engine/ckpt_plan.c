/* ckpt_plan.c - turns destination pieces into ranged GET jobs (see ckpt_plan.h). */
#include "engine/ckpt_plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"

static int piece_cmp(const void *a, const void *b)
{
    const struct s3d_rpiece *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    if (x->obj_off != y->obj_off)
        return x->obj_off < y->obj_off ? -1 : 1;
    if (x->dest != y->dest)
        return x->dest < y->dest ? -1 : 1;
    return 0;
}

struct builder {
    struct s3d_rplan *p;
    size_t cap_jobs, cap_segs;
};

static struct s3d_rjob *new_job(struct builder *b, uint32_t shard, uint64_t off, int direct)
{
    struct s3d_rplan *p = b->p;
    if (p->njobs == b->cap_jobs) {
        size_t cap = b->cap_jobs ? b->cap_jobs * 2 : 64;
        struct s3d_rjob *j = s3d_reallocarray(p->jobs, cap, sizeof(*j));
        if (j == NULL)
            return NULL;
        p->jobs = j;
        b->cap_jobs = cap;
    }
    struct s3d_rjob *j = &p->jobs[p->njobs++];
    memset(j, 0, sizeof(*j));
    j->shard = shard;
    j->obj_off = off;
    j->seg0 = p->nsegs;
    j->direct = direct;
    return j;
}

static int add_seg(struct builder *b, struct s3d_rjob *j, size_t piece, uint64_t piece_off,
                   uint64_t len)
{
    struct s3d_rplan *p = b->p;
    if (p->nsegs == b->cap_segs) {
        size_t cap = b->cap_segs ? b->cap_segs * 2 : 64;
        struct s3d_rseg *s = s3d_reallocarray(p->segs, cap, sizeof(*s));
        if (s == NULL)
            return S3D_ENOMEM;
        p->segs = s;
        b->cap_segs = cap;
    }
    struct s3d_rseg *s = &p->segs[p->nsegs++];
    s->piece = piece;
    s->piece_off = piece_off;
    s->job_off = j->len;
    s->len = len;
    s->crc = 0;
    j->len += len;
    j->nseg++;
    return 0;
}

int s3d_rplan_build(struct s3d_rpiece *pieces, size_t n, uint64_t max_job, uint64_t direct_min,
                    struct s3d_rplan *out)
{
    struct builder b = {.p = out};
    size_t open_idx = (size_t)-1; /* index of the staged job being filled */
    uint64_t open_end = 0;        /* object offset where it ends */
    uint32_t open_shard = 0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (max_job == 0)
        return s3d_fail(S3D_EINVAL, "read plan: job size is 0");
    qsort(pieces, n, sizeof(*pieces), piece_cmp);

    for (size_t i = 0; i < n; i++) {
        const struct s3d_rpiece *pc = &pieces[i];
        uint64_t done = 0;
        if (pc->len == 0) {
            rc = s3d_fail(S3D_EINVAL, "read plan: zero-length piece");
            goto fail;
        }
        if (pc->device < 0 && pc->len >= direct_min) {
            open_idx = (size_t)-1;
            while (done < pc->len) {
                uint64_t take = pc->len - done < max_job ? pc->len - done : max_job;
                struct s3d_rjob *j = new_job(&b, pc->shard, pc->obj_off + done, 1);
                if (j == NULL || add_seg(&b, j, i, done, take) < 0) {
                    rc = s3d_fail(S3D_ENOMEM, "out of memory planning reads");
                    goto fail;
                }
                done += take;
            }
            continue;
        }
        /* Staged: continue the open job only when this piece starts exactly where it ends. */
        if (open_idx != (size_t)-1 && (open_shard != pc->shard || open_end != pc->obj_off))
            open_idx = (size_t)-1;
        while (done < pc->len) {
            struct s3d_rjob *j;
            uint64_t room, take;
            if (open_idx == (size_t)-1) {
                j = new_job(&b, pc->shard, pc->obj_off + done, 0);
                if (j == NULL) {
                    rc = s3d_fail(S3D_ENOMEM, "out of memory planning reads");
                    goto fail;
                }
                open_idx = out->njobs - 1;
                open_shard = pc->shard;
            }
            j = &out->jobs[open_idx];
            room = max_job - j->len;
            take = pc->len - done < room ? pc->len - done : room;
            if (add_seg(&b, j, i, done, take) < 0) {
                rc = s3d_fail(S3D_ENOMEM, "out of memory planning reads");
                goto fail;
            }
            done += take;
            open_end = j->obj_off + j->len;
            if (j->len == max_job)
                open_idx = (size_t)-1;
        }
    }
    return 0;
fail:
    s3d_rplan_free(out);
    return rc;
}

void s3d_rplan_free(struct s3d_rplan *plan)
{
    if (plan == NULL)
        return;
    free(plan->jobs);
    free(plan->segs);
    memset(plan, 0, sizeof(*plan));
}

void s3d_rplan_start_order(const struct s3d_rplan *plan, size_t *order)
{
    uint64_t long_len = 0;
    size_t k = 0;
    for (size_t j = 0; j < plan->njobs; j++)
        long_len = S3D_MAX(long_len, (plan->jobs[j].len + 1) / 2);
    for (size_t j = 0; j < plan->njobs; j++)
        if (plan->jobs[j].len >= long_len)
            order[k++] = j;
    for (size_t j = 0; j < plan->njobs; j++)
        if (plan->jobs[j].len < long_len)
            order[k++] = j;
}
