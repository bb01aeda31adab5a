/* ckpt_util.c - see ckpt_util.h. */
#include "ckpt_util.h"
#include "device/device.h"

static struct s3d_device *g_emu_dev;

uint64_t t_emu_copy_on(int ordinal, const void *src, size_t n)
{
    struct s3d_device *dev;
    uint64_t d = 0;
    if (ordinal == 0) {
        if (g_emu_dev == NULL)
            CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &g_emu_dev));
        dev = g_emu_dev;
    } else {
        CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev)); /* S3D_DEVICE_EMULATE_COUNT */
    }
    CHECK_OK(s3d_device_mem_alloc(dev, ordinal, n ? n : 1, &d));
    if (n > 0)
        memcpy(s3d_device_emu_view(d), src, n);
    if (dev != g_emu_dev)
        s3d_device_free(dev); /* the emulated memory is process-wide */
    return d;
}

uint64_t t_emu_copy(const void *src, size_t n)
{
    return t_emu_copy_on(0, src, n);
}

void t_emu_free_on(int ordinal, uint64_t dptr)
{
    struct s3d_device *dev;
    if (ordinal == 0) {
        if (g_emu_dev != NULL)
            s3d_device_mem_free(g_emu_dev, 0, dptr);
        return;
    }
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev));
    s3d_device_mem_free(dev, ordinal, dptr);
    s3d_device_free(dev);
}

void t_emu_free(uint64_t dptr)
{
    t_emu_free_on(0, dptr);
}

void t_tensor_to_emu(struct t_tensors *ts, size_t i)
{
    if (ts->src[i].device >= 0)
        return;
    ts->src[i].ptr = (const void *)(uintptr_t)t_emu_copy(ts->data[i], ts->src[i].nbytes);
    ts->src[i].device = 0;
}

void t_make_tensors(struct t_tensors *ts, size_t n, size_t max_elems, uint64_t seed)
{
    ts->n = n;
    ts->src = calloc(n, sizeof(*ts->src));
    ts->shapes = calloc(n, sizeof(*ts->shapes));
    ts->names = calloc(n, sizeof(*ts->names));
    ts->data = calloc(n, sizeof(*ts->data));
    CHECK(ts->src && ts->shapes && ts->names && ts->data);
    for (size_t i = 0; i < n; i++) {
        int dtype = 1 + (int)(i % (S3D_DTYPE_COUNT_ - 1));
        int bits = s3d_dtype_bits(dtype);
        struct s3d_tensor_src *t = &ts->src[i];
        uint64_t nb;
        char name[64];
        snprintf(name, sizeof(name), "layer.%zu.%s", i, s3d_dtype_name(dtype));
        ts->names[i] = strdup(name);
        t->name = ts->names[i];
        t->dtype = dtype;
        if (i == 1) {
            t->ndim = 0; /* a scalar: one element (F4/F6 need whole bytes: use 2 then) */
            if (bits % 8 != 0) {
                t->ndim = 1;
                ts->shapes[i][0] = bits == 4 ? 2 : 4;
            }
        } else if (i == 2) {
            t->ndim = 2;
            ts->shapes[i][0] = 0; /* empty */
            ts->shapes[i][1] = 7;
        } else {
            size_t elems = 8 + (size_t)((seed * 2654435761u + i * 40503u) % max_elems);
            elems -= elems % 8; /* whole bytes for the sub-byte dtypes */
            t->ndim = 2;
            ts->shapes[i][0] = 8;
            ts->shapes[i][1] = (int64_t)(elems / 8);
        }
        t->shape = ts->shapes[i];
        CHECK_OK(s3d_dtype_nbytes(dtype, t->shape, t->ndim, &nb));
        t->nbytes = nb;
        ts->data[i] = malloc(nb ? nb : 1);
        CHECK(ts->data[i] != NULL);
        t_fill_random(ts->data[i], nb, seed + i);
        t->ptr = ts->data[i];
        t->device = -1;
    }
}

void t_free_tensors(struct t_tensors *ts)
{
    for (size_t i = 0; i < ts->n; i++) {
        if (ts->src[i].device >= 0)
            t_emu_free((uint64_t)(uintptr_t)ts->src[i].ptr);
        free(ts->names[i]);
        free(ts->data[i]);
    }
    free(ts->src);
    free(ts->shapes);
    free(ts->names);
    free(ts->data);
    memset(ts, 0, sizeof(*ts));
}

