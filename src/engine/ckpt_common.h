/* ckpt_common.h - pieces shared by the checkpoint reader and writer (internal). */
#ifndef S3D_ENGINE_CKPT_COMMON_H
#define S3D_ENGINE_CKPT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "s3direct/client.h"
#include "common/compiler.h"

#define S3D_BUCKET_CAP 256
#define S3D_KEY_CAP    1100 /* S3 keys are at most 1024 bytes */

/* Where a checkpoint file lives: an S3 object or a local path. */
struct s3d_loc {
    int is_s3;
    char bucket[S3D_BUCKET_CAP];
    char key[S3D_KEY_CAP];
    const char *path; /* the URI as given (for local paths and messages) */
};

/* Classifies uri ("s3://..." or a local path) into *loc; loc->path points into uri.
 * S3D_EURI for a malformed s3:// URI or one without a key, S3D_EINVAL for an empty path. */
S3D_NODISCARD int s3d_loc_parse(const char *uri, struct s3d_loc *loc);

/* Reads the whole small object or file at loc (at most cap bytes, else S3D_EFMT_INDEX) into
 * *out (malloc'ed, NUL-terminated; the caller frees it) and its length into *out_len, and,
 * when etag is not NULL, an object's ETag as the server sent it (80 bytes; "" for a file).
 * Used for index files; defined in ckpt_open.c. A missing one is S3D_ENOSUCHKEY (S3) or
 * S3D_ENOENT. */
S3D_NODISCARD int s3d_ckpt_read_small(struct s3d_client *c, const struct s3d_loc *loc, size_t cap,
                                      char **out, size_t *out_len, char *etag);

/* 1 if s ends with suffix. */
int s3d_str_ends_with(const char *s, const char *suffix);

/* Progress of a multi-step operation reported as one running total: each step's callback
 * adds its own done count to base. */
struct s3d_progress_acc {
    s3d_progress_fn fn;
    void *user;
    uint64_t base;
    uint64_t total;
};
/* An s3d_progress_fn whose user is a struct s3d_progress_acc. */
int s3d_progress_acc_cb(void *user, uint64_t done, uint64_t total);

#endif
