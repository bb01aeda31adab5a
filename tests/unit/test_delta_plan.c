/* test_delta_plan.c - the incremental save's part planner: S3's part rules hold, every byte is
 * covered once with the right source, and the copied share is as large as the rules allow. */
#include <stdlib.h>
#include <string.h>

#include "engine/delta_plan.h"
#include "s3direct/errors.h"
#include "testutil.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static const struct s3d_dplan_limits S3 = {.part_size = 8 * MiB,
                                           .min_part = 5 * MiB,
                                           .min_copy = 5 * MiB,
                                           .max_copy = 256 * MiB,
                                           .max_parts = 10000};

/* Every byte of the object is in exactly one part, in order; a copied part's bytes are those
 * of a copyable segment at the matching base offset; sizes follow the limits. Returns the
 * copied bytes. */
static uint64_t check_plan(const struct s3d_dseg *segs, size_t n, const struct s3d_dpart *p,
                           size_t np, const struct s3d_dplan_limits *lim)
{
    uint64_t off = 0, copied = 0;
    for (size_t k = 0; k < np; k++) {
        CHECK_EQ_U64(p[k].off, off);
        CHECK(p[k].len > 0);
        if (k + 1 < np)
            CHECK(p[k].len >= lim->min_part);
        if (p[k].src >= 0) {
            /* Each byte of a copied part lies in a segment of that source, at the same offset
             * relative to it: walk the segments it spans. */
            uint64_t so = 0, left = p[k].len, at = p[k].off;
            CHECK(p[k].len <= lim->max_copy + lim->min_part);
            for (size_t i = 0; i < n && left > 0; i++) {
                uint64_t end = so + segs[i].len;
                if (at >= so && at < end) {
                    uint64_t take = end - at < left ? end - at : left;
                    CHECK(segs[i].src == p[k].src);
                    CHECK_EQ_U64(segs[i].src_off + (at - so), p[k].src_off + (at - p[k].off));
                    at += take;
                    left -= take;
                }
                so = end;
            }
            CHECK_EQ_U64(left, 0);
            copied += p[k].len;
        } else {
            CHECK(p[k].len <= lim->part_size + lim->min_part);
        }
        off += p[k].len;
    }
    {
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += segs[i].len;
        CHECK_EQ_U64(off, total);
    }
    return copied;
}

static uint64_t plan(const struct s3d_dseg *segs, size_t n, size_t *np_out)
{
    struct s3d_dpart *p = NULL;
    size_t np = 0;
    uint64_t copied;
    CHECK_OK(s3d_delta_plan(segs, n, &S3, &p, &np));
    copied = check_plan(segs, n, p, np, &S3);
    if (np_out != NULL)
        *np_out = np;
    free(p);
    return copied;
}

/* A header and big unchanged tensors: the header's part takes 5 MiB from the first copy; the
 * contiguous unchanged tensors are one copied run, cut at max_copy. */
static void test_all_unchanged(void)
{
    struct s3d_dseg s[] = {
        {40 * KiB, -1, 0}, {300 * MiB, 0, 30 * KiB}, {200 * MiB, 0, 300 * MiB + 30 * KiB}};
    size_t np;
    uint64_t c = plan(s, 3, &np);
    CHECK_EQ_U64(c, 500 * MiB + 40 * KiB - 5 * MiB);
    CHECK_EQ_U64(np, 1 + 2); /* header part, 256 MiB + the rest (239 MiB) */
}

/* A changed tensor of 2 MiB between two unchanged ones: it borrows 3 MiB of the next. */
static void test_small_gap(void)
{
    struct s3d_dseg s[] = {
        {8 * MiB, -1, 0}, {64 * MiB, 0, 100}, {2 * MiB, -1, 0}, {64 * MiB, 0, 100 + 66 * MiB}};
    uint64_t c = plan(s, 4, NULL);
    CHECK_EQ_U64(c, 64 * MiB + 64 * MiB - 3 * MiB);
}

/* A run of small unchanged tensors shorter than a part is sent; a big changed tail too. */
static void test_short_copy_sent(void)
{
    struct s3d_dseg s[] = {{1 * MiB, -1, 0}, {4 * MiB, 0, 1000}, {32 * MiB, -1, 0}};
    CHECK_EQ_U64(plan(s, 3, NULL), 0);
}

