/* test_ckpt_ready.c - tensors as they arrive (s3d_read_options.on_ready), from S3 and from a
 * file, into host memory and into the strict emulated GPU:
 *   - every destination is reported exactly once, and at the moment it is reported its bytes
 *     are all there (a device destination's copy complete: the emulated device runs copies
 *     late, so a report before the copy's event fails here);
 *   - with one request in flight, destinations come in the order of the array: exactly for
 *     the file's order; for the reverse order, the first tensors of the array first and its
 *     last ones last (small tensors adjacent in the file share a request and arrive together,
 *     in the file's order);
 *   - a nonzero return stops the read with S3D_ECANCELED and nothing is reported after it;
 *   - a corrupted tensor fails the read with S3D_ECHECKSUM naming it and is never reported. */
#include <unistd.h>

#include "ckpt_util.h"
#include "device/device.h"

struct seen {
    const struct t_tensors *ts;
    const size_t *which;  /* dest i holds tensor which[i] of ts */
    size_t which_at[64];  /* a copy of which, kept after the read */
    const uint64_t *ptrs; /* dest i's address (host pointer or emulated device pointer) */
    int device;           /* -1 host */
    size_t n;             /* destinations */
    size_t *order;        /* reports, in order */
    size_t n_reports;
    unsigned char *reported; /* per dest */
    size_t stop_after;       /* return nonzero on this report (0 = never) */
};

static int on_ready(void *user, size_t dest)
{
    struct seen *s = user;
    size_t t;
    const void *got;
    CHECK(dest < s->n);
    CHECK(!s->reported[dest]);
    s->reported[dest] = 1;
    s->order[s->n_reports++] = dest;
    t = s->which[dest];
    got =
        s->device < 0 ? (const void *)(uintptr_t)s->ptrs[dest] : s3d_device_emu_view(s->ptrs[dest]);
    if (s->ts->src[t].nbytes > 0)
        CHECK(memcmp(got, s->ts->data[t], s->ts->src[t].nbytes) == 0);
    return s->stop_after != 0 && s->n_reports == s->stop_after;
}

/* Reads every tensor of uri in file order, or the reverse, with on_ready; returns what
 * s3d_reader_read returned, the reports in *s (freed by the caller with seen_free). */
static int read_ready(struct s3d_client *c, const char *uri, const struct t_tensors *ts, int device,
                      int reverse, size_t stop_after, struct seen *s)
{
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest *d = calloc(ts->n, sizeof(*d));
    size_t *which = calloc(ts->n, sizeof(*which));
    uint64_t *ptrs = calloc(ts->n, sizeof(*ptrs));
    struct s3d_read_options ro = {.struct_size = sizeof(ro), .on_ready = on_ready, .ready_user = s};
    int rc;

    CHECK(d != NULL && which != NULL && ptrs != NULL);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    memset(s, 0, sizeof(*s));
    s->ts = ts;
    s->which = which;
    s->ptrs = ptrs;
    s->device = device;
    s->n = ts->n;
    s->order = calloc(ts->n, sizeof(*s->order));
    s->reported = calloc(ts->n, 1);
    s->stop_after = stop_after;
    for (size_t i = 0; i < ts->n; i++) {
        size_t t = reverse ? ts->n - 1 - i : i, idx;
        uint64_t nb = ts->src[t].nbytes;
        void *junk = malloc(nb + 1);
        memset(junk, 0xA5, nb + 1);
        CHECK_OK(s3d_reader_find(r, ts->src[t].name, &idx));
        which[i] = t;
        ptrs[i] = device < 0 ? (uint64_t)(uintptr_t)junk : t_emu_copy(junk, nb + 1);
        if (device >= 0)
            free(junk);
        d[i].index = idx;
        d[i].ptr = (void *)(uintptr_t)ptrs[i];
        d[i].device = device;
        d[i].capacity = nb;
    }
    CHECK(ts->n <= 64);
    memcpy(s->which_at, which, ts->n * sizeof(*which));
    rc = s3d_reader_read(r, d, ts->n, &ro);
    s3d_reader_close(r);
    for (size_t i = 0; i < ts->n; i++) {
        if (device < 0)
            free((void *)(uintptr_t)ptrs[i]);
        else
            t_emu_free(ptrs[i]);
    }
    free(d);
    free(which);
    free(ptrs);
    s->which = NULL;
    s->ptrs = NULL;
    return rc;
}

static void seen_free(struct seen *s)
{
    free(s->order);
    free(s->reported);
}

/* All reported, once each, zero-byte destinations first. order 1: exactly in array order;
 * order 2: the first reported in the first third of the array, the last in the last third. */