void t_verify_checkpoint(struct s3d_client *c, const char *uri, const struct t_tensors *ts,
                         int device)
{
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest *d = calloc(ts->n ? ts->n : 1, sizeof(*d));
    void **out = calloc(ts->n ? ts->n : 1, sizeof(*out));
    CHECK(d && out);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    CHECK_EQ_U64(s3d_reader_num_tensors(r), ts->n);
    for (size_t i = 0; i < ts->n; i++) {
        struct s3d_tensor_info info = {.struct_size = sizeof(struct s3d_tensor_info)};
        size_t idx;
        const struct s3d_tensor_src *t = &ts->src[i];
        CHECK_OK(s3d_reader_find(r, t->name, &idx));
        CHECK_OK(s3d_reader_tensor(r, idx, &info));
        CHECK_STREQ(info.name, t->name);
        CHECK(info.dtype == t->dtype);
        CHECK(info.ndim == t->ndim);
        for (int k = 0; k < t->ndim; k++)
            CHECK(info.shape[k] == t->shape[k]);
        CHECK_EQ_U64(info.nbytes, t->nbytes);
        out[i] = malloc(t->nbytes ? t->nbytes : 1);
        CHECK(out[i] != NULL);
        memset(out[i], 0xA5, t->nbytes);
        if (device >= 0) { /* device memory of the emulated backend, filled with 0xA5 */
            uint64_t dp = t_emu_copy(out[i], t->nbytes);
            free(out[i]);
            out[i] = (void *)(uintptr_t)dp;
        }
        d[i].index = idx;
        d[i].ptr = out[i];
        d[i].device = device;
        d[i].capacity = t->nbytes;
    }
    CHECK_OK(s3d_reader_read(r, d, ts->n, NULL));
    for (size_t i = 0; i < ts->n; i++) {
        const void *got = device >= 0 ? s3d_device_emu_view((uint64_t)(uintptr_t)out[i]) : out[i];
        if (memcmp(got, ts->data[i], ts->src[i].nbytes) != 0)
            t_fail(__FILE__, __LINE__, "%s: tensor %s differs after the round trip", uri,
                   ts->src[i].name);
        if (device >= 0)
            t_emu_free((uint64_t)(uintptr_t)out[i]);
        else
            free(out[i]);
    }
    s3d_reader_close(r);
    free(out);
    free(d);
}

/* ---- counting relay -------------------------------------------------------------------- */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_ullong proxy_bytes;
static int proxy_listen_fd = -1;
static int upstream_port;

static void *relay(void *arg)
{
    int cfd = (int)(intptr_t)arg, sfd;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)upstream_port)};
    char buf[65536];
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sfd = socket(AF_INET, SOCK_STREAM, 0);
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(cfd);
        if (sfd >= 0)
            close(sfd);
        return NULL;
    }
    for (;;) {
        struct pollfd p[2] = {{.fd = cfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(p, 2, 30000) <= 0)
            break;
        if (p[0].revents) {
            ssize_t n = read(cfd, buf, sizeof(buf));
            if (n <= 0 || write(sfd, buf, (size_t)n) != n)
                break;
        }
        if (p[1].revents) {
            ssize_t n = read(sfd, buf, sizeof(buf)), w = 0;
            if (n <= 0)
                break;
            /* counted before the client can see them: counted after, a fast client could
             * finish and read the counter while this thread is still between write and add */
            atomic_fetch_add(&proxy_bytes, (unsigned long long)n);
            while (w < n) {
                ssize_t k = write(cfd, buf + w, (size_t)(n - w));
                if (k <= 0)
                    goto done;
                w += k;
            }
        }
    }
done:
    close(cfd);
    close(sfd);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_t th;
        int fd = accept(proxy_listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        if (pthread_create(&th, NULL, relay, (void *)(intptr_t)fd) == 0)
            pthread_detach(th);
        else
            close(fd);
    }
    return NULL;
}

