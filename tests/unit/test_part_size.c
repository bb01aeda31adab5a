/* test_part_size.c - the one part-size rule of multipart uploads (engine/part_size.h), as a
 * table: byte uploads and checkpoint saves both use it; and the guess of another upload's
 * part size from its part count (server-side copies). */
#include "engine/client_impl.h"
#include "engine/part_size.h"
#include "testutil.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define TiB (1ull << 40)

struct row {
    uint64_t wanted, total, want;
};

static const struct row rows[] = {
    /* Unknown total (a stream): the wanted size, at least 5 MiB. */
    {8 * MiB, 0, 8 * MiB},
    {0, 0, 5 * MiB},
    {1, 0, 5 * MiB},
    {5 * MiB - 1, 0, 5 * MiB},
    {5 * MiB, 0, 5 * MiB},
    {5 * MiB + 1, 0, 5 * MiB + 1}, /* not rounded when nothing forces a raise */
    /* A total that fits 10,000 parts of the wanted size keeps it. */
    {8 * MiB, 1, 8 * MiB},
    {8 * MiB, 80000 * MiB, 8 * MiB},                   /* exactly 10,000 parts */
    {5 * MiB + 1, 10000 * (5 * MiB + 1), 5 * MiB + 1}, /* exactly 10,000, not a MiB multiple */
    {1, 50000 * MiB, 5 * MiB},                         /* 10,000 parts of the 5 MiB minimum */
    /* More than 10,000 parts: raised to the next MiB multiple that fits. */
    {8 * MiB, 80000 * MiB + 1, 9 * MiB},
    {5 * MiB, 50000 * MiB + 1, 6 * MiB},
    {8 * MiB, 100 * GiB, 11 * MiB}, /* 10.24 MiB -> 11 MiB */
    {8 * MiB, 5 * TiB, 525 * MiB},  /* S3's largest object: 524.288 MiB -> 525 MiB */
    {64 * MiB, 5 * TiB, 525 * MiB},
    {1 * GiB, 5 * TiB, 1 * GiB}, /* a wanted size above the minimum stays */
};

int main(void)
{
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        uint64_t got = s3d_upload_part_size(r->wanted, r->total);
        if (got != r->want)
            fprintf(stderr, "row %zu: wanted %llu total %llu\n", i, (unsigned long long)r->wanted,
                    (unsigned long long)r->total);
        CHECK_EQ_U64(got, r->want);
        /* The invariants every row must keep. */
        CHECK(got >= S3D_MIN_PART_SIZE);
        CHECK(got >= r->wanted);
        CHECK((r->total + got - 1) / got <= S3D_MAX_PARTS);
    }
    /* Download ranges: at least 256 of them, none under 1 MiB, none over the part size. */
    {
        const struct row dl[] = {
            {8 * MiB, 0, 1 * MiB},
            {8 * MiB, 100 * MiB, 1 * MiB},
            {8 * MiB, 512 * MiB, 2 * MiB},
            {8 * MiB, 537 * 1000 * 1000, 2 * MiB + 256 * 1024}, /* the bench's 0.52 GB object */
            {8 * MiB, 2 * GiB, 8 * MiB},
            {8 * MiB, 100 * GiB, 8 * MiB},
            {512 * 1024, 2 * GiB, 512 * 1024}, /* a smaller part size is a cap */
            {0, 4 * GiB, 16 * MiB},
        };
        for (size_t i = 0; i < sizeof(dl) / sizeof(dl[0]); i++) {
            uint64_t got = s3d_download_range_size(dl[i].wanted, dl[i].total);
            if (got != dl[i].want)
                fprintf(stderr, "download row %zu\n", i);
            CHECK_EQ_U64(got, dl[i].want);
        }
    }
    /* Another's upload's part size guessed from its part count (server-side copies). */
    {
        const struct guess {
            uint64_t size;
            uint32_t n;
            uint64_t part_size, want;
        } g[] = {
            {43 * MiB + 77, 6, 8 * MiB, 8 * MiB},     /* the AWS CLI's and s3direct's 8 MiB */
            {31 * MiB, 6, 8 * MiB, 6 * MiB},          /* 6 MiB, the only MiB multiple */
            {40 * MiB + 123457, 7, 8 * MiB, 6 * MiB}, /* fits, but uneven parts fail its check */
            {30 * MiB, 3, 8 * MiB, 0},                /* 10..14 MiB fit: no guess */
            {100 * GiB, 9310, 8 * MiB, 11 * MiB},     /* s3direct's rule, grown for 100 GiB */
            {100 * GiB, 6400, 8 * MiB, 16 * MiB},     /* the AWS CLI's: 8 MiB doubled */
            {1 * GiB, 16, 64 * MiB, 64 * MiB},        /* the client's part_size */
            {1 * GiB, 16, 8 * MiB, 0},                /* 64..68 MiB fit: no guess */
            {40 * MiB, 5, 8 * MiB, 8 * MiB},          /* 8 and 9 MiB fit: the usual first */
            {25 * MiB + 100, 6, 8 * MiB, 5 * MiB},    /* the 5 MiB minimum */
            {10 * MiB, 5, 8 * MiB, 0},                /* parts under 5 MiB: none */
            {5 * TiB, 2, 8 * MiB, 0},                 /* parts over 5 GiB: none */
            {40 * MiB, 1, 8 * MiB, 0},                /* one part: nothing to guess */
            {40 * MiB, 0, 8 * MiB, 0},
        };
        for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
            uint64_t got = s3d_guess_part_size(g[i].size, g[i].n, g[i].part_size);
            if (got != g[i].want)
                fprintf(stderr, "guess row %zu\n", i);
            CHECK_EQ_U64(got, g[i].want);
            if (got != 0)
                CHECK((g[i].size + got - 1) / got == g[i].n);
        }
    }
    printf("ok\n");
    return 0;
}
