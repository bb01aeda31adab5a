/* api_transfer_int.h - what the public byte transfers of transfer.h share (internal):
 * api_download.c, api_upload.c (buffers, files, pipes), api_copy.c (s3d_copy_object) and
 * api_upload_stream.c (s3d_upload_stream_new) check their arguments and resolve their options
 * the same way. Defined in api_transfer.c. */
#ifndef S3D_ENGINE_API_TRANSFER_INT_H
#define S3D_ENGINE_API_TRANSFER_INT_H

#include <stdint.h>

#include "common/compiler.h"
#include "engine/xfer.h"
#include "s3direct/client.h"
#include "s3direct/transfer.h"

/* The settings a transfer runs with that its call may set (struct s3d_transfer_options). */
struct s3d_settings {
    uint32_t max_conc;
    uint64_t part_size;
};

/* The one precedence of a transfer's settings: each is t's (the call's argument), else the
 * client's, which s3d_client_new already resolved from its options, else the profile's s3
 * section, else the default (client.c). t: a whole struct (s3d_opts_copy), never NULL. Not
 * checked: s3d_topts_resolve bounds them for every byte transfer. */
void s3d_transfer_settings(const struct s3d_client *c, const struct s3d_transfer_options *t,
                           struct s3d_settings *out);

/* A transfer's options with the client's defaults filled in. */
struct topts {
    s3d_progress_fn progress;
    void *progress_user;
    struct s3d_cancel *cancel;
    uint32_t max_conc;
    uint64_t part_size;
    const char *content_type;
    const char *if_match;
};

/* The caller's options (NULL = all defaults) into *o: S3D_EINVAL (recorded) when
 * max_concurrency or part_size is over its limit; a max_concurrency that ulimit -n cannot
 * hold is lowered (s3d_fd_clamp, logged at info level). */
S3D_NODISCARD int s3d_topts_resolve(struct s3d_client *c, const struct s3d_transfer_options *in,
                                    struct topts *o);

/* 0 when c is usable and bucket / key name an object; else S3D_EINVAL or S3D_EURI
 * (recorded). */
S3D_NODISCARD int s3d_topts_check_args(struct s3d_client *c, const char *bucket, const char *key);

/* The engine's upload options from o: total bytes (for progress), content_type (NULL = o's). */
void s3d_topts_put(const struct topts *o, uint64_t total, const char *content_type,
                   struct s3d_put_options *po);

#endif
