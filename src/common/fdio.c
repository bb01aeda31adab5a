/* fdio.c - whole reads and writes on a file descriptor (fdio.h). */
#include "common/fdio.h"

#include <errno.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

/* The most one system call is asked for: far below Linux's 0x7ffff000 and SSIZE_MAX. */
#define FDIO_STEP (1ull << 30)

enum { FDIO_WRITE = 1, FDIO_AT = 2 };

/* The one loop: read or write (FDIO_WRITE), at off or at the file position (FDIO_AT).
 * *done = bytes moved. */
static int fdio_loop(int fd, void *buf, uint64_t len, uint64_t off, int how, uint64_t *done)
{
    *done = 0;
    while (*done < len) {
        size_t step = (size_t)S3D_MIN(len - *done, FDIO_STEP);
        char *p = (char *)buf + *done;
        off_t at = (off_t)(off + *done);
        ssize_t r;
        switch (how) {
        case FDIO_WRITE | FDIO_AT:
            r = pwrite(fd, p, step, at);
            break;
        case FDIO_WRITE:
            r = write(fd, p, step);
            break;
        case FDIO_AT:
            r = pread(fd, p, step, at);
            break;
        default:
            r = read(fd, p, step);
            break;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return (how & FDIO_WRITE) ? -EIO : 0; /* a read's end of input */
        *done += (uint64_t)r;
    }
    return 0;
}

int s3d_read_full(int fd, void *buf, uint64_t len, uint64_t *got)
{
    return fdio_loop(fd, buf, len, 0, 0, got);
}

int s3d_pread_full(int fd, void *buf, uint64_t len, uint64_t off, uint64_t *got)
{
    return fdio_loop(fd, buf, len, off, FDIO_AT, got);
}

int s3d_write_full(int fd, const void *buf, uint64_t len)
{
    uint64_t done;
    /* The loop takes a non-const pointer for both directions; a write never stores through it. */
    return fdio_loop(fd, (void *)(uintptr_t)buf, len, 0, FDIO_WRITE, &done);
}

int s3d_pwrite_full(int fd, const void *buf, uint64_t len, uint64_t off)
{
    uint64_t done;
    return fdio_loop(fd, (void *)(uintptr_t)buf, len, off, FDIO_WRITE | FDIO_AT, &done);
}
