/* test_part_size.c - the one part-size rule of multipart uploads (engine/part_size.h), as a
 * table: byte uploads and checkpoint saves both use it. */
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
    printf("ok\n");
    return 0;
}
