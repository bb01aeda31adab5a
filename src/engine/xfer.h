/* xfer.h - the parallel transfer engine (internal): many ranged GETs, or the parts of one
 * multipart upload, driven with bounded concurrency on the calling thread over the client's
 * reused connections. The public byte transfers (transfer.h) and the checkpoint pipeline
 * (checkpoint.h) are both built on these two drivers (xfer.c); the GET conveniences are in
 * xfer_get.c, the lifecycle around the parts of a multipart upload in multipart.c.
 *
 * Threads: every hook runs on the thread that called the driver, never concurrently with
 * another hook of the same call. Hooks return 0 to go on, or a negative S3D_E* code (after
 * s3d_fail) to stop the whole transfer with that error. */
#ifndef S3D_ENGINE_XFER_H
#define S3D_ENGINE_XFER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "s3direct/client.h"
#include "s3direct/object.h"
#include "common/compiler.h"
#include "common/crc32c.h"

struct s3d_op_sums;
struct s3d_s3ctx;
struct s3d_s3_op;
struct s3d_http_resp;

/* What a feed hook (prepare, next) returns when it does not fail. */
enum s3d_feed_result {
    S3D_FEED_OK = 0,      /* the job's dst / the part is set */
    S3D_FEED_NOT_YET = 1, /* nothing to hand out now: the engine calls poll and asks again */
    S3D_FEED_DONE = 2,    /* next only: every part has been handed out */
};

/* What a poll hook returns when it does not fail. */
enum s3d_poll_result {
    S3D_POLL_IDLE = 0, /* no asynchronous work of the caller's pending */
    S3D_POLL_BUSY = 1, /* work pending: poll again soon */
};

/* ---- downloads ------------------------------------------------------------------------- */

struct s3d_get_job {
    /* Set by the caller before the run. */
    const char *bucket;
    const char *key;
    uint64_t offset; /* first byte of the range in the object */
    uint64_t length; /* bytes; > 0 */
    void *user;      /* the caller's, untouched */
    /* The ETag of the object version this download started on (NULL or "" = none): sent as
     * If-Match with every attempt, so that ranges of a replaced object fail with
     * S3D_ECHANGED instead of mixing two versions. */
    const char *if_match;
    /* The size of that version (0 = not known). Every response must show the ETag if_match
     * and this size (its Content-Range), else the job fails with S3D_ECHANGED: a relay or
     * server that ignores If-Match would otherwise hand back another version's bytes. */
    uint64_t object_size;
    /* Non-NULL for the first range of a download, of an object whose size is not known yet:
     * the response may end early (at the object's end), and *first receives what it tells of
     * the object (s3d_op_first_info); if_match is then pinned to its ETag, so that an attempt
     * resumed after a broken connection gets the same version (and object_size to its size).
     * length is cut to the object. */
    struct s3d_object_info *first;
    /* With first (may be NULL): receives what that response tells of the checksum s3direct
     * stored with the object (s3/ops.h, s3d_op_sums). */
    struct s3d_op_sums *first_sums;
    /* Set by the prepare hook: the host memory that receives [offset, offset + length). */
    void *dst;
    /* Or, set by the caller or the prepare hook instead of dst (NULL): the file that receives
     * the range, written by pwrite as the bytes arrive at file offset fd_off + (byte - offset):
     * to_fd set, fd the descriptor. A failed write fails the job (not retried). */
    int to_fd;
    int fd;
    uint64_t fd_off;
    /* Set by the caller: crc sums the bytes as they arrive. */
    int sum;
    /* Engine state; the caller zero-initializes. */
    uint64_t received; /* bytes written to dst so far (a retry resumes from here) */
    uint32_t crc;      /* with sum: CRC-32C of the bytes received, whole when done is called */
    int state;
    int pinned; /* first: *first is filled */
};

struct s3d_get_hooks {
    /* Called once per job, in array order, when a connection is free for it: set job->dst (or
     * its file) and return S3D_FEED_OK; or S3D_FEED_NOT_YET (no staging buffer free): the engine
     * calls poll and asks again later, without starting later jobs first. May be NULL when every
     * job->dst is set before the run. */
    int (*prepare)(void *ctx, struct s3d_get_job *job);
    /* Called once per job when all its bytes are in job->dst. May be NULL. */
    int (*done)(void *ctx, struct s3d_get_job *job);
    /* Called on every turn of the event loop (at least every few milliseconds while anything is
     * outstanding, and repeatedly after the last job is done until it returns 0): lets the
     * caller finish asynchronous work (GPU copies) and free staging buffers. Returns
     * S3D_POLL_BUSY while it still has work pending, S3D_POLL_IDLE when idle. May be NULL. */
    int (*poll)(void *ctx);
    void *ctx;
};