const char *t_proxy_start(void)
{
    static char url[64];
    const char *ep = t_s3_endpoint();
    const char *colon = strrchr(ep, ':');
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    pthread_t th;
    CHECK(colon != NULL);
    upstream_port = atoi(colon + 1);
    CHECK(upstream_port > 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    proxy_listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(proxy_listen_fd >= 0);
    CHECK(bind(proxy_listen_fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(proxy_listen_fd, 64) == 0);
    CHECK(getsockname(proxy_listen_fd, (struct sockaddr *)&a, &len) == 0);
    CHECK(pthread_create(&th, NULL, acceptor, NULL) == 0);
    pthread_detach(th);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
    return url;
}

uint64_t t_proxy_bytes(void)
{
    return atomic_load(&proxy_bytes);
}

void t_proxy_reset(void)
{
    atomic_store(&proxy_bytes, 0);
}

/* ---- stream ordering on the emulated device --------------------------------------------- */

void t_check_stream_order(struct s3d_client *c, const char *uri, int n_devices, int file_io)
{
    enum { NB = (1 << 20) + 100, MAXD = 4 };
    struct s3d_stream *cs[MAXD];
    uint64_t handles[MAXD], src[MAXD], dst[MAXD];
    int64_t shape[MAXD][1];
    char names[MAXD][16];
    struct s3d_tensor_src ts[MAXD];
    struct s3d_tensor_dest td[MAXD];
    struct s3d_reader *r = NULL;
    struct s3d_device *dev;

    CHECK(n_devices >= 1 && n_devices <= MAXD);
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev)); /* S3D_DEVICE_EMULATE_COUNT now */
    CHECK(s3d_device_count(dev) >= n_devices);
    memset(ts, 0, sizeof(ts));
    memset(td, 0, sizeof(td));
    for (int k = 0; k < n_devices; k++) {
        CHECK_OK(s3d_device_stream_new(dev, k, &cs[k]));
        handles[k] = s3d_device_emu_stream_handle(cs[k]);
        CHECK_OK(s3d_device_mem_alloc(dev, k, NB, &src[k]));
        CHECK_OK(s3d_device_mem_alloc(dev, k, NB, &dst[k]));
        memset(s3d_device_emu_view(src[k]), 0, NB);
        memset(s3d_device_emu_view(dst[k]), 0, NB);
        /* The kernel that produces the tensor is still queued on the caller's stream. */
        CHECK_OK(s3d_device_emu_kernel(dev, k, handles[k], src[k], 0x40 + k, NB));
        snprintf(names[k], sizeof(names[k]), "t%d", k);
        shape[k][0] = NB;
        ts[k] = (struct s3d_tensor_src){.name = names[k],
                                        .dtype = S3D_DTYPE_U8,
                                        .ndim = 1,
                                        .shape = shape[k],
                                        .ptr = (const void *)(uintptr_t)src[k],
                                        .device = k,
                                        .nbytes = NB};
    }
    struct s3d_write_options wo = {.file_io = file_io,
                                   .cuda_stream = 0xbad, /* every device has its own */
                                   .cuda_streams = handles,
                                   .n_cuda_streams = (uint32_t)n_devices};
    CHECK_OK(s3d_checkpoint_write(c, uri, ts, (size_t)n_devices, NULL, 0, &wo));

    /* Loads: a queued kernel still writes each destination (load_into over parameters in
     * use); the loaded bytes must win. */
    CHECK_OK(s3d_reader_open(c, uri, &r));
    for (int k = 0; k < n_devices; k++) {
        size_t idx;
        CHECK_OK(s3d_reader_find(r, names[k], &idx));
        CHECK_OK(s3d_device_emu_kernel(dev, k, handles[k], dst[k], 0xEE, NB));
        td[k] = (struct s3d_tensor_dest){
            .index = idx, .ptr = (void *)(uintptr_t)dst[k], .device = k, .capacity = NB};
    }
    struct s3d_read_options ro = {.file_io = file_io,
                                  .cuda_stream = 0xbad,
                                  .cuda_streams = handles,
                                  .n_cuda_streams = (uint32_t)n_devices};
    CHECK_OK(s3d_reader_read(r, td, (size_t)n_devices, &ro));
    s3d_reader_close(r);
    for (int k = 0; k < n_devices; k++) {
        const unsigned char *v;
        CHECK_OK(s3d_device_stream_sync(dev, cs[k])); /* whatever the caller queued runs */
        v = s3d_device_emu_view(dst[k]);
        for (size_t i = 0; i < NB; i += 4099)
            if (v[i] != 0x40 + k)
                t_fail(__FILE__, __LINE__, "%s: device %d byte %zu is 0x%02x, want 0x%02x", uri, k,
                       i, v[i], 0x40 + k);
        if (v[NB - 1] != 0x40 + k)
            t_fail(__FILE__, __LINE__, "%s: device %d last byte is 0x%02x", uri, k, v[NB - 1]);
        s3d_device_mem_free(dev, k, src[k]);
        s3d_device_mem_free(dev, k, dst[k]);
        s3d_device_stream_free(dev, cs[k]);
    }
    s3d_device_free(dev);
}

