/* bench_gpu.c - transfer rates between files, S3, host memory and the GPU, printed as a table
 * (scripts/gpu-check.sh runs it on a GPU machine). Not a test: it asserts only that data
 * arrived (spot checks), never a speed.
 *
 *   bench_gpu [--dir DIR] [--mib N] [--rows s3|file|all] [--json FILE]
 *             [--origin-root DIR --endpoint URL]
 *
 * --dir: where the scratch file goes (default $TMPDIR or /tmp); --mib: its size (default
 * 1024). --rows: only the S3 rows, only the file and pool rows, or both (default; S3 first).
 * --json: each row appended to FILE as one JSON line the moment it is measured, so a run that
 * is killed keeps the rows it finished. --origin-root/--endpoint: a plain HTTP origin that
 * serves ROOT/BUCKET/KEY for GET /BUCKET/KEY with Range (scripts/nginx-origin.sh, or the C
 * one in gpu-check.sh), for the S3 -> GPU vs S3 -> host rows. S3D_BENCH_EMULATE=1 runs on the
 * emulated device (copies are memcpy): file-path numbers on a machine without a GPU.
 *
 * The staging pool is made as a client makes its own: plain page-aligned memory registered
 * with the driver (s3d_pool_pin, cuMemHostRegister), not cuMemHostAlloc memory. The S3 rows
 * read once untimed first (the read client's connections opened and its pool pinned), so
 * that the timed loads measure transfers, not set-up.
 *
 * Each file row says which path ran, from the library's counters of the bytes each path moved
 * (s3d_file_io_opts.counts, what s3d_read_stats and s3d_write_stats report): "cuFile",
 * "O_DIRECT" or "buffered", or the share of each when several moved bytes (a fallback part
 * way). What the library's debug lines (fileio:, cufile:, taken through s3d_log_set_callback)
 * said is added after "; log: ": cuFile's mode, or why O_DIRECT or cuFile was not used. Only
 * when nothing was counted does the row rely on the lines alone.
 *
 * "cold" runs drop the file from the page cache first (posix_fadvise DONTNEED). */
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "engine/fileio.h"
#include "engine/pool.h"
#include "gpu_util.h"
#include "s3direct/log.h"

static FILE *g_json; /* --json, or NULL */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- which path a file row took: the library's counters, its debug lines ------------------ */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_path_seen[160]; /* what the lines of the current row said, "" = nothing */

static void on_log(void *user, int level, const char *line, size_t len)
{
    (void)user;
    (void)level;
    const char *what = NULL;
    char mode[32] = "";
    const char *m;
    if (len < 7 || (strncmp(line, "fileio:", 7) != 0 && strncmp(line, "cufile:", 7) != 0))
        return;
    if ((m = strstr(line, " by cuFile, mode ")) != NULL) {
        sscanf(m + 17, "%31[a-z0-9-]", mode);
        what = "cuFile";
    } else if (strstr(line, "refuses O_DIRECT") || strstr(line, "O_DIRECT read of") ||
               strstr(line, "no O_DIRECT descriptor") || strstr(line, "is another file")) {
        what = "buffered fallback (O_DIRECT refused)";
    } else if (strstr(line, "cuFile refused") || strstr(line, "compatibility mode only")) {
        what = "staged through the pool (cuFile not used)";
    } else if (strstr(line, "failed") && strstr(line, "staging")) {
        what = "staged through the pool after a cuFile error";
    }
    if (what == NULL)
        return;
    pthread_mutex_lock(&g_log_lock);
    if (g_path_seen[0] == '\0' || strcmp(what, "cuFile") != 0) /* a fallback wins */
        snprintf(g_path_seen, sizeof(g_path_seen), "%s%s%s%s", what, mode[0] ? " (" : "", mode,
                 mode[0] ? ")" : "");
    pthread_mutex_unlock(&g_log_lock);
}

static void path_reset(void)
{
    pthread_mutex_lock(&g_log_lock);
    g_path_seen[0] = '\0';
    pthread_mutex_unlock(&g_log_lock);
}

