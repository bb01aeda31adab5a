/* slots.h - a fixed set of equal host buffers ("slots") that bound the memory of a transfer:
 * at most n buffers of size bytes, each malloc'd on first use and reused after it is given
 * back. File downloads, file and stream uploads and copies (api_download.c, api_upload.c,
 * api_upload_stream.c, api_copy.c) each hold one set of max_concurrency slots.
 *
 * Threads: not locked; a set used from two threads is guarded by its owner's lock
 * (api_upload_stream.c: the stream's mu). */
#ifndef S3D_ENGINE_SLOTS_H
#define S3D_ENGINE_SLOTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "engine/xfer.h"
#include "common/compiler.h"

struct s3d_slots {
    char **buf;        /* n; NULL until first used */
    int *busy;         /* n; 1 while handed out */
    struct iovec *iov; /* n; the part being uploaded from each slot (s3d_slot_as_part) */
    size_t n;
    uint64_t size;
};

/* n slots of size bytes (0 is allocated as 1 byte), none allocated yet. S3D_ENOMEM (recorded)
 * on failure; *s may then be given to s3d_slots_free. */
S3D_NODISCARD int s3d_slots_init(struct s3d_slots *s, size_t n, uint64_t size);
/* Frees every buffer; *s is zeroed. NULL members are fine (a failed or zeroed init). */
void s3d_slots_free(struct s3d_slots *s);

/* A free slot, marked busy, or NULL: none free, or out of memory for its first allocation
 * (s3d_slots_free_count > 0 then tells which; nothing is recorded). */
char *s3d_slot_get(struct s3d_slots *s);
/* Gives back the slot whose buffer is p. */
void s3d_slot_put(struct s3d_slots *s, const void *p);
/* How many slots are not handed out. */
size_t s3d_slots_free_count(const struct s3d_slots *s);
/* The index of the slot whose buffer is p (0 when none is). */
size_t s3d_slot_index(const struct s3d_slots *s, const void *p);

/* Fills *part as part number of an upload whose len bytes are in the slot buffer buf: one
 * iovec, the slot's own, and part->user = buf (for s3d_slot_put in the release hook). */
void s3d_slot_as_part(struct s3d_slots *s, char *buf, uint64_t len, uint32_t number,
                      struct s3d_put_part *part);

#endif