void t_check_event_order(struct s3d_client *c, const char *uri, int n_devices, int file_io,
                         uint64_t max_shard_size)
{
    enum { NB = (1 << 20) + 100, MAXD = 4 };
    struct s3d_stream *cs[MAXD];
    uint64_t handles[MAXD], events[MAXD], src[MAXD];
    int64_t shape[MAXD][1];
    char names[MAXD][16];
    struct s3d_tensor_src ts[MAXD];
    struct s3d_reader *r = NULL;
    struct s3d_device *dev;
    unsigned char *back = malloc(NB);

    CHECK(back != NULL && n_devices >= 1 && n_devices <= MAXD);
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev)); /* S3D_DEVICE_EMULATE_COUNT now */
    CHECK(s3d_device_count(dev) >= n_devices);
    memset(ts, 0, sizeof(ts));
    for (int k = 0; k < n_devices; k++) {
        /* The last of several devices has no event (0): the stream rule, as before. */
        const int evented = n_devices == 1 || k < n_devices - 1;
        CHECK_OK(s3d_device_stream_new(dev, k, &cs[k]));
        handles[k] = s3d_device_emu_stream_handle(cs[k]);
        CHECK_OK(s3d_device_mem_alloc(dev, k, NB, &src[k]));
        memset(s3d_device_emu_view(src[k]), 0, NB);
        /* The kernel that produces the tensor, then the caller's event after it, then work
         * queued after the event (the next step's kernels) that overwrites the tensor. */
        CHECK_OK(s3d_device_emu_kernel(dev, k, handles[k], src[k], 0x50 + k, NB));
        events[k] = 0;
        if (evented) {
            CHECK_OK(s3d_device_emu_event_record(dev, k, handles[k], &events[k]));
            CHECK_OK(s3d_device_emu_kernel(dev, k, handles[k], src[k], 0xEE, NB));
        }
        snprintf(names[k], sizeof(names[k]), "t%d", k);
        shape[k][0] = NB;
        ts[k] = (struct s3d_tensor_src){.name = names[k],
                                        .dtype = S3D_DTYPE_U8,
                                        .ndim = 1,
                                        .shape = shape[k],
                                        .ptr = (const void *)(uintptr_t)src[k],
                                        .device = k,
                                        .nbytes = NB};
    }
    struct s3d_write_options wo = {.struct_size = sizeof(wo),
                                   .file_io = file_io,
                                   .max_shard_size = max_shard_size,
                                   .cuda_stream = 0xbad, /* every device has its own */
                                   .cuda_streams = handles,
                                   .n_cuda_streams = (uint32_t)n_devices,
                                   .cuda_events = events,
                                   .n_cuda_events = (uint32_t)n_devices};
    CHECK_OK(s3d_checkpoint_write(c, uri, ts, (size_t)n_devices, NULL, 0, &wo));
    /* The saved bytes are the producer's: not the zeros from before it (no wait), nor the
     * 0xEE queued after the event (a wait for the whole caller stream). */
    CHECK_OK(s3d_reader_open(c, uri, &r));
    for (int k = 0; k < n_devices; k++) {
        struct s3d_tensor_dest td = {.ptr = back, .device = -1, .capacity = NB};
        CHECK_OK(s3d_reader_find(r, names[k], &td.index));
        CHECK_OK(s3d_reader_read(r, &td, 1, NULL));
        for (size_t i = 0; i < NB; i += 4099)
            if (back[i] != 0x50 + k)
                t_fail(__FILE__, __LINE__, "%s: device %d byte %zu saved as 0x%02x, want 0x%02x",
                       uri, k, i, back[i], 0x50 + k);
        if (back[NB - 1] != 0x50 + k)
            t_fail(__FILE__, __LINE__, "%s: device %d last byte is 0x%02x", uri, k, back[NB - 1]);
    }
    s3d_reader_close(r);
    for (int k = 0; k < n_devices; k++) {
        CHECK_OK(s3d_device_stream_sync(dev, cs[k])); /* whatever the caller queued runs */
        s3d_device_mem_free(dev, k, src[k]);
        s3d_device_stream_free(dev, cs[k]);
    }
    s3d_device_free(dev);
    free(back);
}
