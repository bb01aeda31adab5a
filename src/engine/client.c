/* client.c - the client object, its configuration and cancel tokens. */
#include "engine/client_impl.h"
#include "device/device.h"
#include "engine/resources.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "common/opts.h"

/* Descriptors kept free beside the connections: the files a transfer writes, libcurl's
 * wake-up pairs, DNS, the caller's own. */
#define FD_RESERVE 16

uint32_t s3d_fd_clamp(uint32_t want)
{
    struct rlimit rl;
    struct dirent *e;
    uint64_t used = 0, left;
    DIR *d;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return want;
    d = opendir("/proc/self/fd");
    if (d == NULL)
        return want;
    while ((e = readdir(d)) != NULL)
        used += e->d_name[0] != '.';
    closedir(d);
    left =
        (uint64_t)rl.rlim_cur > used + FD_RESERVE ? (uint64_t)rl.rlim_cur - used - FD_RESERVE : 1;
    if (want <= left)
        return want;
    S3D_INFO("concurrency %u lowered to %u: %llu file descriptors are open of the %llu allowed "
             "(ulimit -n)",
             want, (unsigned)left, (unsigned long long)used, (unsigned long long)rl.rlim_cur);
    return (uint32_t)left;
}

int s3d_client_new(const struct s3d_client_options *opts, struct s3d_client **out)
{
    struct s3d_client_options o;
    const struct s3d_config *cfg;
    struct s3d_client *c;
    int rc;

    if (out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_client_new: out is NULL");
    *out = NULL;
    s3d_opts_copy(&o, sizeof(o), opts);
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory creating the client");
    if (o.max_concurrency > S3D_MAX_CONCURRENCY) {
        free(c);
        return s3d_fail(S3D_EINVAL, "max_concurrency %u is over %u", o.max_concurrency,
                        S3D_MAX_CONCURRENCY);
    }
    if (o.min_concurrency > S3D_MAX_CONCURRENCY ||
        (o.max_concurrency != 0 && o.min_concurrency > o.max_concurrency)) {
        free(c);
        return s3d_fail(S3D_EINVAL, "min_concurrency %u is over max_concurrency %u",
                        o.min_concurrency,
                        o.max_concurrency ? o.max_concurrency : S3D_MAX_CONCURRENCY);
    }
    if (o.device != 0 && o.device != -1) {
        /* client.h: other values are reserved. A rank's GPU is not chosen here (each transfer
         * uses its tensors' devices), so a value meant as "use GPU k" must not pass unseen. */
        free(c);
        return s3d_fail(S3D_EINVAL,
                        "device %d is reserved: use -1 (never use a GPU) or 0 (find one at run "
                        "time; each transfer uses its tensors' devices)",
                        (int)o.device);
    }
    rc = s3d_s3ctx_init(&c->s3, &o, 0);
    if (rc < 0) {
        free(c);
        return rc;
    }
    /* Each setting: the options, else the profile's s3 section (as the AWS CLI names it),
     * else the default. The threshold defaults to the part size, as in the AWS CLI (8 MB). */
    cfg = &c->s3.cfg;
    c->max_concurrency = o.max_concurrency      ? o.max_concurrency
                         : cfg->max_concurrency ? cfg->max_concurrency
                                                : S3D_DEFAULT_CONCURRENCY;
    c->part_size = o.part_size      ? o.part_size
                   : cfg->part_size ? cfg->part_size
                                    : S3D_DEFAULT_PART_SIZE;
    c->multipart_threshold = o.multipart_threshold      ? o.multipart_threshold
                             : cfg->multipart_threshold ? cfg->multipart_threshold
                                                        : c->part_size;
    c->staging_bytes = o.staging_bytes ? o.staging_bytes : S3D_DEFAULT_STAGING_BYTES;
    c->device_opt = o.device;
    c->pid = getpid();
    c->max_concurrency = s3d_fd_clamp(c->max_concurrency);
    c->min_concurrency = o.min_concurrency ? S3D_MIN(o.min_concurrency, c->max_concurrency) : 1;
    c->target_throughput = cfg->target_throughput;
    s3d_conc_shared_init(&c->conc, c->min_concurrency, c->max_concurrency, c->target_throughput);
    c->s3.max_host_connections = c->max_concurrency;
    pthread_mutex_init(&c->lazy_lock, NULL);
    atomic_init(&c->refs, 1);
    *out = c;
    return 0;
}

void s3d_client_ref(struct s3d_client *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void s3d_client_unref(struct s3d_client *c)
{
    unsigned was;
    if (c == NULL)
        return;
    /* acq_rel: the thread that frees sees every other user's writes to the client. */
    was = atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel);
    S3D_ASSERT(was > 0);
    if (was != 1)
        return;
    if (getpid() != c->pid) {
        /* Freed in a forked child: the connections (and a GPU context) are the parent's.
         * Closing them here would send TLS close_notify on sockets the parent still uses;
         * the child leaks them instead. */
        return;
    }
    s3d_client_free_resources(c); /* staging pool, then the device layer */
    s3d_s3ctx_cleanup(&c->s3);
    s3d_conc_shared_cleanup(&c->conc);
    pthread_mutex_destroy(&c->lazy_lock);
    free(c);
}

void s3d_client_free(struct s3d_client *c)
{
    if (c == NULL || getpid() != c->pid)
        return; /* a forked child leaks the parent's client (see s3d_client_unref) */
    s3d_client_unref(c);
}

size_t s3d_client_buffers(const struct s3d_client *c, uint32_t max_conc, uint64_t part_size)
{
    uint64_t n;
    if (max_conc == 0)
        max_conc = 1;
    if (c->min_concurrency >= c->max_concurrency)
        return max_conc;
    n = part_size ? c->staging_bytes / part_size : max_conc;
    n = S3D_MAX(n, (uint64_t)S3D_MIN(c->min_concurrency, max_conc));
    n = S3D_MAX(n, 2u);
    return (size_t)S3D_MIN(n, (uint64_t)max_conc);
}

int s3d_client_check(const struct s3d_client *c)
{
    pid_t now;
    if (c == NULL)
        return s3d_fail(S3D_EINVAL, "client is NULL");
    now = getpid();
    if (now != c->pid)
        return s3d_fail(S3D_EINVAL,
                        "client created in process %ld used in process %ld after fork(): "
                        "create a new client in the child",
                        (long)c->pid, (long)now);
    return 0;
}

static int config_fill(const struct s3d_client *c, struct s3d_client_config *out)
{
    const struct s3d_config *cfg;
    memset(out, 0, sizeof(*out));
    if (c == NULL)
        return s3d_fail(S3D_EINVAL, "client is NULL");
    cfg = &c->s3.cfg;
    out->endpoint_url = cfg->endpoint_url;
    out->region = cfg->region;
    if (c->s3.creds != NULL) {
        s3d_credcache_describe(c->s3.creds, &out->credential_source, &out->access_key_id);
        if (out->credential_source[0] == '\0')
            out->credential_source = "none";
    } else {
        out->access_key_id = "";
        out->credential_source = cfg->credential_source ? cfg->credential_source : "none";
    }
    out->addressing = s3d_config_addressing_resolved(cfg);
    out->max_concurrency = c->max_concurrency;
    out->min_concurrency = c->min_concurrency;
    out->concurrency = s3d_conc_level((struct s3d_conc *)&c->conc);
    out->target_throughput = c->target_throughput;
    out->part_size = c->part_size;
    out->multipart_threshold = c->multipart_threshold;
    out->staging_bytes = c->staging_bytes;
    /* Never opens the device layer: that calls cuInit, and a process that forks after it
     * (DataLoader workers, launchers) has children that cannot use CUDA. Until a GPU
     * transfer opened it, whether there is a GPU is not known here (-1). */
    if (c->device_opt >= 0) {
        struct s3d_device *dev = s3d_client_device_if_open((struct s3d_client *)c);
        out->gpu_available = dev == NULL ? -1 : s3d_device_has_gpu(dev) ? 1 : 0;
    }
    return 0;
}

int s3d_client_get_config(const struct s3d_client *c, struct s3d_client_config *out)
{
    struct s3d_client_config full;
    int rc;
    if (out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_client_get_config: out is NULL");
    rc = config_fill(c, &full);
    s3d_out_copy(out, &full, sizeof(full), S3D_CLIENT_CONFIG_SIZE_V1);
    return rc;
}

int s3d_cancel_new(struct s3d_cancel **out)
{
    struct s3d_cancel *t;
    if (out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_cancel_new: out is NULL");
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        *out = NULL;
        return s3d_fail(S3D_ENOMEM, "out of memory creating a cancel token");
    }
    atomic_init(&t->requested, 0);
    *out = t;
    return 0;
}

void s3d_cancel_request(struct s3d_cancel *cancel)
{
    if (cancel != NULL)
        atomic_store_explicit(&cancel->requested, 1, memory_order_release);
}

int s3d_cancel_requested(const struct s3d_cancel *cancel)
{
    return s3d_cancel_is_set(cancel);
}

void s3d_cancel_free(struct s3d_cancel *cancel)
{
    free(cancel);
}

int s3d_client_set_cancel(struct s3d_client *client, struct s3d_cancel *cancel)
{
    int rc = s3d_client_check(client);
    if (rc < 0)
        return rc;
    atomic_store_explicit(&client->stop, cancel, memory_order_release);
    atomic_store_explicit(&client->s3.stop, cancel != NULL ? &cancel->requested : NULL,
                          memory_order_release);
    return 0;
}