/* The path of the row just run in mode: the paths that moved its bytes (n), with what the
 * lines said; when nothing was counted, what the lines said, else what mode means. */
static void path_of(int mode, const struct s3d_file_io_counts *n, char *out, size_t cap)
{
    const uint64_t sum = n->cufile + n->direct + n->buffered;
    const struct {
        const char *name;
        uint64_t bytes;
    } p[3] = {{"cuFile", n->cufile}, {"O_DIRECT", n->direct}, {"buffered", n->buffered}};
    pthread_mutex_lock(&g_log_lock);
    if (sum > 0) {
        size_t len = 0;
        out[0] = '\0';
        for (int i = 0; i < 3; i++) {
            if (p[i].bytes == 0 || len >= cap)
                continue;
            if (p[i].bytes == sum)
                len += (size_t)snprintf(out + len, cap - len, "%s", p[i].name);
            else
                len += (size_t)snprintf(out + len, cap - len, "%s%s %.1f%%", len ? " + " : "",
                                        p[i].name, 100.0 * (double)p[i].bytes / (double)sum);
        }
        if (g_path_seen[0] != '\0' && len < cap)
            snprintf(out + len, cap - len, "; log: %s", g_path_seen);
    } else if (g_path_seen[0] != '\0')
        snprintf(out, cap, "%s", g_path_seen);
    else if (mode == S3D_FILE_IO_DIRECT)
        snprintf(out, cap, "O_DIRECT staged (no fallback logged)");
    else if (mode == S3D_FILE_IO_BUFFERED)
        snprintf(out, cap, "buffered");
    else
        snprintf(out, cap, "unknown (no line logged)");
    pthread_mutex_unlock(&g_log_lock);
}

/* ---- output ----------------------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s != NULL && *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void row_path(const char *what, uint64_t bytes, double secs, const char *note,
                     const char *path)
{
    if (secs > 0)
        printf("| %-44s | %8.2f | %s%s%s\n", what, (double)bytes / secs / 1e9, note ? note : "",
               path ? "; path: " : "", path ? path : "");
    else
        printf("| %-44s | %8s | %s\n", what, "n/a", note ? note : "");
    fflush(stdout);
    if (g_json == NULL)
        return;
    fputs("{\"row\": ", g_json);
    json_str(g_json, what);
    if (secs > 0)
        fprintf(g_json, ", \"gbps\": %.4f, \"seconds\": %.4f", (double)bytes / secs / 1e9, secs);
    else
        fputs(", \"gbps\": null, \"seconds\": null", g_json);
    fprintf(g_json, ", \"bytes\": %llu, \"note\": ", (unsigned long long)bytes);
    json_str(g_json, note ? note : "");
    fputs(", \"path\": ", g_json);
    if (path)
        json_str(g_json, path);
    else
        fputs("null", g_json);
    fputs("}\n", g_json);
    fflush(g_json);
}

static void row(const char *what, uint64_t bytes, double secs, const char *note)
{
    row_path(what, bytes, secs, note, NULL);
}

static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        s3d_ignore_rc(fdatasync(fd)); /* best effort: the read below is timed either way */
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

struct ctx {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    uint64_t size;
    uint64_t d; /* device buffer of size bytes */
    unsigned char *host;
    const char *path;
};

/* Host <-> device out of pool chunks: the ceiling for every staged path. */
static void bench_copies(struct ctx *c)
{
    struct s3d_stream *s;
    const size_t cs = s3d_pool_chunk_size(c->pool);
    void *ch[4];
    CHECK_OK(s3d_device_stream_new(c->dev, 0, &s));
    for (int i = 0; i < 4; i++)
        CHECK((ch[i] = s3d_pool_try_get(c->pool)) != NULL);
    for (int dir = 0; dir < 2; dir++) {
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            for (uint64_t off = 0, i = 0; off + cs <= c->size; off += cs, i++) {
                if (dir == 0)
                    CHECK_OK(s3d_device_copy_htod(c->dev, s, c->d + off, ch[i % 4], cs));
                else
                    CHECK_OK(s3d_device_copy_dtoh(c->dev, s, ch[i % 4], c->d + off, cs));
            }
            CHECK_OK(s3d_device_stream_sync(c->dev, s));
            best = S3D_MIN(best, now_s() - t0);
        }
        row(dir == 0 ? "host->GPU client pool chunks (registered)"
                     : "GPU->host client pool chunks (registered)",
            c->size / cs * cs, best, "best of 3");
    }
    for (int i = 0; i < 4; i++)
        s3d_pool_put(c->pool, ch[i]);
    s3d_device_stream_free(c->dev, s);
}

