/* xfer_body.c - the body of one upload request of the engine (xfer.c): a part's iovec, or its
 * range of a file (s3d_put_part from_fd), and the checksums that go with it (see xfer.h). */
#include "engine/xfer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/fdio.h"
#include "s3/s3ctx.h"
#include "s3/sigv4.h"

/* One pass over [off, off + len) of fd: its CRC-32C into *crc and, with h, its SHA-256. */
static int file_sums(const struct s3d_put_part *p, unsigned char *buf, uint32_t *crc,
                     struct s3d_sha256 *h)
{
    uint64_t done = 0;
    uint32_t c = 0;
    while (done < p->length) {
        uint64_t want = S3D_MIN((uint64_t)S3D_XFER_BODY_CHUNK, p->length - done), k = 0;
        int rc = s3d_pread_full(p->fd, buf, want, p->fd_offset + done, &k);
        if (rc < 0)
            return s3d_fail(S3D_EIO, "part %u: reading the file at byte %" PRIu64 ": %s",
                            p->part_number, p->fd_offset + done + k, strerror(-rc));
        if (k < want)
            return s3d_fail(S3D_EIO,
                            "part %u: file changed while reading (it ended at byte %" PRIu64
                            ", before the part's end at %" PRIu64 ": truncated)",
                            p->part_number, p->fd_offset + done + k, p->fd_offset + p->length);
        c = s3d_crc32c(c, buf, (size_t)k);
        if (h != NULL && (rc = s3d_sha256_update(h, buf, (size_t)k)) < 0)
            return rc;
        done += k;
    }
    *crc = c;
    return 0;
}

/* The op's body is p's range of its file, read as it is sent (s3d_http_fdbody); with
 * check_crc, the bytes sent are summed and must give crc. */
static void body_from_file(struct s3d_s3_op *op, const struct s3d_put_part *p, int check_crc,
                           uint32_t crc)
{
    op->iov = NULL;
    op->iovcnt = 0;
    op->body_len = p->length;
    op->from_file = 1;
    op->body_file.fd = p->fd;
    op->body_file.off = p->fd_offset;
    op->body_file.crc = crc;
    op->body_file.check_crc = check_crc;
}

/* A part from a file sent in signed chunks: nothing read here (http_chunked.c). */
static void chunked_body(struct s3d_s3_op *op, const struct s3d_put_part *p)
{
    snprintf(op->payload_hash, sizeof(op->payload_hash), "%s", S3D_STREAMING_PAYLOAD);
    snprintf(op->decoded_len, sizeof(op->decoded_len), "%" PRIu64, p->length);
    s3d_s3_op_add_header(op, "Content-Encoding", "aws-chunked");
    s3d_s3_op_add_header(op, "x-amz-decoded-content-length", op->decoded_len);
    body_from_file(op, p, 0, 0);
    op->chunked_body = 1;
}

/* A part from a file: its checksums from one pass, then the op reads it from the file. */
static int file_body(struct s3d_s3ctx *s3, struct s3d_s3_op *op, const struct s3d_put_part *p,
                     uint32_t *crc, unsigned char **scratch)
{
    int sign = p->length > 0 && s3d_s3ctx_signs_body(s3, 1), rc;
    struct s3d_sha256 h = {0};
    if (*scratch == NULL && (*scratch = malloc(S3D_XFER_BODY_CHUNK)) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory");
    if (sign && (rc = s3d_sha256_init(&h)) < 0)
        return rc;
    rc = file_sums(p, *scratch, crc, sign ? &h : NULL);
    if (rc == 0 && sign)
        rc = s3d_sha256_final(&h, op->payload_hash);
    s3d_sha256_free(&h);
    if (rc < 0)
        return rc;
    if (!sign)
        snprintf(op->payload_hash, sizeof(op->payload_hash), "%s",
                 p->length > 0 ? S3D_UNSIGNED_PAYLOAD : S3D_EMPTY_SHA256);
    /* A signed body is checked by the server against its hash; the rest here, as sent. */
    body_from_file(op, p, !sign, *crc);
    return 0;
}

int s3d_xfer_body(struct s3d_s3ctx *s3, struct s3d_s3_op *op, const struct s3d_put_part *p,
                  uint32_t *crc, unsigned char **scratch)
{
    uint32_t c = 0;
    int i;
    if (p->from_fd)
        return file_body(s3, op, p, crc, scratch);
    op->iov = p->iov;
    op->iovcnt = p->iovcnt;
    op->body_len = p->length;
    if (p->has_crc32c)
        c = p->crc32c;
    else
        for (i = 0; i < p->iovcnt; i++)
            c = s3d_crc32c(c, p->iov[i].iov_base, p->iov[i].iov_len);
    *crc = c;
    return 0;
}

int s3d_xfer_part_body(struct s3d_s3ctx *s3, struct s3d_s3_op *op, const struct s3d_put_part *p,
                       uint32_t *crc, char crc_b64[S3D_CRC32C_B64_LEN], unsigned char **scratch)
{
    int rc;
    if (p->from_fd && p->read_once && p->length > 0 && s3d_s3ctx_streams_body(s3)) {
        chunked_body(op, p);
        return 0;
    }
    if ((rc = s3d_xfer_body(s3, op, p, crc, scratch)) < 0)
        return rc;
    s3d_crc32c_base64(*crc, crc_b64);
    return s3d_s3_op_add_header(op, "x-amz-checksum-crc32c", crc_b64);
}

int s3d_xfer_part_sent(const struct s3d_s3_op *op, uint32_t *crc, char crc_b64[S3D_CRC32C_B64_LEN])
{
    const struct s3d_http_req *r = &op->req;
    if (!op->chunked_body)
        return 0;
    if (r->sent != op->body_len || !r->chunk_final)
        return s3d_fail(S3D_EPROTO,
                        "%s: the server accepted a part of which %" PRIu64 " of %" PRIu64
                        " bytes were sent",
                        op->operation, r->sent, op->body_len);
    *crc = r->fd_crc;
    s3d_crc32c_base64(*crc, crc_b64);
    return 0;
}

int s3d_xfer_put_single(struct s3d_client *c, const char *bucket, const char *key,
                        const struct iovec *iov, int iovcnt, const struct s3d_put_options *o)
{
    struct s3d_put_part p = {.part_number = 1, .iov = iov, .iovcnt = iovcnt};
    for (int i = 0; i < iovcnt; i++)
        p.length += iov[i].iov_len;
    return s3d_xfer_put_single_part(c, bucket, key, &p, o);
}
