/* test_ckpt_mp_pool.c - more concurrent multipart saves of GPU tensors (emulated device) on
 * one client than its staging pool has chunks, against a stub S3 server in this process (no
 * server needed: it answers the multipart calls and keeps no bytes). Each save's parts need
 * one chunk each; part 1 goes last. When part 1 kept its chunk for the whole save, as soon as
 * every chunk was some save's part 1 no save could build another part and all of them waited
 * forever (issue 39). The alarm turns that hang into a failure before the runner's timeout.
 * Then one save whose tensor changes on the device midway: part 1, built again at the end, no
 * longer has the CRCs the header got, and the save fails (S3D_ECHANGED). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "device/device.h"

#define N_THREADS 8
#define N_SAVES   3

static int g_lfd;
static atomic_int g_uploads, g_parts, g_completes;
static struct s3d_client *g_c;
static struct t_tensors g_ts[N_THREADS];

static void send_str(int fd, const char *p)
{
    size_t n = strlen(p);
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* One request per connection: its head and body read whole, then the answer, then close. */
static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    static __thread char req[1 << 16];
    char head[512], body[512];
    size_t len = 0;
    char *end = NULL;
    while (len < sizeof(req) - 1 && end == NULL) {
        ssize_t r = read(fd, req + len, sizeof(req) - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        req[len] = '\0';
        end = strstr(req, "\r\n\r\n");
    }
    if (end != NULL) {
        const char *cl = strcasestr(req, "\r\ncontent-length:");
        unsigned long long want = cl != NULL ? strtoull(cl + 17, NULL, 10) : 0, have;
        const int post = strncmp(req, "POST ", 5) == 0, del = strncmp(req, "DELETE ", 7) == 0;
        const int create = post && strstr(req, "?uploads") != NULL;
        /* (the client's one-byte checksum probe of the server is no part) */
        const int part =
            strncmp(req, "PUT ", 4) == 0 && strstr(req, "partNumber=") != NULL && want > 1;
        have = len - (size_t)(end + 4 - req);
        while (have < want) { /* the body, into a buffer whose head is no longer needed */
            ssize_t r = read(fd, req, sizeof(req));
            if (r <= 0)
                break;
            have += (unsigned long long)r;
        }
        body[0] = '\0';
        if (create) {
            snprintf(body, sizeof(body),
                     "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
                     "<UploadId>u%d</UploadId></InitiateMultipartUploadResult>",
                     atomic_fetch_add(&g_uploads, 1));
        } else if (post) {
            atomic_fetch_add(&g_completes, 1);
            snprintf(body, sizeof(body),
                     "<CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
                     "<ETag>\"e-3\"</ETag></CompleteMultipartUploadResult>");
        } else if (part) {
            atomic_fetch_add(&g_parts, 1);
            usleep(20000); /* the part's chunk stays taken a while: others want theirs */
        }
        snprintf(head, sizeof(head),
                 "HTTP/1.1 %s\r\nContent-Length: %zu\r\nETag: \"p\"\r\n"
                 "Connection: close\r\n\r\n",
                 del ? "204 No Content" : "200 OK", strlen(body));
        send_str(fd, head);
        send_str(fd, body);
    }
    close(fd);
    return NULL;
}

static void *server(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_t th;
        int fd = accept(g_lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        if (pthread_create(&th, NULL, conn_main, (void *)(intptr_t)fd) != 0)
            close(fd);
        else
            pthread_detach(th);
    }
}

/* The progress callback of the save below: once bytes are sent (part 2 has gone, part 1 was
 * built, summed and given back) a "kernel" changes the tensor's first byte, in part 1. */
static int change_first_byte(void *user, uint64_t done, uint64_t total)
{
    int *changed = user;
    (void)total;
    if (done > 0 && !*changed) {
        ((unsigned char *)s3d_device_emu_view((uint64_t)(uintptr_t)g_ts[0].src[0].ptr))[0] ^= 1;
        *changed = 1;
    }
    return 0;
}

