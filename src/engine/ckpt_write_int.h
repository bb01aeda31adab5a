/* ckpt_write_int.h - the state of one object being written, shared by ckpt_write.c (the
 * writer, full saves) and ckpt_write_delta.c (incremental saves: planned parts, copies from
 * the base) (internal). One writer belongs to one thread. */
#ifndef S3D_ENGINE_CKPT_WRITE_INT_H
#define S3D_ENGINE_CKPT_WRITE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/compiler.h"
#include "device/device.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_delta.h"
#include "engine/delta_plan.h"
#include "engine/xfer.h"
#include "s3direct/checkpoint.h"

struct s3d_file_writer;

/* The CRC of one piece of a tensor, in object order. */
struct crcrec {
    size_t tensor;
    uint64_t len;
    uint32_t crc;
};

struct part {
    uint32_t number;
    uint64_t length;
    struct iovec *iov;
    int iovcnt;
    /* The CRC-32C of each iov entry, computed once where its bytes are first read (a host
     * piece when the part is built, a device piece when its copy is done) and used for both
     * the tensor's CRC and the part's (s3d_put_part.crc32c), so the engine never reads the
     * bytes again for it. icrc_known[i] is 0 for the header's bytes, which are patched before
     * part 1 goes: their CRC is computed at hand-out. */
    uint32_t *icrc;
    unsigned char *icrc_known;
    void **chunks; /* staging chunks holding this part's device bytes */
    size_t nchunks;
    struct s3d_event *ev; /* completes when the device-to-host copies are done */
    int ev_ordinal;
    /* Device pieces whose CRC is computed once the copy is done: (record, host address). */
    struct pending_crc {
        size_t rec; /* SIZE_MAX: no tensor record (the save stores no CRCs) */
        int iov;
        const char *host;
    } * pend;
    size_t npend;
};

struct shard_writer {
    struct s3d_client *c;
    struct s3d_device *dev;
    struct s3d_pool *pool; /* NULL when no tensor is on a device */
    const struct s3d_write_options *o;
    int with_crc;
    struct s3d_stream_set streams; /* each waits for the caller's stream once */

    struct s3d_wsrc *srcs;
    size_t nsrcs;
    const struct s3d_tensor_src *t; /* the caller's tensors (ntensors) */
    size_t ntensors;
    uint64_t total; /* object bytes */
    uint64_t part_size;
    uint32_t nparts;

    /* producer cursor: the next byte of the object to put in a part */
    size_t cur_src;
    uint64_t cur_off;

    struct crcrec *recs;
    size_t nrecs, cap_recs;
    uint32_t *crcs; /* per tensor, after combine */

    /* multipart state */
    uint32_t next_number; /* next part to build */
    struct part *parts;   /* indexed by number - 1 */
    struct part *pending; /* built, copies in flight */
    /* Part 1 goes last, but holds no chunk meanwhile: once its copies are done and summed it
     * is released, keeping the CRC of each iov entry (part1_crc, part1_iovcnt), and built
     * again from the sources when every other part has gone (part1_rebuilt; replay: the
     * build records no tensor CRC), its CRCs checked against the first pass. */
    int part1_held;
    int part1_rebuilt;
    int part1_sent;
    int replay;
    uint32_t *part1_crc;
    int part1_iovcnt;

    /* Incremental (planned) uploads: every CRC is known before the first part (crc_known),
     * and the parts follow plan, sent or copied from the base (ckpt_delta.h). */
    int crc_known;
    struct s3d_ckpt_base *base;
    struct s3d_delta_io io;
    struct s3d_dpart *plan;
    size_t nplan, next_plan;
    uint32_t *plan_crc; /* per copied part: the CRC-32C of the bytes expected there */
    size_t *resend;     /* parts whose copy was dropped, to send (a queue) */
    size_t n_resend;
    struct s3d_md5_ahead *ahead; /* MD5s of copied parts, computed ahead (a thread) */
    char **copy_source;          /* per base shard: its x-amz-copy-source, made on first use */
};

struct mp_ctx {
    struct shard_writer *w;
    char *header;
    const size_t *crc_pos;
    const char *key; /* bucket/key, for messages */
};

/* Gives p's chunks back to the pool and frees its arrays; p is zeroed. */
void s3d_cw_part_release(struct shard_writer *w, struct part *p);
/* Builds the part covering the next len bytes at the cursor (see ckpt_write.c): 0 when
 * built, 1 when no chunk is free (retry later), < 0 on error. */
S3D_NODISCARD int s3d_cw_part_build(struct shard_writer *w, struct part *p, uint64_t len,
                                    int blocking);
/* 1 when the part's device copies are done, 0 while pending, < 0 on error. */
S3D_NODISCARD int s3d_cw_part_ready(struct shard_writer *w, struct part *p, int blocking);
/* Hands the built part p out to the engine as part number; S3D_FEED_OK. */
int s3d_cw_part_hand_out(struct part *p, uint32_t number, struct s3d_put_part *out);
/* The release hook of every multipart upload of the writer. */
int s3d_cw_mp_release(void *ctx, const struct s3d_put_part *part);

/* ckpt_write_delta.c: the tensors t[0..n) in the order an incremental save lays them out,
 * into *out (malloc'ed, n entries): the changed ones first, in the caller's order, then those
 * the base holds unchanged in the base's order (by shard, then offset), so that they make
 * long copied ranges, and small changed tensors need no bytes borrowed from their unchanged
 * neighbours to reach S3's part size. Computes every CRC (w->crcs, in that order; w->io's
 * device, pool, streams and cancel are used). */
S3D_NODISCARD int s3d_cw_delta_order(struct shard_writer *w, const struct s3d_tensor_src *t,
                                     size_t n, struct s3d_tensor_src **out);
/* ckpt_write_delta.c: with a base, every CRC first (unless known), the matching tensors, the plan
 * (w->plan NULL: nothing to copy, a full save with the CRCs known); the header is patched
 * and sealed. */
S3D_NODISCARD int s3d_cw_delta_prepare(struct shard_writer *w, const struct s3d_loc *loc,
                                       char *header, const size_t *crc_pos,
                                       const struct s3d_tensor_src *t);
/* The planned multipart upload of w (w->plan set), with the put options po. */
S3D_NODISCARD int s3d_cw_write_s3_planned(struct shard_writer *w, const struct s3d_loc *loc,
                                          const struct s3d_put_options *po);
/* The planned write into the open file writer fw (the header is the caller's, written
 * last). */
S3D_NODISCARD int s3d_cw_write_file_planned(struct shard_writer *w, struct s3d_file_writer *fw,
                                            const struct s3d_loc *loc);

#endif
