/* api_ckpt_write.c - s3d_checkpoint_write, the public save: checks its arguments, opens the
 * device layer and the staging pool only for device tensors (or O_DIRECT files), opens the
 * base of an incremental save, then hands the work to one object (ckpt_write.c) or to the
 * sharded save (ckpt_shards.c), and fills the stats. Apart from both so that neither of
 * those calls the other's entry point. */
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/opts.h"
#include "device/device.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_delta.h"
#include "engine/ckpt_write.h"
#include "engine/client_impl.h"
#include "engine/resources.h"
#include "format/index.h"
#include "s3direct/checkpoint.h"

int s3d_checkpoint_write(struct s3d_client *c, const char *uri,
                         const struct s3d_tensor_src *tensors, size_t n,
                         const struct s3d_metadata_entry *metadata, size_t n_metadata,
                         const struct s3d_write_options *opts)
{
    struct s3d_write_options o;
    struct s3d_device *dev = NULL;
    struct s3d_pool *pool = NULL;
    struct s3d_ckpt_base base;
    struct s3d_loc loc;
    int need_pool = 0, first_device = -1, rc;

    memset(&base, 0, sizeof(base));

    rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if ((tensors == NULL && n > 0) || (metadata == NULL && n_metadata > 0))
        return s3d_fail(S3D_EINVAL, "s3d_checkpoint_write: NULL tensors or metadata");
    rc = s3d_loc_parse(uri, &loc);
    if (rc < 0)
        return rc;
    s3d_opts_copy(&o, sizeof(o), opts);
    if (o.cuda_events == NULL && o.n_cuda_events > 0)
        return s3d_fail(S3D_EINVAL, "s3d_checkpoint_write: n_cuda_events %u without cuda_events",
                        (unsigned)o.n_cuda_events);
    if (o.max_shard_size > 0 && !s3d_str_ends_with(uri, S3D_ST_INDEX_SUFFIX))
        return s3d_fail(S3D_EINVAL,
                        "%s: a sharded checkpoint is named by its index, "
                        "NAME%s",
                        uri, S3D_ST_INDEX_SUFFIX);
    /* Host-only saves never open the device layer: no dlopen of libcuda, no cuInit, no
     * context, no pinned memory (a process that only saved host tensors can fork and use
     * CUDA in the child). */
    for (size_t i = 0; i < n; i++) {
        if (tensors[i].nbytes > 0 && tensors[i].ptr == NULL)
            return s3d_fail(S3D_EINVAL, "tensor '%s': pointer is NULL",
                            tensors[i].name ? tensors[i].name : "(null)");
        if (tensors[i].device >= 0) {
            if (dev == NULL && (rc = s3d_client_device(c, &dev)) < 0)
                return rc;
            if (!s3d_device_has_gpu(dev))
                return s3d_fail(S3D_ENODEVICE,
                                "tensor '%s' is on cuda:%d, but there is no "
                                "GPU (%s)",
                                tensors[i].name ? tensors[i].name : "(null)", tensors[i].device,
                                s3d_device_why_host(dev));
            if (tensors[i].device >= S3D_MAX_DEVICES || tensors[i].device >= s3d_device_count(dev))
                return s3d_fail(S3D_ENODEVICE, "tensor '%s': no device cuda:%d",
                                tensors[i].name ? tensors[i].name : "(null)", tensors[i].device);
            if (!need_pool)
                first_device = tensors[i].device;
            need_pool = 1;
        }
    }
    /* Host tensors are sent from their own memory; only device tensors need staging. */
    if (need_pool || (!loc.is_s3 && o.file_io == S3D_FILE_IO_DIRECT)) {
        rc = s3d_client_pool(c, first_device, &pool);
        if (rc < 0)
            return rc;
    }
    if (o.base != NULL && o.no_checksum)
        S3D_INFO("base %s: not used, a full save: a save without checksums cannot tell "
                 "unchanged tensors",
                 o.base);
    else if ((rc = s3d_delta_base_open(c, o.base, loc.is_s3, &base)) < 0)
        return rc;
    if (o.max_shard_size > 0)
        rc = s3d_ckpt_write_sharded(c, dev, pool, uri, tensors, n, metadata, n_metadata, &base, &o);
    else
        rc = s3d_ckpt_write_one(c, dev, pool, uri, tensors, n, metadata, n_metadata, NULL, &base,
                                &o);
    if (base.r != NULL)
        S3D_INFO("%s: %llu of %llu tensors unchanged in the base %s; %llu bytes copied from it "
                 "(%u parts, %u sent instead), %llu sent",
                 uri, (unsigned long long)base.tensors_reused,
                 (unsigned long long)base.tensors_total, o.base,
                 (unsigned long long)base.bytes_copied, base.parts_copied, base.copies_refused,
                 (unsigned long long)base.bytes_sent);
    s3d_delta_base_close(&base);
    if (rc == 0 && o.stats != NULL) {
        struct s3d_write_stats st;
        memset(&st, 0, sizeof(st));
        st.struct_size = sizeof(st);
        st.bytes_total = base.bytes_total;
        st.bytes_sent = base.bytes_sent;
        st.bytes_copied = base.bytes_copied;
        st.tensors_total = base.tensors_total;
        st.tensors_reused = base.tensors_reused;
        st.parts_copied = base.parts_copied;
        st.copies_refused = base.copies_refused;
        st.base_used = base.base_used;
        st.bytes_cufile = base.io.cufile;
        st.bytes_direct = base.io.direct;
        st.bytes_buffered = base.io.buffered;
        s3d_out_copy(o.stats, &st, sizeof(st), S3D_WRITE_STATS_SIZE_V1);
    }
    return rc;
}