static void *saver(void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    char uri[64];
    snprintf(uri, sizeof(uri), "s3://bkt/t%zu.safetensors", k);
    for (int i = 0; i < N_SAVES; i++)
        CHECK_OK(s3d_checkpoint_write(g_c, uri, g_ts[k].src, g_ts[k].n, NULL, 0, NULL));
    return NULL;
}

int main(void)
{
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    struct s3d_client_options o;
    pthread_t srv, th[N_THREADS];
    char url[64];

    signal(SIGPIPE, SIG_IGN);
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    g_lfd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(g_lfd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(g_lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(g_lfd, 64) == 0);
    CHECK(getsockname(g_lfd, (struct sockaddr *)&a, &al) == 0);
    CHECK(pthread_create(&srv, NULL, server, NULL) == 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));

    memset(&o, 0, sizeof(o));
    o.endpoint_url = url;
    o.access_key_id = "AKIDFAKE";
    o.secret_access_key = "secretfake";
    o.part_size = 5 << 20;           /* the chunk size */
    o.staging_bytes = 15 << 20;      /* 3 chunks: the least a save of one-chunk parts needs */
    o.multipart_threshold = 5 << 20; /* multipart */
    CHECK_OK(s3d_client_new(&o, &g_c));

    for (size_t k = 0; k < N_THREADS; k++) {
        struct t_tensors *ts = &g_ts[k];
        t_make_tensors(ts, 1, 1, 300 + k);
        free(ts->data[0]);
        ts->shapes[0][0] = 12 << 20; /* 3 parts of 5 MiB, one chunk each */
        ts->src[0].ndim = 1;
        ts->src[0].dtype = S3D_DTYPE_U8;
        ts->src[0].nbytes = 12 << 20;
        ts->data[0] = malloc(12 << 20);
        CHECK(ts->data[0] != NULL);
        t_fill_random(ts->data[0], 12 << 20, 400 + k);
        ts->src[0].ptr = ts->data[0];
        t_tensor_to_emu(ts, 0);
    }

    alarm(60);
    for (size_t k = 0; k < N_THREADS; k++)
        CHECK(pthread_create(&th[k], NULL, saver, (void *)(uintptr_t)k) == 0);
    for (size_t k = 0; k < N_THREADS; k++)
        CHECK(pthread_join(th[k], NULL) == 0);
    alarm(0);

    CHECK(atomic_load(&g_completes) == N_THREADS * N_SAVES);
    if (atomic_load(&g_parts) != 3 * N_THREADS * N_SAVES)
        t_fail(__FILE__, __LINE__, "%d parts uploaded, %d expected", atomic_load(&g_parts),
               3 * N_THREADS * N_SAVES);
    s3d_client_free(g_c);

    /* Part 1 is built again at the end: a tensor changed on the device since its first pass
     * fails the save (its CRC in the header would not cover the bytes sent). One request at a
     * time, so the progress callback runs before the last part is handed out. */
    {
        struct s3d_write_options wo;
        int changed = 0;
        memset(&wo, 0, sizeof(wo));
        wo.progress = change_first_byte;
        wo.progress_user = &changed;
        o.max_concurrency = 1;
        o.min_concurrency = 1;
        CHECK_OK(s3d_client_new(&o, &g_c));
        CHECK_ERR(s3d_checkpoint_write(g_c, "s3://bkt/changed.safetensors", g_ts[0].src, g_ts[0].n,
                                       NULL, 0, &wo),
                  S3D_ECHANGED);
        CHECK_MSG_HAS("changed while the save ran");
        CHECK(changed);
        s3d_client_free(g_c);
    }
    for (size_t k = 0; k < N_THREADS; k++)
        t_free_tensors(&g_ts[k]);
    printf("ok: %d saves of 3 parts, %d threads, a 3-chunk pool\n", N_THREADS * N_SAVES, N_THREADS);
    return 0;
}
