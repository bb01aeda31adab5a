/* test_prefault.c - s3d_prefault_write maps exactly the whole pages inside the range it is
 * given, for writing, and never changes a byte: not the pages already written, not the partial
 * pages at either end (which may be another object's memory), not a read-only mapping. */
#include <sys/mman.h>
#include <unistd.h>

#include "common/prefault.h"
#include "testutil.h"

/* Whether page i of the mapping at m is resident (mincore). */
static int resident(unsigned char *m, size_t page, size_t i)
{
    unsigned char v = 0;
    CHECK(mincore(m + i * page, page, &v) == 0);
    return v & 1;
}

int main(void)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t npages = (4u << 20) / page;
    unsigned char *m =
        mmap(NULL, npages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *ro;
    size_t got;

    CHECK(m != MAP_FAILED);
    /* Pages 2 and 3 hold bytes already (a destination the caller touched). */
    memset(m + 2 * page, 0xab, 2 * page);
    for (size_t i = 0; i < npages; i++)
        CHECK(resident(m, page, i) == (i == 2 || i == 3));

    /* Nothing below the threshold, no NULL, no range that wraps. */
    CHECK_EQ_U64(s3d_prefault_write(m, S3D_PREFAULT_MIN - 1), 0);
    CHECK_EQ_U64(s3d_prefault_write(NULL, 1u << 30), 0);
    CHECK_EQ_U64(s3d_prefault_write((void *)(UINTPTR_MAX - page), 1u << 30), 0);
    CHECK(!resident(m, page, 0));

    /* An unaligned range from inside page 1 to inside the second-to-last page: the whole pages
     * 2 .. npages-3 are mapped, pages 0, 1 and the last two are left alone. */
    got = s3d_prefault_write(m + page + 1, (npages - 3) * page);
    if (got == 0)
        t_skip("the kernel has no MADV_POPULATE_WRITE (Linux < 5.14)");
    CHECK_EQ_U64(got, (npages - 4) * page);
    for (size_t i = 0; i < npages; i++)
        CHECK(resident(m, page, i) == (i >= 2 && i < npages - 2));
    /* Bytes: what was written is still there, new pages read as zero. */
    for (size_t i = 2 * page; i < 4 * page; i++)
        CHECK(m[i] == 0xab);
    for (size_t i = 4 * page; i < (npages - 2) * page; i++)
        CHECK(m[i] == 0);

    /* A mapping that cannot be written is refused by the kernel: nothing happens, no crash. */
    ro = mmap(NULL, 1u << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(ro != MAP_FAILED);
    CHECK_EQ_U64(s3d_prefault_write(ro, 1u << 20), 0);
    CHECK(ro[0] == 0 && ro[(1u << 20) - 1] == 0);
    munmap(ro, 1u << 20);
    munmap(m, npages * page);
    printf("ok\n");
    return 0;
}