/* Runs every job with at most max_concurrency ranged GETs in flight (0 = the client's).
 * Transient failures are retried per job (resuming at offset + received), bounded by the
 * client's attempts and deadline. A server that sends more or fewer bytes than asked is an
 * S3D_EPROTO error. progress is reported in bytes over the sum of job lengths. */
S3D_NODISCARD int s3d_xfer_get(struct s3d_client *c, struct s3d_get_job *jobs, size_t n,
                               const struct s3d_get_hooks *hooks, uint32_t max_concurrency,
                               s3d_progress_fn progress, void *progress_user,
                               struct s3d_cancel *cancel);

/* The GET conveniences below are in xfer_get.c. */

/* Points the next attempt of job j (op, a GetObject) at what is left of its range: dst +
 * received, or its file at fd_off + received, and seeds the sum with the bytes kept. */
void s3d_xfer_job_sink(struct s3d_s3_op *op, const struct s3d_get_job *j);
/* Keeps the bytes of a broken attempt of j (r, its response, judged of j's version): the next
 * attempt resumes after them, and j's sum covers exactly them. */
void s3d_xfer_job_keep(struct s3d_get_job *j, const struct s3d_http_resp *r);

/* Cuts [offset, offset + len) of the object into ranges of part bytes (the last one shorter),
 * each a job pinned to if_match and object_size (as s3d_get_job's), dst not set: the
 * calloc'ed array (the caller frees it) into *out and its length into *n_out (NULL and 0 when
 * len is 0). S3D_ENOMEM or S3D_ETOOBIG (recorded). */
S3D_NODISCARD int s3d_xfer_make_jobs(const char *bucket, const char *key, const char *if_match,
                                     uint64_t object_size, uint64_t offset, uint64_t len,
                                     uint64_t part, struct s3d_get_job **out, size_t *n_out);

/* How much the first GET of a download asks for, when the size is not known yet: a checkpoint
 * header (most fit), or the head of an object whose other ranges all wait for this answer to
 * tell its size and ETag. A whole part there would be most of a download's time on a slow
 * connection (8 MiB at 12 MB/s: 0.7 s alone before the other ranges start). */
#define S3D_FIRST_RANGE (256u << 10)

/* The first request of a download: a ranged GET of [offset, offset + want) into dst (want > 0
 * bytes writable), retried and resumed like any job, that also tells the object's size, ETag,
 * type, date and checksum in *info, as a HEAD would, without its round trip; a refusal carries
 * the S3 <Code> (a HEAD's error has no body). *got = bytes received: want, or fewer at the end
 * of the object. An offset at the end (or an empty object, which answers every range with
 * 416) gets *got = 0 and the fields from a HEAD; past the end is S3D_ERANGE. if_match (NULL
 * = none): a version the caller already knows, asked for from the first request on. sums
 * (NULL = not wanted): the object's own checksum fields of that response (s3d_op_sums; zeroed
 * when a HEAD answered instead). */
S3D_NODISCARD int s3d_xfer_get_first(struct s3d_client *c, const char *bucket, const char *key,
                                     uint64_t offset, uint64_t want, void *dst, uint64_t *got,
                                     struct s3d_object_info *info, struct s3d_op_sums *sums,
                                     const char *if_match, struct s3d_cancel *cancel);

/* Downloads [offset, offset + len) of the object into dst with the client's part size and
 * concurrency, every range pinned to if_match (the ETag a first response gave; NULL or "" =
 * none) and object_size (the size it gave; 0 = not known), as a job's. For readers that
 * already know the object (checkpoint headers, index files). */
S3D_NODISCARD int s3d_xfer_get_buffer(struct s3d_client *c, const char *bucket, const char *key,
                                      const char *if_match, uint64_t object_size, uint64_t offset,
                                      uint64_t len, void *dst);

/* ---- uploads --------------------------------------------------------------------------- */

