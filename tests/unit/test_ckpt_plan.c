/* test_ckpt_plan.c - the read planner: direct jobs for big host pieces, staged coalescing of
 * adjacent small or device pieces, never joining ranges that are not adjacent. */
#include <string.h>

#include "engine/ckpt_plan.h"
#include "testutil.h"

#define MiB (1ull << 20)

static char host[64 << 20];

/* Every byte of every piece is covered exactly once, in order, by the plan. */
static void check_cover(const struct s3d_rpiece *p, size_t n, const struct s3d_rplan *plan,
                        uint64_t max_job)
{
    uint64_t covered[64] = {0};
    CHECK(n <= 64);
    for (size_t j = 0; j < plan->njobs; j++) {
        const struct s3d_rjob *job = &plan->jobs[j];
        uint64_t off = 0;
        CHECK(job->len > 0 && job->len <= max_job);
        CHECK(job->nseg > 0);
        if (job->direct)
            CHECK(job->nseg == 1);
        for (size_t k = job->seg0; k < job->seg0 + job->nseg; k++) {
            const struct s3d_rseg *s = &plan->segs[k];
            const struct s3d_rpiece *pc = &p[s->piece];
            CHECK(s->job_off == off);
            /* the job's bytes are exactly the object's bytes at job->obj_off + job_off */
            CHECK_EQ_U64(pc->obj_off + s->piece_off, job->obj_off + s->job_off);
            CHECK(pc->shard == job->shard);
            /* segments of a piece come in order */
            CHECK_EQ_U64(s->piece_off, covered[s->piece]);
            covered[s->piece] += s->len;
            if (job->direct)
                CHECK(pc->device < 0);
            off += s->len;
        }
        CHECK_EQ_U64(off, job->len);
    }
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_U64(covered[i], p[i].len);
}