/* Copyable runs from two base objects, or not contiguous in the base, are not joined. */
static void test_sources_not_joined(void)
{
    struct s3d_dseg s[] = {{6 * MiB, -1, 0},
                           {10 * MiB, 0, 0},
                           {10 * MiB, 1, 0},
                           {10 * MiB, 1, 20 * MiB},
                           {6 * MiB, -1, 0}};
    struct s3d_dpart *p = NULL;
    size_t np = 0;
    CHECK_OK(s3d_delta_plan(s, 5, &S3, &p, &np));
    CHECK_EQ_U64(check_plan(s, 5, p, np, &S3), 30 * MiB);
    CHECK_EQ_U64(np, 5);
    CHECK(p[1].src == 0 && p[2].src == 1 && p[3].src == 1);
    CHECK_EQ_U64(p[3].src_off, 20 * MiB);
    free(p);
}

/* An object ending in a short copied run: the last part may be short. */
static void test_short_last_copy(void)
{
    struct s3d_dseg s[] = {{6 * MiB, -1, 0}, {1 * MiB, 0, 0}};
    struct s3d_dpart *p = NULL;
    size_t np = 0;
    /* 1 MiB is below min_copy: sent. */
    CHECK_OK(s3d_delta_plan(s, 2, &S3, &p, &np));
    CHECK_EQ_U64(np, 1);
    free(p);
}

/* Neither neighbour can spare the bytes a short sent run lacks: the shorter is sent whole. */
static void test_neighbours_too_short(void)
{
    struct s3d_dseg s[] = {{6 * MiB, -1, 0},
                           {6 * MiB, 0, 0},
                           {1 * MiB, -1, 0},
                           {7 * MiB, 0, 7 * MiB},
                           {6 * MiB, -1, 0}};
    uint64_t c = plan(s, 5, NULL);
    CHECK(c == 7 * MiB || c == 6 * MiB || c == 0);
}

/* Files: no part rule, copies of at least min_copy. */
static void test_files(void)
{
    const struct s3d_dplan_limits f = {.part_size = 1ull << 62,
                                       .min_part = 0,
                                       .min_copy = 64 * KiB,
                                       .max_copy = 1ull << 62,
                                       .max_parts = 1u << 30};
    struct s3d_dseg s[] = {{100, -1, 0}, {1 * MiB, 0, 0}, {10, -1, 0}, {1 * KiB, 0, 2 * MiB}};
    struct s3d_dpart *p = NULL;
    size_t np = 0;
    CHECK_OK(s3d_delta_plan(s, 4, &f, &p, &np));
    CHECK_EQ_U64(check_plan(s, 4, p, np, &f), 1 * MiB);
    CHECK_EQ_U64(np, 3); /* 100 sent, 1 MiB copied, 10 + 1 KiB sent */
    free(p);
}

/* Too many parts, and bad input. */
static void test_limits(void)
{
    struct s3d_dseg s[] = {{100 * MiB, -1, 0}};
    struct s3d_dplan_limits l = S3;
    struct s3d_dpart *p = NULL;
    size_t np = 0;
    l.max_parts = 3;
    CHECK_ERR(s3d_delta_plan(s, 1, &l, &p, &np), S3D_ETOOBIG);
    CHECK(p == NULL);
    s[0].len = 0;
    CHECK_ERR(s3d_delta_plan(s, 1, &S3, &p, &np), S3D_EINVAL);
}

/* Random layouts: the invariants of check_plan, and no copyable run of at least 3 * min_part
 * with sent neighbours of at least min_part is lost. */
static void test_random(void)
{
    srand(12345);
    for (int round = 0; round < 3000; round++) {
        struct s3d_dseg s[24];
        size_t n = 1 + (size_t)(rand() % 23);
        uint64_t base_off[3] = {0, 0, 0};
        s[0].len = 1 + (uint64_t)(rand() % (int)(64 * KiB));
        s[0].src = -1;
        s[0].src_off = 0;
        for (size_t i = 1; i < n; i++) {
            int kind = rand() % 4;
            uint64_t sizes[] = {1 * KiB, 3 * MiB, 5 * MiB, 9 * MiB, 40 * MiB, 300 * MiB};
            s[i].len = sizes[rand() % 6] + (uint64_t)(rand() % 5000);
            s[i].src = kind == 0 ? -1 : kind - 1;
            s[i].src_off = s[i].src >= 0 ? base_off[s[i].src] : 0;
            if (s[i].src >= 0)
                base_off[s[i].src] += s[i].len + (rand() % 2 ? 0 : 4096);
        }
        plan(s, n, NULL);
    }
}

int main(void)
{
    test_all_unchanged();
    test_small_gap();
    test_short_copy_sent();
    test_sources_not_joined();
    test_short_last_copy();
    test_neighbours_too_short();
    test_files();
    test_limits();
    test_random();
    return 0;
}