/* One part of a multipart upload, as the producer hands it to the engine. */
struct s3d_put_part {
    uint32_t part_number;    /* 1 .. 10000, each number exactly once */
    const struct iovec *iov; /* the part's bytes, in order; must stay valid until released */
    int iovcnt;
    uint64_t length; /* sum of the iov lengths; >= 5 MiB except for the last part */
    void *user;      /* the producer's, handed back in release */
    /* A part the server copies (UploadPartCopy) instead of one sent: copy_source non-NULL
     * (s3d_op_copy_source), iov NULL, the bytes [copy_offset, copy_offset + length) of it,
     * guarded with copy_if_match (NULL = none). copy_crc is the CRC-32C of the bytes the
     * producer expects there: the server's ChecksumCRC32C must match it, and it counts in the
     * object's CRC-32C (unless s3d_put_options' object_crc32c gives the whole object's
     * instead). The answer is judged by the check_copy hook. */
    const char *copy_source;
    uint64_t copy_offset;
    const char *copy_if_match;
    uint32_t copy_crc;
    /* The CRC-32C of the part's bytes when the producer computed it while reading them
     * (has_crc32c 1): the engine then does not read the bytes again for the part's checksum
     * header. 0: the engine computes it. */
    int has_crc32c;
    uint32_t crc32c;
    /* A part read from a regular file instead of memory (from_fd 1, iov NULL): the bytes
     * [fd_offset, fd_offset + length) of fd, open until the part is released. The engine
     * never holds them: it reads them once in small chunks for the part's checksums (its
     * CRC-32C, and the SHA-256 of a signed payload, in one pass), then again straight into
     * curl's buffer as they are sent (xfer_body.h); or, where the server does not check a
     * body's CRC-32C and AUTO signs (s3d_xfer_part_body), once, as they are sent in signed
     * chunks. Bytes that no longer match that CRC-32C when sent (the file changed), or a file
     * that ends early, fail the part with S3D_EIO: the object never gets other bytes than
     * its checksums describe (in signed chunks, the producer checks the file after the last
     * part: api_upload.c). */
    int from_fd;
    /* from_fd: the range may be read once, as it is sent in signed chunks, where the server
     * does not check CRC-32C: the producer finds a change of the file without a second read
     * (api_upload.c: a file last modified well before the upload, checked by fstat). 0: the
     * two passes, whose checksums catch any change. */
    int read_once;
    int fd;
    uint64_t fd_offset;
};

struct s3d_put_hooks {
    /* Asked for the next part whenever a connection is free. Fill *part and return S3D_FEED_OK;
     * S3D_FEED_NOT_YET (e.g. a device-to-host copy still running: the engine calls poll and
     * asks again); S3D_FEED_DONE when every part has been handed out. Parts may be handed out in
     * any order of part_number (a producer may hold part 1 back to the end). */
    int (*next)(void *ctx, struct s3d_put_part *part);
    /* Called once per part after the server accepted it: its memory may be reused. */
    int (*release)(void *ctx, const struct s3d_put_part *part);
    /* As in s3d_get_hooks. May be NULL. */
    int (*poll)(void *ctx);
    /* Judges the answer to a copy part (copy_source set): etag and crc32c (base64, "" when
     * the server sent none) of the copied part, or etag NULL when the server refused the
     * copy (why: its error). Returns 0 when the part is proved to hold the expected bytes
     * (it is kept), 1 to drop it: the engine forgets the part number and asks next() again,
     * which hands the same number out as a sent part (S3 keeps the last part uploaded under
     * a number); < 0 fails the upload. Required when copy parts are handed out. */
    int (*check_copy)(void *ctx, const struct s3d_put_part *part, const char *etag,
                      const char *crc32c, const char *why);
    void *ctx;
};

struct s3d_put_options {
    const char *content_type; /* NULL = application/octet-stream */
    uint32_t max_concurrency; /* 0 = the client's */
    uint64_t total_hint;      /* for progress; 0 if unknown */
    s3d_progress_fn progress;
    void *progress_user;
    struct s3d_cancel *cancel;
    /* Multipart: the base64 CRC32C the parts must combine to (NULL or "" = none), a copy's
     * source checksum: checked before CompleteMultipartUpload, S3D_ECHECKSUM (and the upload
     * aborted) when it differs. */
    const char *expect_crc32c;
    /* Multipart, a server-side copy whose parts' CRC-32Cs the producer does not know (it never
     * read their bytes) but whose whole object's CRC-32C it does (the source's, base64): NULL
     * = not such an upload (the object's CRC is the parts' combined, as always). Non-NULL: the
     * copy parts' copy_crc is not used (Complete lists the CRC the server answered the copy
     * with, or none); expect_crc32c is not checked; the completed object's CRC-32C tag
     * (own_checksum.h) holds this value, and "" (the source's CRC is not known) sets no tag. */
    const char *object_crc32c;
    /* Multipart: the ETag the completed object must have (NULL or "" = none; a server-side
     * copy's, computed from its source's): before CompleteMultipartUpload the parts' ETags
     * must combine to it (s3d_op_multipart_etag), else S3D_ECHANGED and the upload is
     * aborted; after it, Complete's answer must show it when it carries one, else
     * S3D_ECHANGED (the object is in place, untagged). */
    const char *expect_etag;
    /* Multipart, with expect_etag: NULL, or 80 bytes that receive the ETag the parts made
     * when it was not expect_etag and the upload was aborted, none left open (untouched
     * otherwise): a producer that guessed the parts' boundaries (api_copy.c) learns that the
     * guess failed, and that it may copy another way. */
    char *made_etag;
    /* Single PUT only, a conditional write: if_match (NULL or "" = none) is sent as If-Match
     * exactly as given, if_none_match non-zero sends If-None-Match: * (no object may be in
     * place). A server holding another object answers 412: S3D_ECHANGED. A retried attempt
     * whose first one landed unanswered meets 412 too (its own object is in place): the
     * caller tells the two apart by reading what is in place. */
    const char *if_match;
    int if_none_match;
    /* Single PUT of a part from a file (s3d_xfer_put_single_part, from_fd): NULL, or called
     * with body_ctx once the body's checksums are computed, before any byte is sent; < 0 (an
     * S3D_E* code, recorded) stops the upload there. The caller checks the file is unchanged. */
    int (*body_read)(void *body_ctx);
    void *body_ctx;
};

