/* prefault.h - populating a caller's host memory before bytes land in it.
 *
 * A load into freshly allocated tensors (s3direct.load, torch.empty) writes into pages the
 * kernel has not mapped yet: every 4 KiB page then costs a page fault in the thread that
 * copies the bytes, about half a million faults per 2 GB. MADV_POPULATE_WRITE (Linux 5.14)
 * maps the same pages in one system call, which costs less CPU than the faults it replaces
 * (measured in docs/internals/performance.md). It never changes a byte: pages already mapped
 * keep their contents, new ones are the zeroed pages a write fault would have mapped. */
#ifndef S3D_COMMON_PREFAULT_H
#define S3D_COMMON_PREFAULT_H

#include <stddef.h>

/* Smallest range worth a system call: below it the faults are cheaper than the advice. */
#define S3D_PREFAULT_MIN (256u << 10)

/* Prefaults the whole pages inside [p, p + len) for writing; the partial pages at either end
 * are left alone (they may belong to someone else's memory). Advice only: errors (an older
 * kernel, memory that cannot be populated such as a device mapping) are ignored, and the
 * copy then faults as it always did. A kernel without MADV_POPULATE_WRITE is remembered, so
 * later calls return at once. Thread-safe; p may be NULL when len is 0. Returns the number of
 * bytes advised (0 when nothing was), for tests. */
size_t s3d_prefault_write(void *p, size_t len);

#endif
