/* fdio.h - whole reads and writes on a file descriptor: the loops that retry EINTR and
 * continue after short transfers, written once for every file, pipe and socket the library
 * reads or writes itself.
 *
 * Each returns 0 or -errno and records nothing: the caller knows what the descriptor is and
 * words the message (s3d_fail with the path and the offset). Reads stop early only at end of
 * input and say how far they got in *got (also on failure); writes either write every byte or
 * fail (a write that moves nothing is -EIO). One system call is asked for at most 1 GiB
 * (Linux moves at most 2 GiB - 4 KiB per call). Thread-safe as the system calls are. */
#ifndef S3D_COMMON_FDIO_H
#define S3D_COMMON_FDIO_H

#include <stdint.h>

#include "common/compiler.h"

/* read(2) until len bytes or end of input; *got = bytes read. */
S3D_NODISCARD int s3d_read_full(int fd, void *buf, uint64_t len, uint64_t *got);
/* pread(2) of [off, off + len) until len bytes or end of file; *got = bytes read. */
S3D_NODISCARD int s3d_pread_full(int fd, void *buf, uint64_t len, uint64_t off, uint64_t *got);
/* write(2) of all len bytes. */
S3D_NODISCARD int s3d_write_full(int fd, const void *buf, uint64_t len);
/* pwrite(2) of all len bytes at off. */
S3D_NODISCARD int s3d_pwrite_full(int fd, const void *buf, uint64_t len, uint64_t off);

#endif