int main(void)
{
    struct s3d_rplan plan;

    /* One big host tensor: direct 8 MiB jobs straight into it. */
    {
        struct s3d_rpiece p[1] = {
            {.shard = 0, .obj_off = 1000, .len = 20 * MiB, .dst = host, .device = -1, .dest = 0}};
        CHECK_OK(s3d_rplan_build(p, 1, 8 * MiB, 1 * MiB, &plan));
        CHECK_EQ_U64(plan.njobs, 3);
        CHECK(plan.jobs[0].direct && plan.jobs[1].direct && plan.jobs[2].direct);
        CHECK_EQ_U64(plan.jobs[2].len, 4 * MiB);
        check_cover(p, 1, &plan, 8 * MiB);
        s3d_rplan_free(&plan);
    }
    /* 100 adjacent small tensors coalesce into staged jobs of at most 8 MiB. */
    {
        struct s3d_rpiece p[64];
        for (size_t i = 0; i < 64; i++)
            p[i] = (struct s3d_rpiece){.shard = 0,
                                       .obj_off = 64 + i * 300000,
                                       .len = 300000,
                                       .dst = host,
                                       .device = -1,
                                       .dest = 63 - i};
        CHECK_OK(s3d_rplan_build(p, 64, 8 * MiB, 1 * MiB, &plan));
        /* 64 * 300000 = 19.2 MB -> 3 jobs */
        CHECK_EQ_U64(plan.njobs, 3);
        for (size_t j = 0; j < plan.njobs; j++)
            CHECK(!plan.jobs[j].direct);
        check_cover(p, 64, &plan, 8 * MiB);
        s3d_rplan_free(&plan);
    }
    /* Gaps are never read: two pieces with a hole between them are two jobs. */
    {
        struct s3d_rpiece p[2] = {
            {.shard = 0, .obj_off = 0, .len = 100, .dst = host, .device = -1, .dest = 0},
            {.shard = 0, .obj_off = 101, .len = 100, .dst = host, .device = -1, .dest = 1}};
        CHECK_OK(s3d_rplan_build(p, 2, 8 * MiB, 1 * MiB, &plan));
        CHECK_EQ_U64(plan.njobs, 2);
        CHECK_EQ_U64(plan.jobs[0].len + plan.jobs[1].len, 200);
        check_cover(p, 2, &plan, 8 * MiB);
        s3d_rplan_free(&plan);
    }
    /* Adjacent pieces in different shards are not joined. */
    {
        struct s3d_rpiece p[2] = {
            {.shard = 1, .obj_off = 100, .len = 100, .dst = host, .device = -1, .dest = 0},
            {.shard = 0, .obj_off = 0, .len = 100, .dst = host, .device = -1, .dest = 1}};
        CHECK_OK(s3d_rplan_build(p, 2, 8 * MiB, 1 * MiB, &plan));
        CHECK_EQ_U64(plan.njobs, 2);
        CHECK(p[0].shard == 0); /* sorted */
        check_cover(p, 2, &plan, 8 * MiB);
        s3d_rplan_free(&plan);
    }
    /* Device pieces are always staged, even big ones, and may share a job with host ones. */
    {
        struct s3d_rpiece p[3] = {
            {.shard = 0, .obj_off = 0, .len = 1000, .dst = host, .device = -1, .dest = 0},
            {.shard = 0, .obj_off = 1000, .len = 10 * MiB, .dst = host, .device = 0, .dest = 1},
            {.shard = 0,
             .obj_off = 1000 + 10 * MiB,
             .len = 2 * MiB,
             .dst = host,
             .device = -1,
             .dest = 2}};
        CHECK_OK(s3d_rplan_build(p, 3, 8 * MiB, 1 * MiB, &plan));
        CHECK(!plan.jobs[0].direct);
        CHECK_EQ_U64(plan.jobs[0].nseg, 2);      /* host 1000 B + device up to 8 MiB */
        CHECK(plan.jobs[plan.njobs - 1].direct); /* the 2 MiB host piece */
        check_cover(p, 3, &plan, 8 * MiB);
        s3d_rplan_free(&plan);
    }
    /* Start order: the jobs of at least half the longest's bytes first, then the others,
     * each group in plan order; every job once. Small tensors (one staged job of 3 MB) come
     * before a 20 MiB one (direct 8, 8 and 4 MiB) in the object, and one more small tensor
     * after it. */
    {
        struct s3d_rpiece p[12];
        size_t order[8];
        for (size_t i = 0; i < 10; i++)
            p[i] = (struct s3d_rpiece){.shard = 0,
                                       .obj_off = i * 300000,
                                       .len = 300000,
                                       .dst = host,
                                       .device = -1,
                                       .dest = i};
        p[10] = (struct s3d_rpiece){
            .shard = 0, .obj_off = 3000000, .len = 20 * MiB, .dst = host, .device = -1, .dest = 10};
        p[11] = (struct s3d_rpiece){.shard = 0,
                                    .obj_off = 3000000 + 20 * MiB + 64,
                                    .len = 1000,
                                    .dst = host,
                                    .device = -1,
                                    .dest = 11};
        CHECK_OK(s3d_rplan_build(p, 12, 8 * MiB, 1 * MiB, &plan));
        CHECK_EQ_U64(plan.njobs, 5);
        CHECK_EQ_U64(plan.jobs[0].len, 3000000);
        CHECK_EQ_U64(plan.jobs[3].len, 4 * MiB);
        memset(order, 0xff, sizeof(order));
        s3d_rplan_start_order(&plan, order);
        CHECK_EQ_U64(order[0], 1);          /* 8 MiB */
        CHECK_EQ_U64(order[1], 2);          /* 8 MiB */
        CHECK_EQ_U64(order[2], 3);          /* 4 MiB: half the longest */
        CHECK_EQ_U64(order[3], 0);          /* 3 MB */
        CHECK_EQ_U64(order[4], 4);          /* 1000 B */
        CHECK_EQ_U64(order[5], (size_t)-1); /* nothing written past njobs */
        check_cover(p, 12, &plan, 8 * MiB);
        s3d_rplan_free(&plan);
        /* Equal jobs keep the plan's order. */
        for (size_t i = 0; i < 3; i++)
            p[i] = (struct s3d_rpiece){.shard = (uint32_t)(2 - i),
                                       .obj_off = 0,
                                       .len = 2 * MiB,
                                       .dst = host,
                                       .device = -1,
                                       .dest = i};
        CHECK_OK(s3d_rplan_build(p, 3, 8 * MiB, 1 * MiB, &plan));
        s3d_rplan_start_order(&plan, order);
        for (size_t j = 0; j < 3; j++)
            CHECK(order[j] == j && plan.jobs[j].shard == j);
        s3d_rplan_free(&plan);
    }
    /* Errors. */
    {
        struct s3d_rpiece p[1] = {{.len = 0}};
        CHECK_ERR(s3d_rplan_build(p, 1, 8 * MiB, 1 * MiB, &plan), S3D_EINVAL);
        CHECK_ERR(s3d_rplan_build(p, 0, 0, 1 * MiB, &plan), S3D_EINVAL);
        CHECK_OK(s3d_rplan_build(p, 0, 8 * MiB, 1 * MiB, &plan));
        CHECK_EQ_U64(plan.njobs, 0);
        s3d_rplan_free(&plan);
    }
    printf("ok\n");
    return 0;
}
