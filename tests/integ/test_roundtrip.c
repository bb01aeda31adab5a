/* test_roundtrip.c - bytes in = bytes out, through every path: buffer and file uploads and
 * downloads at the sizes around the multipart boundaries (0, 1, 5 MiB - 1, 5 MiB, 5 MiB + 1,
 * 64 MiB), ranged downloads, keys with spaces and unicode, copies (through the client and on
 * the server), upload streams (including an
 * abandoned one), stdin and stdout, and progress reports. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MiB (1024ull * 1024ull)

struct prog {
    uint64_t last, total, calls;
    int backwards;
};

static int on_progress(void *user, uint64_t done, uint64_t total)
{
    struct prog *p = user;
    if (done < p->last)
        p->backwards = 1;
    p->last = done;
    p->total = total;
    p->calls++;
    return 0;
}

static int cancel_progress(void *user, uint64_t done, uint64_t total)
{
    (void)user, (void)done, (void)total;
    return 1;
}

static int count_uploads(void *user, const struct s3d_upload_entry *e)
{
    (*(int *)user)++;
    return 0;
}

static char *read_file(const char *path, uint64_t *len)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    char *p;
    CHECK(fd >= 0);
    CHECK(fstat(fd, &st) == 0);
    p = malloc((size_t)st.st_size + 1);
    CHECK(p != NULL);
    CHECK(read(fd, p, (size_t)st.st_size) == st.st_size);
    close(fd);
    *len = (uint64_t)st.st_size;
    return p;
}

static void write_file(const char *path, const void *p, uint64_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, p, (size_t)n) == (ssize_t)n);
    close(fd);
}

struct pipe_job {
    int fd;
    char *buf;
    uint64_t len;
};

static void *pipe_writer(void *arg)
{
    struct pipe_job *j = arg;
    uint64_t off = 0;
    while (off < j->len) {
        size_t n = (size_t)(j->len - off < 100000 ? j->len - off : 100000);
        ssize_t w = write(j->fd, j->buf + off, n);
        CHECK(w > 0);
        off += (uint64_t)w;
    }
    close(j->fd);
    return NULL;
}

static void *pipe_reader(void *arg)
{
    struct pipe_job *j = arg;
    ssize_t r;
    while ((r = read(j->fd, j->buf + j->len, 1 << 20)) > 0)
        j->len += (uint64_t)r;
    return NULL;
}

static void roundtrip_sizes(struct s3d_client *c, const char *bucket, const char *tag, uint64_t max)
{
    static const uint64_t sizes[] = {0, 1, 5 * MiB - 1, 5 * MiB, 5 * MiB + 1, 64 * MiB};
    size_t i;
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t n = sizes[i], got = 0, flen = 0;
        if (n > max)
            continue;
        char *src = malloc(n + 1), *dst = malloc(n + 1), *back;
        char key[128], path[512], path2[512];
        struct prog pu = {0}, pd = {0};
        struct s3d_transfer_options to;
        struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
        CHECK(src != NULL && dst != NULL);
        t_fill_random(src, n, n + 7);
        snprintf(key, sizeof(key), "%s/size-%llu", tag, (unsigned long long)n);
        memset(&to, 0, sizeof(to));
        to.progress = on_progress;
        to.progress_user = &pu;
        CHECK_OK(s3d_upload_from_buffer(c, bucket, key, src, n, &to));
        CHECK(!pu.backwards);
        CHECK_EQ_U64(pu.last, n);
        CHECK_OK(s3d_head_object(c, bucket, key, &info));
        CHECK_EQ_U64(info.size, n);
        CHECK(info.etag[0] == '"');
        CHECK(info.last_modified > time(NULL) - 86400 && info.last_modified < time(NULL) + 86400);
        CHECK_STREQ(info.content_type, "application/octet-stream");
        to.progress_user = &pd;
        memset(dst, 0xEE, n + 1);
        CHECK_OK(s3d_download_to_buffer(c, bucket, key, 0, UINT64_MAX, dst, n, &got, &to));
        CHECK_EQ_U64(got, n);
        CHECK(memcmp(src, dst, n) == 0);
        CHECK((unsigned char)dst[n] == 0xEE); /* nothing past the range */
        CHECK_EQ_U64(pd.last, n);
        CHECK(!pd.backwards);

        /* File paths: upload from a file, download to another, compare. */
        snprintf(path, sizeof(path), "%s/up-%s-%llu", t_tmpdir(), tag, (unsigned long long)n);
        snprintf(path2, sizeof(path2), "%s/down-%s-%llu", t_tmpdir(), tag, (unsigned long long)n);
        write_file(path, src, n);
        snprintf(key, sizeof(key), "%s/file-%llu", tag, (unsigned long long)n);
        CHECK_OK(s3d_upload_from_file(c, bucket, key, path, NULL));
        CHECK_OK(s3d_download_to_file(c, bucket, key, path2, NULL));
        back = read_file(path2, &flen);
        CHECK_EQ_U64(flen, n);
        CHECK(memcmp(src, back, n) == 0);
        free(back);
        unlink(path);
        unlink(path2);
        CHECK_OK(s3d_delete_object(c, bucket, key));
        snprintf(key, sizeof(key), "%s/size-%llu", tag, (unsigned long long)n);
        CHECK_OK(s3d_delete_object(c, bucket, key));
        free(src);
        free(dst);
    }
}

