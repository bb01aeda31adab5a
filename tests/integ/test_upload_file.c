/* test_upload_file.c - uploads from a regular file (s3d_upload_from_file), whose parts are
 * ranges of the file that curl reads as it sends them (engine/xfer.h, from_fd), never copies
 * held in memory:
 *   1. a connection cut mid-part (multipart) or mid-body (one PUT) is resent with the exact
 *      bytes, signed or not (the proxy also checks every body against its CRC-32C);
 *   2. a file changed in place after its checksums were computed, while its bytes are being
 *      sent, fails the upload with S3D_EIO "file changed while reading": unsigned, the bytes
 *      sent are checked against the CRC-32C before the last one goes; signed, the server
 *      refuses them. The key keeps its previous object, no upload stays open;
 *   3. a file truncated while its bytes are being sent fails the same way, never with zeros.
 * A slow proxy (tproxy.c, delay_us) keeps the bytes in flight long enough to change the file
 * between the checksum pass and the send. Each runs signed, unsigned and AUTO: on Ceph RGW 16
 * (which does not check a body's CRC-32C) AUTO sends each part of a file in signed chunks,
 * read once as they are sent (s3/http_chunked.c), and a file changed in place is then found
 * by its size, mtime and ctime after the last part, before the completion; and
 *   4. AUTO parts of sizes around the chunk's are stored exactly, the file read once (the
 *      process's rchar grows by the file's size, not twice it); a file modified just before
 *      the upload (within the settling time, where a write in the same timestamp tick would
 *      leave its mtime as it was) keeps the two passes, read twice;
 *   5. a chunk whose signature does not match its bytes (S3D_TEST_CHUNK_CORRUPT) is refused
 *      by the server: it checks the chunk signatures. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "s3/http.h"
#include "testutil.h"
#include "tproxy.h"

#define MiB (1u << 20)

static struct s3d_client *client_at(const char *url, uint64_t part, uint32_t conc, int signing)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = url;
    o.part_size = part;
    o.max_concurrency = conc;
    o.payload_signing = signing;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

/* The file's mtime set to now + t seconds: -60 settles it (api_upload.c: a later write gives
 * it another mtime, so its parts may be read once), 0 is a file written just now. */
static void set_mtime(const char *path, long t)
{
    struct timespec ts[2];
    CHECK(clock_gettime(CLOCK_REALTIME, &ts[0]) == 0);
    ts[0].tv_sec += t;
    ts[1] = ts[0];
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

/* Writes the file, settled (its mtime a minute back), as a file saved earlier would be. */
static void write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, p, n) == (ssize_t)n);
    CHECK(close(fd) == 0);
    set_mtime(path, -60);
}

static int count_upload(void *user, const struct s3d_upload_entry *e)
{
    (void)e;
    (*(int *)user)++;
    return 0;
}

static int count_lines(const char *log, const char *a)
{
    int n = 0;
    for (const char *p = log; (p = strstr(p, a)) != NULL; p++)
        n++;
    return n;
}

/* At the first progress report (bytes already handed to curl: its checksum pass is over), the
 * file is changed far past what was sent: one byte flipped at off, or cut to off bytes. */
struct change {
    const char *path;
    uint64_t off;
    int truncate;
    int done;
    uint64_t sent_then;
};

static int change_cb(void *user, uint64_t done, uint64_t total)
{
    struct change *ch = user;
    (void)total;
    if (ch->done || done == 0)
        return 0;
    ch->done = 1;
    ch->sent_then = done;
    usleep(20000); /* a timestamp tick after the upload's first fstat, at least */
    if (ch->truncate) {
        CHECK(truncate(ch->path, (off_t)ch->off) == 0);
    } else {
        unsigned char b;
        int fd = open(ch->path, O_RDWR);
        CHECK(fd >= 0);
        CHECK(pread(fd, &b, 1, (off_t)ch->off) == 1);
        b ^= 0x01;
        CHECK(pwrite(fd, &b, 1, (off_t)ch->off) == 1);
        CHECK(close(fd) == 0);
    }
    return 0;
}

