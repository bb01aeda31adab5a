/* ckpt_reader.h - the state of an open checkpoint reader (internal), shared by ckpt_open.c
 * (opening: headers, index, name lookup; queries) and ckpt_read.c (the read pipeline). */
#ifndef S3D_ENGINE_CKPT_READER_H
#define S3D_ENGINE_CKPT_READER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/ckpt_common.h"
#include "format/safetensors.h"
#include "s3direct/checkpoint.h"

struct shard {
    char *uri;
    struct s3d_loc loc; /* loc.path points at uri */
    char etag[80];      /* S3: the version opened; every later GET carries If-Match with it */
    /* The version opened, as s3d_reader_shard_version gives it: the ETag for S3; the inode
     * number, size and modification time of the open descriptor for a local file. */
    char version[96];
    uint64_t object_size;
    /* Local file: the descriptor the header was parsed from, kept until s3d_reader_close so
     * that tensor data comes from that same file even when the path is replaced (a rename) or
     * removed after the open; -1 for S3. One descriptor per shard. */
    int fd;
    uint64_t header_bytes; /* 8 + N */
    struct s3d_st_header hdr;
};

struct tref {
    uint32_t shard;
    uint32_t tensor; /* index into shards[shard].hdr.tensors */
};

struct s3d_reader {
    struct s3d_client *client;
    size_t n_shards;
    struct shard *shards;
    size_t n_tensors;
    struct tref *tensors; /* shard order, then data-offset order */
    uint32_t *by_name;    /* indexes into tensors, sorted by name */
};

/* The header entry of reader tensor i (i < r->n_tensors). */
static inline const struct s3d_st_tensor *tref_tensor(const struct s3d_reader *r, size_t i)
{
    return &r->shards[r->tensors[i].shard].hdr.tensors[r->tensors[i].tensor];
}

#endif