/* Uploads one object as a multipart upload fed by hooks: CreateMultipartUpload, UploadPart for
 * each part (retried alone on transient failure, a CRC32C of each part sent as
 * x-amz-checksum-crc32c), CompleteMultipartUpload with the parts in number order. On any
 * failure or cancellation the upload is aborted, so the key keeps its previous object. Once
 * complete, the object's CRC-32C (the parts' combined) is stored as its S3D_OP_CRC_TAG tag;
 * a server that refuses the tag leaves the object without it (logged at debug level). */
S3D_NODISCARD int s3d_xfer_put_multipart(struct s3d_client *c, const char *bucket, const char *key,
                                         const struct s3d_put_hooks *hooks,
                                         const struct s3d_put_options *o);

/* Uploads one object with a single PutObject from an iovec (any size up to 5 GiB), its
 * CRC-32C sent as x-amz-checksum-crc32c and stored as user metadata (S3D_OP_CRC_META). */
S3D_NODISCARD int s3d_xfer_put_single(struct s3d_client *c, const char *bucket, const char *key,
                                      const struct iovec *iov, int iovcnt,
                                      const struct s3d_put_options *o);

/* The same from one part's bytes: an iovec, or a range of a file (from_fd); part_number and
 * user are not used. */
S3D_NODISCARD int s3d_xfer_put_single_part(struct s3d_client *c, const char *bucket,
                                           const char *key, const struct s3d_put_part *p,
                                           const struct s3d_put_options *o);

/* ---- the body of one upload request (xfer_body.c) ------------------------------------- */

/* The chunk a part from a file is read in for its checksums: one buffer per engine, reused. */
#define S3D_XFER_BODY_CHUNK (256u << 10)

/* Sets the body of op (built already; the caller adds its x-amz-checksum-crc32c header
 * after) to p's bytes, and *crc to their CRC-32C (p's own when has_crc32c). An iovec is summed in
 * place. A file range is read once here in chunks of *scratch (S3D_XFER_BODY_CHUNK bytes, allocated
 * on first use; the caller frees it) for its CRC-32C and, when s3 signs the body, its SHA-256
 * (op->payload_hash) in the same pass; curl then reads it from the file as it sends it, checking
 * the CRC-32C again unless the signature guards the bytes already. Returns 0, or S3D_EIO (a read
 * failed, or the file ended inside the part) / S3D_ENOMEM, recorded. */
S3D_NODISCARD int s3d_xfer_body(struct s3d_s3ctx *s3, struct s3d_s3_op *op,
                                const struct s3d_put_part *p, uint32_t *crc,
                                unsigned char **scratch);

/* The body of an UploadPart (op built already): as s3d_xfer_body, with *crc in base64 into
 * crc_b64 (which must outlive op) and sent as x-amz-checksum-crc32c; or, a part from a file
 * where the server was shown not to check that header (payload_signing AUTO, Ceph RGW 16), in
 * signed chunks read once as they are sent (s3/http.h, s3d_http_chunked): no header then, and
 * *crc is known only once the part is sent (s3d_xfer_part_sent). 0, or as s3d_xfer_body. */
S3D_NODISCARD int s3d_xfer_part_body(struct s3d_s3ctx *s3, struct s3d_s3_op *op,
                                     const struct s3d_put_part *p, uint32_t *crc,
                                     char crc_b64[S3D_CRC32C_B64_LEN], unsigned char **scratch);

/* After the server accepted op (built by s3d_xfer_part_body): a part sent in signed chunks
 * has its CRC-32C, summed as it was read, into *crc and crc_b64; others are left as they
 * are. 0, or S3D_EPROTO (recorded) when the body was not sent whole. */
S3D_NODISCARD int s3d_xfer_part_sent(const struct s3d_s3_op *op, uint32_t *crc,
                                     char crc_b64[S3D_CRC32C_B64_LEN]);

#endif
