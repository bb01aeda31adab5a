/* http_chunked.c - a request body read from a file and sent as aws-chunked in signed chunks
 * (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, sigv4.h): each chunk is read once, straight into curl's
 * upload buffer behind room for its header, hashed (SHA-256, and the running CRC-32C) and
 * signed there, then its header is written in front of it. The file is read once per send,
 * with no buffer of ours but when curl offers less room than a chunk (a staged chunk). */
#include "s3/http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/env.h"
#include "common/error.h"

#define SIG_EXT ";chunk-signature="

/* A whole chunk with its header ("3ffa0;chunk-signature=" SIG CRLF) and CRLF fits the buffer. */
_Static_assert(S3D_HTTP_CHUNK + 5 + sizeof(SIG_EXT) - 1 + 64 + 4 <= S3D_HTTP_CHUNK_BUF,
               "a chunk must fit curl's upload buffer");

/* The bytes of one chunk of n data bytes with its header and trailing CRLF. */
static uint64_t frame_len(uint64_t n)
{
    char hex[20];
    return (uint64_t)snprintf(hex, sizeof(hex), "%llx", (unsigned long long)n) + sizeof(SIG_EXT) -
           1 + 64 + 2 + n + 2;
}

uint64_t s3d_http_chunked_len(uint64_t n)
{
    uint64_t rest = n % S3D_HTTP_CHUNK;
    return n / S3D_HTTP_CHUNK * frame_len(S3D_HTTP_CHUNK) + (rest ? frame_len(rest) : 0) +
           frame_len(0);
}

int s3d_http_chunked_seed(struct s3d_http_chunked *c, const char *sig_headers, const char *secret,
                          const char *region, time_t now)
{
    const char *s = strstr(sig_headers, "Signature=");
    int64_t v = 0;
    if (s == NULL || strlen(s + 10) < 64)
        return s3d_fail(S3D_EINVAL, "SigV4: no signature to seed the chunks with");
    memcpy(c->seed, s + 10, 64);
    c->seed[64] = '\0';
    c->corrupt = S3D_TEST_HOOK_INT("S3D_TEST_CHUNK_CORRUPT", 0, 1, &v) == 1 && v == 1;
    c->stage = S3D_TEST_HOOK_INT("S3D_TEST_CHUNK_STAGE", 0, 1, &v) == 1 && v == 1;
    return s3d_sigv4_chunk_key(secret, region, now, &c->key);
}

void s3d_http_chunked_rewind(struct s3d_http_req *r)
{
    memcpy(r->chunk_prev, r->fdbody->chunked->seed, 65);
    r->chunk_final = 0;
    r->stage_pos = r->stage_len = 0;
    r->sent = 0;
    r->fd_crc = 0;
}

/* Reads n bytes of the body at data offset r->sent into dst: 0, or -1 with fd_err set. */
static int read_data(struct s3d_http_req *r, unsigned char *dst, size_t n)
{
    size_t got = 0;
    if (s3d_http_fd_pread(r, dst, n, &got) == 0)
        return 0;
    r->sent += got; /* where it ended, for the message */
    return -1;
}

/* The next chunk, whole, into dst (room for frame_len of it): its length, or 0 on failure
 * (fd_err set; a signing failure reads as a failed read). */
static size_t next_chunk(struct s3d_http_req *r, unsigned char *dst)
{
    const struct s3d_http_chunked *c = r->fdbody->chunked;
    size_t n = (size_t)S3D_MIN((uint64_t)S3D_HTTP_CHUNK, r->body_len - r->sent);
    char head[128], sha[65], sig[65];
    int hl = snprintf(head, sizeof(head), "%zx" SIG_EXT, n);
    if (read_data(r, dst + hl + 64 + 2, n) < 0)
        return 0;
    if (s3d_sha256_hex(dst + hl + 64 + 2, n, sha) < 0 ||
        s3d_sigv4_chunk_sign(&c->key, r->chunk_prev, sha, sig) < 0) {
        r->fd_err = S3D_HTTP_FD_READ;
        r->fd_errno = ENOMEM;
        return 0;
    }
    r->fd_crc = s3d_crc32c(r->fd_crc, dst + hl + 64 + 2, n);
    if (c->corrupt && r->sent == 0 && n > 0)
        dst[hl + 64 + 2] ^= 0x01; /* after hashing: the server must refuse the chunk */
    memcpy(dst, head, (size_t)hl);
    memcpy(dst + hl, sig, 64);
    memcpy(dst + hl + 64, "\r\n", 2);
    memcpy(dst + hl + 64 + 2 + n, "\r\n", 2);
    memcpy(r->chunk_prev, sig, 65);
    r->sent += n;
    r->chunk_final = n == 0;
    return (size_t)hl + 64 + 2 + n + 2;
}

size_t s3d_http_read_chunked(struct s3d_http_req *r, char *buf, size_t want)
{
    size_t n, frame;
    if (r->stage_pos == r->stage_len) {
        if (r->chunk_final)
            return 0;
        frame = (size_t)frame_len(S3D_MIN((uint64_t)S3D_HTTP_CHUNK, r->body_len - r->sent));
        if (want >= frame && !r->fdbody->chunked->stage) {
            /* The usual case: straight into curl's buffer. */
            n = next_chunk(r, (unsigned char *)buf);
            return n ? n : CURL_READFUNC_ABORT;
        }
        if (r->stage == NULL && (r->stage = malloc(frame_len(S3D_HTTP_CHUNK))) == NULL) {
            r->fd_err = S3D_HTTP_FD_READ;
            r->fd_errno = ENOMEM;
            return CURL_READFUNC_ABORT;
        }
        r->stage_pos = 0;
        r->stage_len = next_chunk(r, r->stage);
        if (r->stage_len == 0)
            return CURL_READFUNC_ABORT;
    }
    n = S3D_MIN(want, r->stage_len - r->stage_pos);
    memcpy(buf, r->stage + r->stage_pos, n);
    r->stage_pos += n;
    return n;
}