int main(void)
{
    struct s3d_client *c = t_s3_client(), *c5;
    struct s3d_client_options o;
    char bucket[128];
    const uint64_t n = 21 * MiB + 12345;
    char *src = malloc(n), *dst = malloc(n);
    uint64_t got;
    int uploads = 0;

    CHECK(src != NULL && dst != NULL);
    t_s3_bucket(c, "rt", bucket, sizeof(bucket));

    /* Default client (8 MiB parts and threshold) and a 5 MiB one (boundaries exactly at the
     * S3 minimum: 5 MiB is a one-part multipart upload, 5 MiB + 1 two parts). */
    roundtrip_sizes(c, bucket, "d", UINT64_MAX);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = t_s3_endpoint();
    o.part_size = 5 * MiB;
    o.max_concurrency = 3;
    CHECK_OK(s3d_client_new(&o, &c5));
    roundtrip_sizes(c5, bucket, "p5", 5 * MiB + 1);

    /* Ranged downloads within and across parts. */
    t_fill_random(src, n, 99);
    CHECK_OK(s3d_upload_from_buffer(c, bucket, "ranged", src, n, NULL));
    {
        static const uint64_t ranges[][2] = {
            {0, 1},     {1, 1},         {5 * MiB - 3, 7}, {8 * MiB - 1, 2}, {3 * MiB, 9 * MiB + 17},
            {n - 1, 1}, {n - 100, 100}, {123, n - 123}};
        size_t i;
        for (i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
            memset(dst, 0, n);
            CHECK_OK(s3d_download_to_buffer(c5, bucket, "ranged", ranges[i][0], ranges[i][1], dst,
                                            n, &got, NULL));
            CHECK_EQ_U64(got, ranges[i][1]);
            CHECK(memcmp(dst, src + ranges[i][0], (size_t)got) == 0);
        }
        /* To the end from an offset; a length past the end is cut to the object. */
        CHECK_OK(
            s3d_download_to_buffer(c, bucket, "ranged", 10 * MiB, UINT64_MAX, dst, n, &got, NULL));
        CHECK_EQ_U64(got, n - 10 * MiB);
        CHECK(memcmp(dst, src + 10 * MiB, (size_t)got) == 0);
        CHECK_OK(s3d_download_to_buffer(c, bucket, "ranged", n - 5, 1000, dst, n, &got, NULL));
        CHECK_EQ_U64(got, 5);
        CHECK_OK(s3d_download_to_buffer(c, bucket, "ranged", n, UINT64_MAX, dst, n, &got, NULL));
        CHECK_EQ_U64(got, 0);
        CHECK_ERR(s3d_download_to_buffer(c, bucket, "ranged", n + 1, 1, dst, n, &got, NULL),
                  S3D_ERANGE);
    }

    /* Keys with spaces, unicode and reserved characters. */
    {
        static const char *keys[] = {"dir with space/file name.bin",
                                     "\xc3\xbc"
                                     "n\xc3\xaf"
                                     "c\xc3\xb6"
                                     "d\xc3\xa9/\xe2\x98\x83"
                                     " snow.bin",
                                     "odd+chars%20&=?#;:@$,!'()*~.bin", "/leading-slash",
                                     "a/../dots/./x"};
        size_t i;
        int found = 0;
        for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
            struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
            CHECK_OK(s3d_upload_from_buffer(c, bucket, keys[i], src, 1000 + i, NULL));
            CHECK_OK(s3d_head_object(c, bucket, keys[i], &info));
            CHECK_EQ_U64(info.size, 1000 + i);
            CHECK_OK(s3d_download_to_buffer(c, bucket, keys[i], 0, UINT64_MAX, dst, n, &got, NULL));
            CHECK_EQ_U64(got, 1000 + i);
            CHECK(memcmp(dst, src, (size_t)got) == 0);
        }
        CHECK_OK(s3d_list_objects(c, bucket, "\xc3\xbc", NULL,
                                  (s3d_list_fn)(void (*)(void))count_uploads, &found));
        CHECK(found == 1);
        CHECK_OK(s3d_delete_objects(c, bucket, keys, sizeof(keys) / sizeof(keys[0])));
    }

    /* Copy: multipart through bounded memory, and a small one. */
    CHECK_OK(s3d_copy_object(c5, bucket, "ranged", bucket, "copy big", NULL));
    CHECK_OK(s3d_download_to_buffer(c, bucket, "copy big", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK_EQ_U64(got, n);
    CHECK(memcmp(dst, src, n) == 0);
    CHECK_OK(s3d_upload_from_buffer(c, bucket, "small", src, 777, NULL));
    CHECK_OK(s3d_copy_object(c, bucket, "small", bucket, "copy small", NULL));
    CHECK_OK(s3d_download_to_buffer(c, bucket, "copy small", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK_EQ_U64(got, 777);
    CHECK(memcmp(dst, src, 777) == 0);

    /* A copy made by the server (a single-part source: one UploadPartCopy): progress counts
     * the copied bytes; one canceled by its progress callback leaves no object and no upload
     * (checked with the others below). */
    {
        struct s3d_client *cb;
        struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
        struct prog pc = {0};
        struct s3d_transfer_options to = {.progress = on_progress, .progress_user = &pc};
        memset(&o, 0, sizeof(o));
        o.endpoint_url = t_s3_endpoint();
        o.multipart_threshold = 64 * MiB;
        CHECK_OK(s3d_client_new(&o, &cb));
        CHECK_OK(s3d_upload_from_buffer(cb, bucket, "single", src, n, NULL));
        CHECK_OK(s3d_copy_object(c, bucket, "single", bucket, "copy single", &to));
        CHECK(!pc.backwards);
        CHECK_EQ_U64(pc.last, n);
        CHECK_EQ_U64(pc.total, n);
        CHECK_OK(s3d_head_object(c, bucket, "copy single", &info));
        CHECK(strstr(info.etag, "-1\"") != NULL); /* the one copied part */
        CHECK_OK(
            s3d_download_to_buffer(c, bucket, "copy single", 0, UINT64_MAX, dst, n, &got, NULL));
        CHECK_EQ_U64(got, n);
        CHECK(memcmp(dst, src, n) == 0);
        to.progress = cancel_progress;
        CHECK_ERR(s3d_copy_object(c, bucket, "single", bucket, "copy canceled", &to),
                  S3D_ECANCELED);
        CHECK_ERR(s3d_head_object(c, bucket, "copy canceled", &info), S3D_ENOSUCHKEY);
        s3d_client_free(cb);
    }

    /* Upload streams: odd write sizes, multipart; a tiny one (single PUT); an abandoned one. */
    {
        struct s3d_upload_stream *s;
        uint64_t off = 0, step = 1;
        CHECK_OK(s3d_upload_stream_new(c5, bucket, "stream", NULL, &s));
        while (off < n) {
            uint64_t k = step < n - off ? step : n - off;
            CHECK_OK(s3d_upload_stream_write(s, src + off, (size_t)k));
            off += k;
            step = step * 3 + 1;
            if (step > 3 * MiB)
                step = 7;
        }
        CHECK_OK(s3d_upload_stream_finish(s));
        s3d_upload_stream_free(s);
        CHECK_OK(s3d_download_to_buffer(c, bucket, "stream", 0, UINT64_MAX, dst, n, &got, NULL));
        CHECK_EQ_U64(got, n);
        CHECK(memcmp(dst, src, n) == 0);

        CHECK_OK(s3d_upload_stream_new(c, bucket, "stream small", NULL, &s));
        CHECK_OK(s3d_upload_stream_write(s, src, 100));
        CHECK_OK(s3d_upload_stream_finish(s));
        s3d_upload_stream_free(s);
        CHECK_OK(
            s3d_download_to_buffer(c, bucket, "stream small", 0, UINT64_MAX, dst, n, &got, NULL));
        CHECK_EQ_U64(got, 100);

        CHECK_OK(s3d_upload_stream_new(c5, bucket, "stream abandoned", NULL, &s));
        CHECK_OK(s3d_upload_stream_write(s, src, (size_t)(12 * MiB)));
        s3d_upload_stream_free(s);
        {
            struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
            CHECK_ERR(s3d_head_object(c, bucket, "stream abandoned", &info), S3D_ENOSUCHKEY);
        }
    }

    /* stdin and stdout ("-"), through pipes. */
    {
        int pfd[2], saved;
        pthread_t th;
        struct pipe_job j;
        CHECK(pipe(pfd) == 0);
        j.fd = pfd[1];
        j.buf = src;
        j.len = 11 * MiB + 3;
        saved = dup(STDIN_FILENO);
        CHECK(dup2(pfd[0], STDIN_FILENO) == STDIN_FILENO);
        close(pfd[0]);
        CHECK(pthread_create(&th, NULL, pipe_writer, &j) == 0);
        CHECK_OK(s3d_upload_from_file(c5, bucket, "from stdin", "-", NULL));
        pthread_join(th, NULL);
        CHECK(dup2(saved, STDIN_FILENO) == STDIN_FILENO);
        close(saved);

        CHECK(pipe(pfd) == 0);
        j.fd = pfd[0];
        j.buf = dst;
        j.len = 0;
        fflush(stdout);
        saved = dup(STDOUT_FILENO);
        CHECK(dup2(pfd[1], STDOUT_FILENO) == STDOUT_FILENO);
        close(pfd[1]);
        CHECK(pthread_create(&th, NULL, pipe_reader, &j) == 0);
        CHECK_OK(s3d_download_to_file(c5, bucket, "from stdin", "-", NULL));
        CHECK(dup2(saved, STDOUT_FILENO) == STDOUT_FILENO); /* closes the pipe's write end */
        close(saved);
        pthread_join(th, NULL);
        CHECK_EQ_U64(j.len, 11 * MiB + 3);
        CHECK(memcmp(dst, src, (size_t)j.len) == 0);
    }

    /* A device is written in place, never replaced by a rename. */
    {
        struct stat st;
        CHECK_OK(s3d_download_to_file(c5, bucket, "from stdin", "/dev/null", NULL));
        CHECK(stat("/dev/null", &st) == 0);
        CHECK(S_ISCHR(st.st_mode));
        CHECK_ERR(s3d_download_to_file(c5, bucket, "from stdin", t_tmpdir(), NULL), S3D_EINVAL);
    }

    CHECK_OK(s3d_list_uploads(c, bucket, NULL, count_uploads, &uploads));
    CHECK(uploads == 0);
    {
        const char *keys[] = {"ranged", "copy big",     "small",      "copy small", "single",
                              "stream", "stream small", "from stdin", "copy single"};
        CHECK_OK(s3d_delete_objects(c, bucket, keys, sizeof(keys) / sizeof(keys[0])));
    }
    CHECK_OK(s3d_delete_bucket(c, bucket));
    s3d_client_free(c5);
    s3d_client_free(c);
    free(src);
    free(dst);
    return 0;
}