/* The key still holds want (n bytes), and no multipart upload is open. */
static void check_kept(struct s3d_client *direct, const char *bucket, const char *key,
                       const char *want, size_t n, char *dst)
{
    uint64_t got = 0;
    int uploads = 0;
    memset(dst, 0, n);
    CHECK_OK(s3d_download_to_buffer(direct, bucket, key, 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK_EQ_U64(got, n);
    CHECK(memcmp(dst, want, n) == 0);
    CHECK_OK(s3d_list_uploads(direct, bucket, NULL, count_upload, &uploads));
    CHECK(uploads == 0);
}

/* 1. Cut connections: the part (or the one PUT) is sent again from the file, exactly. */
static void cut_case(struct s3d_client *direct, const char *host, int port, const char *bucket,
                     const char *path, char *src, char *dst, int signing)
{
    struct tproxy_opts po;
    struct tproxy *px;
    struct s3d_client *via;
    const size_t n = 20u * MiB, small = 3u * MiB;

    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.stall_s2c_after = -1;
    po.cut_c2s_after = 8 * MiB; /* inside part 2 of 6 MiB */
    px = tproxy_start(host, port, &po);
    via = client_at(tproxy_url(px), 6u * MiB, 1, signing);
    t_fill_random(src, n, 100 + (uint64_t)signing);
    write_file(path, src, n);
    CHECK_OK(s3d_upload_from_file(via, bucket, "cut-mp", path, NULL));
    CHECK(tproxy_cuts(px) == 1);
    fprintf(stderr, "proxy log (multipart cut, signing %d):\n%s", signing, tproxy_log(px));
    CHECK(count_lines(tproxy_log(px), "partNumber=2&") == 2);
    /* Every part whole, each with its CRC-32C; AUTO: only the probe's, parts in chunks. */
    CHECK(tproxy_crc_checked(px) == (signing == S3D_PAYLOAD_AUTO ? 1 : 4));
    CHECK(tproxy_crc_bad(px) == 0);
    check_kept(direct, bucket, "cut-mp", src, n, dst);
    s3d_client_free(via);
    tproxy_stop(px);

    po.cut_c2s_after = 1 * MiB; /* inside the one PUT of 3 MiB */
    px = tproxy_start(host, port, &po);
    via = client_at(tproxy_url(px), 6u * MiB, 1, signing);
    t_fill_random(src, small, 200 + (uint64_t)signing);
    write_file(path, src, small);
    CHECK_OK(s3d_upload_from_file(via, bucket, "cut-one", path, NULL));
    CHECK(tproxy_cuts(px) == 1);
    CHECK(count_lines(tproxy_log(px), "PUT /") == 2);
    CHECK(tproxy_crc_checked(px) == 1); /* the whole one */
    CHECK(tproxy_crc_bad(px) == 0);
    check_kept(direct, bucket, "cut-one", src, small, dst);
    s3d_client_free(via);
    tproxy_stop(px);
}

/* 2 and 3. The file changed (or truncated) under bytes in flight: S3D_EIO, the key keeps v0. */
static void change_case(struct s3d_client *direct, const char *host, int port, const char *bucket,
                        const char *path, char *src, char *dst, int signing, int multipart,
                        int truncate_it)
{
    struct tproxy_opts po;
    struct tproxy *px;
    struct s3d_client *via;
    struct s3d_transfer_options to;
    struct change ch;
    /* A multipart upload of 3 parts of 8 MiB at 4 requests at once: every part's checksums
     * are computed before the first byte goes (the file is then checked unchanged); or one
     * PUT of 40 MiB. Either way far more than goes out before the first progress report. */
    const size_t n = multipart ? 24u * MiB : 40u * MiB;
    const uint64_t part = multipart ? 8u * MiB : 64u * MiB;

    t_fill_random(dst, n, 300);
    CHECK_OK(s3d_upload_from_buffer(direct, bucket, "changed", dst, n, NULL));
    memcpy(src, dst, n); /* v0, what the key must keep */

    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.cut_c2s_after = po.stall_s2c_after = -1;
    po.delay_us = 3000; /* per 64 KiB: about 20 MB/s a connection */
    px = tproxy_start(host, port, &po);
    via = client_at(tproxy_url(px), part, 4, signing);
    t_fill_random(dst, n, 301);
    write_file(path, dst, n);
    memset(&ch, 0, sizeof(ch));
    ch.path = path;
    ch.truncate = truncate_it;
    ch.off = truncate_it ? n / 2 + 12345 : n - 1;
    memset(&to, 0, sizeof(to));
    to.progress = change_cb;
    to.progress_user = &ch;
    CHECK_ERR(s3d_upload_from_file(via, bucket, "changed", path, &to), S3D_EIO);
    fprintf(stderr, "signing %d, multipart %d, truncate %d: changed after %llu bytes sent: %s\n",
            signing, multipart, truncate_it, (unsigned long long)ch.sent_then,
            s3d_last_error_message());
    CHECK(ch.done && ch.sent_then < n / 4);
    CHECK_MSG_HAS("file changed while reading");
    /* Unsigned, no body went whole with other bytes than its CRC-32C says; signed, one may
     * have (the server refused it: its SHA-256 did not match). */
    CHECK(signing != S3D_PAYLOAD_UNSIGNED || tproxy_crc_bad(px) == 0);
    s3d_client_free(via);
    tproxy_stop(px);
    check_kept(direct, bucket, "changed", src, n, dst);
}

/* Bytes this process has read (read, pread, recv...) so far: /proc/self/io's rchar. */
static uint64_t rchar(void)
{
    char buf[512];
    unsigned long long v = 0;
    int fd = open("/proc/self/io", O_RDONLY);
    ssize_t n;
    CHECK(fd >= 0);
    n = read(fd, buf, sizeof(buf) - 1);
    CHECK(n > 0 && close(fd) == 0);
    buf[n] = '\0';
    CHECK(sscanf(buf, "rchar: %llu", &v) == 1);
    return v;
}

/* 4. AUTO parts in signed chunks: sizes around the chunk's, each stored exactly, read once;
 * staged (each chunk copied out of a buffer of ours, as when curl offers less room than a
 * chunk: S3D_TEST_CHUNK_STAGE) or not. */
static void sizes_case(const char *ep, const char *bucket, const char *path, char *src, char *dst,
                       int stage)
{
    const uint64_t P = 5u * MiB, C = S3D_HTTP_CHUNK;
    const uint64_t sizes[] = {0,        1, P, P + 1, P + C - 1, P + C, P + C + 1, 2 * P + 2 * C,
                              3 * P + 7};
    struct s3d_client *c = client_at(ep, P, 4, S3D_PAYLOAD_AUTO);
    if (stage)
        setenv("S3D_TEST_CHUNK_STAGE", "1", 1);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t n = sizes[i], before, read_bytes, got = 0;
        t_fill_random(src, n, 400 + i);
        write_file(path, src, n);
        before = rchar();
        CHECK_OK(s3d_upload_from_file(c, bucket, "sizes", path, NULL));
        read_bytes = rchar() - before;
        fprintf(stderr, "AUTO upload of %llu bytes (staged %d) read %llu bytes\n",
                (unsigned long long)n, stage, (unsigned long long)read_bytes);
        /* Once through the file, and the answers' few bytes (twice: two passes). */
        CHECK(n < P || read_bytes < n + n / 8);
        memset(dst, 0x5a, n + 1);
        CHECK_OK(s3d_download_to_buffer(c, bucket, "sizes", 0, UINT64_MAX, dst, n + 1, &got, NULL));
        CHECK_EQ_U64(got, n);
        CHECK(memcmp(dst, src, n) == 0);
    }
    { /* Modified just now: two passes (the checksums, then the send), stored exactly. */
        uint64_t n = 2 * P + 1, before, read_bytes, got = 0;
        t_fill_random(src, n, 499);
        write_file(path, src, n);
        set_mtime(path, 0);
        before = rchar();
        CHECK_OK(s3d_upload_from_file(c, bucket, "sizes", path, NULL));
        read_bytes = rchar() - before;
        fprintf(stderr, "AUTO upload of a file modified just now, %llu bytes: read %llu\n",
                (unsigned long long)n, (unsigned long long)read_bytes);
        CHECK(read_bytes >= 2 * n);
        CHECK_OK(s3d_download_to_buffer(c, bucket, "sizes", 0, UINT64_MAX, dst, n + 1, &got, NULL));
        CHECK_EQ_U64(got, n);
        CHECK(memcmp(dst, src, n) == 0);
    }
    unsetenv("S3D_TEST_CHUNK_STAGE");
    s3d_client_free(c);
}

/* 5. A byte flipped after its chunk was hashed and signed: the server refuses the part, the
 * upload is aborted and the key keeps its object. */
static void corrupt_case(const char *ep, struct s3d_client *direct, const char *bucket,
                         const char *path, char *src, char *dst)
{
    const size_t n = 12u * MiB;
    struct s3d_client *c = client_at(ep, 5u * MiB, 4, S3D_PAYLOAD_AUTO);
    t_fill_random(src, n, 500);
    CHECK_OK(s3d_upload_from_buffer(direct, bucket, "corrupt", src, n, NULL));
    t_fill_random(dst, n, 501);
    write_file(path, dst, n);
    setenv("S3D_TEST_CHUNK_CORRUPT", "1", 1);
    CHECK(s3d_upload_from_file(c, bucket, "corrupt", path, NULL) < 0);
    fprintf(stderr, "a corrupt chunk: %s\n", s3d_last_error_message());
    CHECK_MSG_HAS("SignatureDoesNotMatch");
    unsetenv("S3D_TEST_CHUNK_CORRUPT");
    check_kept(direct, bucket, "corrupt", src, n, dst);
    s3d_client_free(c);
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    char host[256], bucket[128], path[600];
    int port;
    struct s3d_client *direct;
    const size_t cap = 40u * MiB;
    char *src = malloc(cap), *dst = malloc(cap);

    CHECK(src != NULL && dst != NULL);
    setenv("S3D_TEST_RETRY_BASE_MS", "20", 1);
    tproxy_parse_endpoint(ep, host, sizeof(host), &port);
    direct = t_s3_client();
    t_s3_bucket(direct, "upfile", bucket, sizeof(bucket));
    snprintf(path, sizeof(path), "%s/upload-src.bin", t_tmpdir());

    sizes_case(ep, bucket, path, src, dst, 0);
    sizes_case(ep, bucket, path, src, dst, 1);
    corrupt_case(ep, direct, bucket, path, src, dst);
    for (int s = 0; s < 3; s++) {
        int signing = s == 0   ? S3D_PAYLOAD_AUTO
                      : s == 1 ? S3D_PAYLOAD_SIGNED
                               : S3D_PAYLOAD_UNSIGNED;
        cut_case(direct, host, port, bucket, path, src, dst, signing);
        change_case(direct, host, port, bucket, path, src, dst, signing, 0, 0);
        change_case(direct, host, port, bucket, path, src, dst, signing, 1, 0);
        change_case(direct, host, port, bucket, path, src, dst, signing, 0, 1);
        if (signing == S3D_PAYLOAD_AUTO) /* truncated under a part sent in signed chunks */
            change_case(direct, host, port, bucket, path, src, dst, signing, 1, 1);
    }
    unlink(path);
    s3d_client_free(direct);
    free(src);
    free(dst);
    return 0;
}