static void bench_read(struct ctx *c, const char *what, int mode, int device, int cold,
                       int with_crc)
{
    uint32_t crc = 0;
    char path[240];
    struct s3d_file_range r = {0, c->size, device ? (void *)(uintptr_t)c->d : c->host,
                               device ? 0 : -1, with_crc ? &crc : NULL};
    struct s3d_file_io_counts n = {0, 0, 0};
    struct s3d_file_io_opts o = {.mode = mode};
    if (cold)
        drop_cache(c->path);
    else
        /* Warm it; the timed read below checks the result. */
        s3d_ignore_rc(s3d_file_read_ranges(c->dev, c->pool, c->path, &r, 1, &o));
    path_reset();
    o.counts = &n;
    double t0 = now_s();
    int rc = s3d_file_read_ranges(c->dev, c->pool, c->path, &r, 1, &o);
    double t = now_s() - t0;
    path_of(mode, &n, path, sizeof(path));
    row_path(what, c->size, rc == 0 ? t : -1,
             rc == 0 ? (cold ? "cold cache" : "warm cache") : s3d_last_error_message(),
             rc == 0 ? path : NULL);
}

static void bench_write(struct ctx *c, const char *what, int mode)
{
    char out[600], path[240];
    struct s3d_file_writer *w = NULL;
    struct s3d_file_seg seg = {(const void *)(uintptr_t)c->d, c->size, 0};
    struct s3d_file_io_counts n = {0, 0, 0};
    struct s3d_file_io_opts o = {.mode = mode, .counts = &n};
    uint32_t crc;
    snprintf(out, sizeof(out), "%s.out", c->path);
    path_reset();
    double t0 = now_s();
    int rc = s3d_file_writer_open(c->dev, c->pool, out, &o, &w);
    if (rc == 0)
        rc = s3d_file_writer_write(w, 0, &seg, 1, &crc);
    if (rc == 0)
        rc = s3d_file_writer_commit(w);
    double t = now_s() - t0;
    path_of(mode, &n, path, sizeof(path));
    row_path(what, c->size, rc == 0 ? t : -1,
             rc == 0 ? "CRC on, incl. fsync" : s3d_last_error_message(), rc == 0 ? path : NULL);
    s3d_file_writer_free(w);
    unlink(out);
}

/* ---- S3 -> GPU vs S3 -> host --------------------------------------------------------------
 * Writes a checkpoint of 4 U8 tensors (size/4 each) under ROOT/bench/ckpt.safetensors with
 * the public API, then loads it from the origin at endpoint as s3://bench/ckpt.safetensors
 * into GPU memory and into host memory, CRC verified (the default). Before the timed loads,
 * one tensor is read untimed into GPU memory: the read client's connections are open and its
 * staging pool pinned (once per client) before the clock starts. Anonymous requests: the
 * origin ignores signatures. */
static void s3_dests(struct ctx *c, struct s3d_tensor_dest *dst, int device, uint64_t each)
{
    for (int i = 0; i < 4; i++) {
        dst[i] = (struct s3d_tensor_dest){(size_t)i, NULL, device ? 0 : -1, each, 0, 0};
        dst[i].ptr = device ? (void *)(uintptr_t)(c->d + i * each)
                            : (void *)(c->host + c->size - (4 - i) * each);
    }
}