static void check_all(const struct seen *s, const struct t_tensors *ts, int order)
{
    size_t last = 0, first = SIZE_MAX, nonempty = 0;
    CHECK_EQ_U64(s->n_reports, s->n);
    for (size_t k = 0; k < s->n_reports; k++) {
        size_t i = s->order[k];
        if (ts->src[s->which_at[i]].nbytes == 0) {
            CHECK(nonempty == 0);
            continue;
        }
        if (order == 1 && nonempty > 0)
            CHECK(i > last);
        if (first == SIZE_MAX)
            first = i;
        last = i;
        nonempty++;
    }
    if (order == 2) {
        CHECK(first < s->n / 3);
        CHECK(last >= s->n - s->n / 3);
    }
}

static void one_place(struct s3d_client *c, struct s3d_client *c1, const char *uri,
                      const struct t_tensors *ts, int device)
{
    struct seen s;
    /* Any concurrency: everything, once, bytes in place. */
    CHECK_OK(read_ready(c, uri, ts, device, 1, 0, &s));
    check_all(&s, ts, 0);
    seen_free(&s);
    /* One request at a time: the array's order. */
    CHECK_OK(read_ready(c1, uri, ts, device, 0, 0, &s));
    check_all(&s, ts, 1);
    seen_free(&s);
    CHECK_OK(read_ready(c1, uri, ts, device, 1, 0, &s));
    check_all(&s, ts, 2);
    seen_free(&s);
    /* Stopped by the caller on the 5th report: nothing after it. */
    CHECK_ERR(read_ready(c, uri, ts, device, 1, 5, &s), S3D_ECANCELED);
    CHECK_EQ_U64(s.n_reports, 5);
    seen_free(&s);
}

/* A copy of the object at uri (bucket/key) with one byte of tensor t flipped, at key2. */
static void corrupt_copy(struct s3d_client *c, const char *bucket, const char *key,
                         const char *key2, const char *name)
{
    struct s3d_object_info info = {.struct_size = sizeof(info)};
    struct s3d_tensor_info ti = {.struct_size = sizeof(ti)};
    struct s3d_reader *r = NULL;
    char uri[512];
    unsigned char *obj;
    uint64_t n;
    size_t i;
    CHECK_OK(s3d_head_object(c, bucket, key, &info));
    obj = malloc(info.size);
    CHECK_OK(s3d_download_to_buffer(c, bucket, key, 0, UINT64_MAX, obj, info.size, &n, NULL));
    CHECK_EQ_U64(n, info.size);
    snprintf(uri, sizeof(uri), "s3://%s/%s", bucket, key);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    CHECK_OK(s3d_reader_find(r, name, &i));
    CHECK_OK(s3d_reader_tensor(r, i, &ti));
    s3d_reader_close(r);
    obj[ti.offset + ti.nbytes / 2] ^= 0x10;
    CHECK_OK(s3d_upload_from_buffer(c, bucket, key2, obj, info.size, NULL));
    free(obj);
}

int main(void)
{
    struct s3d_client *c, *c1;
    struct t_tensors ts;
    char bucket[128], uri[512], path[512];
    size_t bad = 0;
    struct seen s;

    (void)t_s3_endpoint(); /* skips without a server */
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    /* Small parts and pool: tensors span several jobs, jobs hold several tensors. */
    c = t_s3_client_at(t_s3_endpoint(), 1 << 20, 8);
    c1 = t_s3_client_at(t_s3_endpoint(), 1 << 20, 1);
    t_s3_bucket(c, "ready", bucket, sizeof(bucket));
    t_make_tensors(&ts, 30, 300000, 36);

    snprintf(uri, sizeof(uri), "s3://%s/m.safetensors", bucket);
    CHECK_OK(s3d_checkpoint_write(c, uri, ts.src, ts.n, NULL, 0, NULL));
    snprintf(path, sizeof(path), "%s/ready-%d.safetensors", t_tmpdir(), (int)getpid());
    CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, NULL));
    one_place(c, c1, uri, &ts, -1);
    one_place(c, c1, uri, &ts, 0);
    one_place(c, c1, path, &ts, -1);
    one_place(c, c1, path, &ts, 0);

    /* A corrupted tensor in the middle of the order: the read fails naming it, and it is never
     * reported (others may be). */
    for (size_t t = ts.n / 2; t < ts.n && ts.src[bad = t].nbytes < 1000; t++)
        ;
    CHECK(ts.src[bad].nbytes >= 1000);
    corrupt_copy(c, bucket, "m.safetensors", "bad.safetensors", ts.src[bad].name);
    snprintf(uri, sizeof(uri), "s3://%s/bad.safetensors", bucket);
    for (int device = -1; device <= 0; device++) {
        CHECK_ERR(read_ready(c, uri, &ts, device, 1, 0, &s), S3D_ECHECKSUM);
        CHECK_MSG_HAS(ts.src[bad].name);
        CHECK(!s.reported[ts.n - 1 - bad]);
        CHECK(s.n_reports < ts.n);
        seen_free(&s);
    }

    unlink(path);
    t_free_tensors(&ts);
    s3d_client_free(c1);
    s3d_client_free(c);
    printf("ok\n");
    return 0;
}
