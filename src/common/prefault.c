/* prefault.c - MADV_POPULATE_WRITE over the whole pages of a destination (contract in
 * prefault.h). Linux only; elsewhere a no-op. Transparent huge pages (MADV_HUGEPAGE) were
 * measured as well and are not used: on this project's VM, whose balloon reports free 2 MiB
 * blocks back to the host, a huge-page fault cost ten times the 4 KiB faults it replaced
 * (docs/internals/performance.md). */
#include "common/prefault.h"

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 uapi; older libc headers lack it */
#endif

/* Written once under probe_once, read-only afterwards. */
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static uintptr_t page_size; /* 0: no prefaulting (an older kernel, or no page size) */

/* Whether the kernel knows the advice, tried on a page of our own: an EINVAL later then
 * means a mapping that cannot be populated (a device mapping), not an old kernel. */
static void probe(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    void *m;
    if (ps <= 0 || (ps & (ps - 1)) != 0)
        return;
    m = mmap(NULL, (size_t)ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return;
    if (madvise(m, (size_t)ps, MADV_POPULATE_WRITE) == 0)
        page_size = (uintptr_t)ps;
    munmap(m, (size_t)ps);
}

size_t s3d_prefault_write(void *p, size_t len)
{
    uintptr_t a, b;
    if (p == NULL || len < S3D_PREFAULT_MIN || (uintptr_t)p > UINTPTR_MAX - len)
        return 0;
    if (pthread_once(&probe_once, probe) != 0 || page_size == 0)
        return 0;
    a = ((uintptr_t)p + page_size - 1) & ~(page_size - 1);
    b = ((uintptr_t)p + len) & ~(page_size - 1);
    if (b <= a)
        return 0;
    /* Advice: on failure the copy faults the pages in as it always did. */
    if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) != 0)
        return 0;
    return b - a;
}
#else
size_t s3d_prefault_write(void *p, size_t len)
{
    (void)p;
    (void)len;
    return 0;
}
#endif