/* Returns 0, or 1 when a load failed. */
static int bench_s3(struct ctx *c, const char *root, const char *endpoint)
{
    char dir[600], path[700];
    struct s3d_client *local = NULL, *remote = NULL;
    struct s3d_reader *rd = NULL;
    struct s3d_tensor_dest dst[4];
    int rc, failed = 0;
    snprintf(dir, sizeof(dir), "%s/bench", root);
    mkdir(root, 0755);
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/ckpt.safetensors", dir);

    const uint64_t each = c->size / 4;
    int64_t shape[1] = {(int64_t)each};
    struct s3d_tensor_src t[4];
    char names[4][16];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        t[i] =
            (struct s3d_tensor_src){names[i], S3D_DTYPE_U8, 1, shape, c->host + i * each, -1, each};
    }
    struct s3d_client_options lo = {.struct_size = sizeof(lo), .device = -1};
    rc = s3d_client_new(&lo, &local);
    if (rc == 0)
        rc = s3d_checkpoint_write(local, path, t, 4, NULL, 0, NULL);
    if (rc != 0) {
        row("S3->host / S3->GPU", 0, -1, s3d_last_error_message());
        goto out;
    }
    struct s3d_client_options ro = {.struct_size = sizeof(ro),
                                    .endpoint_url = endpoint,
                                    .anonymous = 1,
                                    .addressing = S3D_ADDRESSING_PATH,
                                    .max_concurrency = 16};
    if ((rc = s3d_client_new(&ro, &remote)) == 0)
        rc = s3d_reader_open(remote, "s3://bench/ckpt.safetensors", &rd);
    s3_dests(c, dst, 1, each);
    double t0 = now_s();
    if (rc == 0) /* warm-up: connections, and the read client's pool pinned */
        rc = s3d_reader_read(rd, dst, 1, NULL);
    if (rc != 0) {
        row("S3 open + warm-up read", 0, -1, s3d_last_error_message());
        goto out;
    }
    printf("warm-up: one tensor (%llu MiB) into GPU memory in %.2f s (untimed below)\n",
           (unsigned long long)(each >> 20), now_s() - t0);
    for (int device = 1; device >= 0; device--) {
        s3_dests(c, dst, device, each);
        t0 = now_s();
        rc = s3d_reader_read(rd, dst, 4, NULL);
        double secs = now_s() - t0;
        failed |= rc != 0;
        row(device ? "S3->GPU (reader, CRC verified, warm client)"
                   : "S3->host (reader, CRC verified, warm client)",
            4 * each, rc == 0 ? secs : -1, rc == 0 ? endpoint : s3d_last_error_message());
    }
out:
    s3d_reader_close(rd);
    s3d_client_free(remote);
    s3d_client_free(local);
    unlink(path);
    return rc != 0 || failed;
}

static void bench_files(struct ctx *c)
{
    char path[600];
    snprintf(path, sizeof(path), "%s", c->path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, c->host, c->size) == (ssize_t)c->size);
    fsync(fd);
    close(fd);
    bench_copies(c);
    bench_read(c, "file->GPU cuFile", S3D_FILE_IO_CUFILE, 1, 1, 0);
    bench_read(c, "file->GPU cuFile + CRC (D2H pass)", S3D_FILE_IO_CUFILE, 1, 1, 1);
    bench_read(c, "file->GPU O_DIRECT via pool", S3D_FILE_IO_DIRECT, 1, 1, 0);
    bench_read(c, "file->GPU O_DIRECT via pool + CRC", S3D_FILE_IO_DIRECT, 1, 1, 1);
    bench_read(c, "file->GPU buffered via pool", S3D_FILE_IO_BUFFERED, 1, 1, 0);
    bench_read(c, "file->GPU buffered via pool", S3D_FILE_IO_BUFFERED, 1, 0, 0);
    bench_read(c, "file->host pread", S3D_FILE_IO_BUFFERED, 0, 1, 0);
    bench_read(c, "file->host pread", S3D_FILE_IO_BUFFERED, 0, 0, 0);
    bench_read(c, "file->host O_DIRECT (aligned dst)", S3D_FILE_IO_DIRECT, 0, 1, 0);
    /* The GPU buffer holds the file now (last device read): write it back. */
    bench_write(c, "GPU->file via pool (DIRECT mode)", S3D_FILE_IO_DIRECT);
    bench_write(c, "GPU->file cuFile", S3D_FILE_IO_CUFILE);
    unlink(path);
}

