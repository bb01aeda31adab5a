/* delta_plan.c - the parts of an incremental save (contract in delta_plan.h).
 *
 * Three steps over runs (struct s3d_dpart, object offsets included):
 *   1. merge: sent next to sent, copied next to copied when the base ranges follow on;
 *   2. settle, repeated until nothing changes: a copied run too short to copy (min_copy) or
 *      to be a part (min_part, unless it ends the object) is sent instead; a sent run too
 *      short to be a part (unless it ends the object) takes the bytes it lacks from the front
 *      of the copied run after it, else from the tail of the one before it, as long as what
 *      remains of that run is still a part; when neither can spare them, the shorter
 *      neighbour is sent whole;
 *   3. cut: each run into parts of part_size (sent) or max_copy (copied) bytes, a remainder
 *      shorter than min_part joined to the part before it.
 *
 *   runs:   [hdr 40K][t0 300M copy][t1 2M send][t2 900M copy][t3 64M send]
 *   settle: [hdr+5M  ][t0 295M-ish][t1 2M + 3M of t2][t2 897M ][t3 64M ]
 *   cut:    [  1  ][   2   ][ 3 ][ 4 ][ 5 ][ 6 ][...]  (copies of at most max_copy each)
 */
#include "engine/delta_plan.h"

#include <stdlib.h>

#include "common/alloc.h"
#include "common/error.h"

static int joinable(const struct s3d_dpart *a, const struct s3d_dpart *b)
{
    if (a->src < 0 || b->src < 0)
        return a->src < 0 && b->src < 0;
    return a->src == b->src && a->src_off + a->len == b->src_off;
}

/* Merges adjacent joinable runs (and drops empty ones) in place; returns the new count. */
static size_t merge(struct s3d_dpart *r, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].len == 0)
            continue;
        if (k > 0 && joinable(&r[k - 1], &r[i]))
            r[k - 1].len += r[i].len;
        else
            r[k++] = r[i];
    }
    return k;
}

/* Step 2 once: 1 when a run changed (run it again), 0 when settled. */
static int settle_once(struct s3d_dpart *r, size_t *np, const struct s3d_dplan_limits *lim)
{
    size_t n = *np;
    int changed = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].src < 0)
            continue;
        if (r[i].len < lim->min_copy || (r[i].len < lim->min_part && i + 1 < n)) {
            r[i].src = -1;
            changed = 1;
        }
    }
    if (changed) {
        *np = merge(r, n);
        return 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        struct s3d_dpart *s = &r[i], *next = &r[i + 1], *prev = i > 0 ? &r[i - 1] : NULL;
        uint64_t need;
        if (s->src >= 0 || s->len >= lim->min_part)
            continue;
        /* After the merge, the neighbours of a sent run are copied runs. */
        need = lim->min_part - s->len;
        if (next->len > need && (next->len - need >= lim->min_part || i + 2 == n)) {
            s->len += need;
            next->off += need;
            next->src_off += need;
            next->len -= need;
            return 1;
        }
        if (prev != NULL && prev->len >= need + lim->min_part) {
            prev->len -= need;
            s->off -= need;
            s->len += need;
            return 1;
        }
        if (prev == NULL || next->len <= prev->len)
            next->src = -1;
        else
            prev->src = -1;
        *np = merge(r, n);
        return 1;
    }
    return 0;
}

/* Step 3 for one run: appends its parts to out (room for them is there). */
static size_t cut(const struct s3d_dpart *run, const struct s3d_dplan_limits *lim,
                  struct s3d_dpart *out)
{
    uint64_t size = run->src < 0 ? lim->part_size : lim->max_copy, done = 0;
    size_t k = 0;
    while (done < run->len) {
        uint64_t left = run->len - done, len = left < size ? left : size;
        if (left - len > 0 && left - len < lim->min_part)
            len = left; /* a short remainder joins this part */
        out[k] = *run;
        out[k].off = run->off + done;
        out[k].len = len;
        if (run->src >= 0)
            out[k].src_off = run->src_off + done;
        done += len;
        k++;
    }
    return k;
}

int s3d_delta_plan(const struct s3d_dseg *segs, size_t n, const struct s3d_dplan_limits *lim,
                   struct s3d_dpart **out, size_t *n_out)
{
    struct s3d_dpart *r = NULL, *parts = NULL;
    uint64_t off = 0, count = 0;
    size_t nr, k = 0;

    *out = NULL;
    *n_out = 0;
    if (lim->part_size == 0 || lim->max_copy == 0 || n == 0)
        return s3d_fail(S3D_EINVAL, "delta plan: no runs or a zero part size");
    r = s3d_calloc(n, sizeof(*r));
    if (r == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory planning parts");
    for (size_t i = 0; i < n; i++) {
        r[i].off = off;
        r[i].len = segs[i].len;
        r[i].src = segs[i].src < 0 ? -1 : segs[i].src;
        r[i].src_off = segs[i].src_off;
        off += segs[i].len;
    }
    if (off == 0) {
        free(r);
        return s3d_fail(S3D_EINVAL, "delta plan: an empty object");
    }
    nr = merge(r, n);
    while (settle_once(r, &nr, lim))
        ;
    for (size_t i = 0; i < nr; i++) {
        uint64_t size = r[i].src < 0 ? lim->part_size : lim->max_copy;
        count += (r[i].len + size - 1) / size;
    }
    if (count > lim->max_parts) {
        free(r);
        return s3d_fail(S3D_ETOOBIG, "delta plan: %llu parts, more than %u",
                        (unsigned long long)count, lim->max_parts);
    }
    parts = s3d_calloc((size_t)count, sizeof(*parts));
    if (parts == NULL) {
        free(r);
        return s3d_fail(S3D_ENOMEM, "out of memory planning parts");
    }
    for (size_t i = 0; i < nr; i++)
        k += cut(&r[i], lim, parts + k);
    free(r);
    *out = parts;
    *n_out = k;
    return 0;
}