int main(int argc, char **argv)
{
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    const char *root = NULL, *endpoint = NULL, *rows = "all", *json = NULL;
    uint64_t mib = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--origin-root") && i + 1 < argc)
            root = argv[++i];
        else if (!strcmp(argv[i], "--endpoint") && i + 1 < argc)
            endpoint = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gpu [--dir DIR] [--mib N] [--rows s3|file|all] "
                            "[--json FILE] [--origin-root DIR --endpoint URL]\n");
            return 2;
        }
    }
    if (json != NULL && (g_json = fopen(json, "a")) == NULL) {
        perror(json);
        return 2;
    }
    struct ctx c = {0};
    const char *emu = getenv("S3D_BENCH_EMULATE");
    if (emu != NULL && emu[0] == '1') {
        CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &c.dev));
        setenv("S3D_DEVICE_EMULATE", "1", 1); /* the S3 rows' clients too */
    } else
        c.dev = gpu_open_or_skip();
    c.size = mib << 20;
    /* As a client makes its pool: plain memory, then registered (resources.c). */
    CHECK_OK(s3d_pool_new(NULL, 0, 0, &c.pool));
    CHECK_OK(s3d_pool_pin(c.pool, c.dev, 0));
    CHECK_OK(s3d_device_mem_alloc(c.dev, 0, c.size, &c.d));
    CHECK_OK(s3d_device_host_alloc(c.dev, c.size, (void **)&c.host));
    t_fill_random(c.host, c.size, 3);
    s3d_log_set_callback(on_log, NULL, S3D_LOG_DEBUG);

    char path[600];
    snprintf(path, sizeof(path), "%s/s3d-bench-%ld.bin", dir, (long)getpid());
    c.path = path;
    const char *why = NULL;
    int cuf = s3d_cufile_available(c.dev, 0, &why);
    printf("backend: %s, cuFile: %s, crc32c: %s, file: %s (%llu MiB), pool %zu x %zu MiB "
           "(registered: %s)\n",
           s3d_device_backend(c.dev), cuf ? "available" : why, s3d_crc32c_impl(), path,
           (unsigned long long)mib, s3d_pool_chunk_count(c.pool), s3d_pool_chunk_size(c.pool) >> 20,
           s3d_pool_is_pinned(c.pool) ? "yes" : "no");
    if (cuf)
        printf("cuFile driver mode: %s\n", s3d_cufile_mode_name(s3d_cufile_driver_mode()));
    {
        /* Where s3d_pool_pin placed the pool (issue 39): proven only on a GPU host. */
        char nwhy[512];
        int node = s3d_device_numa_node(c.dev, 0, nwhy, sizeof(nwhy));
        if (node >= 0)
            printf("staging pool: prefers NUMA node %d, cuda:0's\n", node);
        else
            printf("staging pool: no NUMA node: %s\n", nwhy);
    }
    printf("| %-44s | %8s | %s\n", "path", "GB/s", "note");
    printf("|%s|%s|%s\n", "----------------------------------------------", "----------", "------");
    int failed = 0;
    if (strcmp(rows, "file") != 0) {
        if (root != NULL && endpoint != NULL)
            failed = bench_s3(&c, root, endpoint);
        else
            row("S3->GPU vs S3->host", 0, -1, "no origin given (--origin-root, --endpoint)");
    }
    if (strcmp(rows, "s3") != 0)
        bench_files(&c);

    s3d_log_set_callback(NULL, NULL, 0);
    s3d_device_host_free(c.dev, c.host, c.size);
    s3d_device_mem_free(c.dev, 0, c.d);
    s3d_pool_free(c.pool);
    s3d_device_free(c.dev);
    if (g_json != NULL)
        fclose(g_json);
    return failed;
}
