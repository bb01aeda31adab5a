/* test_device_host.c - the device layer without a GPU: the host backend refuses ordinals with
 * a clear error, allocates page-aligned memory; the emulated backend defers copies until an
 * event is seen complete, which is what lets the staged file paths be tested here. Also the
 * cuFile error names against cufile.h's list (the only place a wrong name would show is an
 * error message on a GPU machine). */
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

static void host_backend(void)
{
    struct s3d_device *dev;
    CHECK_OK(s3d_device_open(S3D_DEVICE_FORCE_HOST, &dev));
    CHECK(!s3d_device_has_gpu(dev));
    CHECK(s3d_device_count(dev) == 0);
    CHECK_STREQ(s3d_device_backend(dev), "host");
    CHECK_STREQ(s3d_device_why_host(dev), "forced");

    int is_dev = 7, ord = 7;
    int x = 0; /* only its address is looked up */
    CHECK_OK(s3d_device_pointer_info(dev, &x, &is_dev, &ord));
    CHECK(is_dev == 0 && ord == -1);

    void *p;
    CHECK_OK(s3d_device_host_alloc(dev, 3 * 4096 + 5, &p));
    CHECK(((uintptr_t)p & 4095) == 0);
    memset(p, 0xab, 3 * 4096 + 5);
    s3d_device_host_free(dev, p, 3 * 4096 + 5);
    CHECK_ERR(s3d_device_host_alloc(dev, 0, &p), S3D_EINVAL);
    CHECK(p == NULL);

    struct s3d_stream *s;
    CHECK_ERR(s3d_device_stream_new(dev, 0, &s), S3D_ENODEVICE);
    CHECK(s == NULL);
    CHECK_MSG_HAS("no GPU available (forced)");
    struct s3d_event *e;
    CHECK_ERR(s3d_device_event_new(dev, 0, &e), S3D_ENODEVICE);
    CHECK_ERR(s3d_device_make_current(dev, 0), S3D_ENODEVICE);
    uint64_t d;
    CHECK_ERR(s3d_device_mem_alloc(dev, 0, 16, &d), S3D_ENODEVICE);
    const char *why = NULL;
    CHECK(s3d_cufile_available(dev, -1, &why) == 0);
    CHECK_STREQ(why, "no GPU");
    struct s3d_cufile *cf;
    CHECK_ERR(s3d_cufile_open(dev, -1, 0, &cf), S3D_ENOTSUP);
    CHECK_MSG_HAS("cuFile not available");
    s3d_device_free(dev);
    s3d_device_free(NULL);
    CHECK_ERR(s3d_device_open(64, &dev), S3D_EINVAL);
}

/* Without an NVIDIA driver on this machine, opening normally must give the host backend with
 * the dlopen reason, not an error. With a driver (GPU machine) it gives "cuda". */
static void auto_backend(void)
{
    struct s3d_device *dev;
    CHECK_OK(s3d_device_open(0, &dev));
    printf("auto backend: %s (%s)\n", s3d_device_backend(dev), s3d_device_why_host(dev));
    if (strcmp(s3d_device_backend(dev), "host") == 0) {
        CHECK(strstr(s3d_device_why_host(dev), "libcuda") != NULL ||
              strstr(s3d_device_why_host(dev), "cu") != NULL);
        CHECK(!s3d_device_has_gpu(dev));
    } else {
        CHECK_STREQ(s3d_device_backend(dev), "cuda");
        CHECK(s3d_device_count(dev) > 0);
    }
    s3d_device_free(dev);
}

static void emulated_backend(void)
{
    struct s3d_device *dev;
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev));
    CHECK(s3d_device_has_gpu(dev));
    CHECK(s3d_device_count(dev) == 1);
    CHECK_STREQ(s3d_device_backend(dev), "emulated");
    CHECK_ERR(s3d_device_make_current(dev, 1), S3D_ENODEVICE);
    CHECK_MSG_HAS("only 1 device");
    CHECK_OK(s3d_device_make_current(dev, 0));

    uint64_t dmem;
    CHECK_OK(s3d_device_mem_alloc(dev, 0, 1 << 20, &dmem));
    unsigned char *devp = s3d_device_emu_view(dmem); /* dmem itself is not host-accessible */
    void *hv;
    CHECK_OK(s3d_device_host_alloc(dev, 1 << 20, &hv));
    unsigned char *host = hv;

    struct s3d_stream *s;
    struct s3d_event *e;
    CHECK_OK(s3d_device_stream_new(dev, 0, &s));
    CHECK(s3d_device_stream_ordinal(s) == 0);
    CHECK_OK(s3d_device_event_new(dev, 0, &e));
    CHECK(s3d_device_event_query(dev, e) == 1); /* never recorded: complete */

    /* A copy is not performed when queued: the source may not be reused yet. */
    memset(devp, 0, 1 << 20);
    memset(host, 1, 4096);
    CHECK_OK(s3d_device_copy_htod(dev, s, dmem, host, 4096));
    CHECK(devp[0] == 0);
    CHECK_OK(s3d_device_event_record(dev, e, s));
    CHECK(s3d_device_event_query(dev, e) == 0); /* first query: pending */
    memset(host, 2, 4096);                      /* a bug: reused before done */
    CHECK(s3d_device_event_query(dev, e) == 1);
    CHECK(devp[0] == 2 && devp[4095] == 2); /* the bug shows as wrong bytes */

    /* Copies after the event's record are not performed by it. */
    memset(host, 3, 8192);
    CHECK_OK(s3d_device_copy_htod(dev, s, dmem, host, 4096));
    CHECK_OK(s3d_device_event_record(dev, e, s));
    CHECK_OK(s3d_device_copy_htod(dev, s, dmem + 4096, host + 4096, 4096));
    CHECK_OK(s3d_device_event_sync(dev, e));
    CHECK(devp[0] == 3 && devp[4096] == 0);
    CHECK_OK(s3d_device_stream_sync(dev, s));
    CHECK(devp[4096] == 3);

    /* Device to host, then an event that outlives its stream. */
    memset(devp, 9, 100);
    memset(host, 0, 100);
    CHECK_OK(s3d_device_copy_dtoh(dev, s, host, dmem, 100));
    CHECK_OK(s3d_device_event_record(dev, e, s));
    CHECK(host[0] == 0);
    CHECK_OK(s3d_device_wait_external(dev, s, 0));
    s3d_device_stream_free(dev, s); /* performs what is queued */
    CHECK(host[0] == 9 && host[99] == 9);
    CHECK(s3d_device_event_query(dev, e) == 0);
    CHECK(s3d_device_event_query(dev, e) == 1);
    CHECK_OK(s3d_device_event_sync(dev, e));

    /* Zero-length copies are no-ops; mismatched ordinals are refused. */
    CHECK_OK(s3d_device_stream_new(dev, 0, &s));
    CHECK_OK(s3d_device_copy_htod(dev, s, dmem, host, 0));
    const char *why;
    CHECK(s3d_cufile_available(dev, -1, &why) == 0);
    CHECK_STREQ(why, "emulated device");
    s3d_device_stream_free(dev, s);
    s3d_device_event_free(dev, e);
    s3d_device_host_free(dev, hv, 1 << 20);
    s3d_device_mem_free(dev, 0, dmem);
    s3d_device_free(dev);
}

/* Every CUfileOpError of cufile.h (cuFile 1.15, CUFILEOP_STATUS_ENTRIES: CUFILEOP_BASE_ERR 5000
 * + n; 5021 and 5032 are unused), and codes around them that it does not define. */
static void cufile_error_names(void)
{
    static const struct {
        int code;
        const char *name;
    } table[] = {
        {0, "CU_FILE_SUCCESS"},
        {5001, "CU_FILE_DRIVER_NOT_INITIALIZED"},
        {5002, "CU_FILE_DRIVER_INVALID_PROPS"},
        {5003, "CU_FILE_DRIVER_UNSUPPORTED_LIMIT"},
        {5004, "CU_FILE_DRIVER_VERSION_MISMATCH"},
        {5005, "CU_FILE_DRIVER_VERSION_READ_ERROR"},
        {5006, "CU_FILE_DRIVER_CLOSING"},
        {5007, "CU_FILE_PLATFORM_NOT_SUPPORTED"},
        {5008, "CU_FILE_IO_NOT_SUPPORTED"},
        {5009, "CU_FILE_DEVICE_NOT_SUPPORTED"},
        {5010, "CU_FILE_NVFS_DRIVER_ERROR"},
        {5011, "CU_FILE_CUDA_DRIVER_ERROR"},
        {5012, "CU_FILE_CUDA_POINTER_INVALID"},
        {5013, "CU_FILE_CUDA_MEMORY_TYPE_INVALID"},
        {5014, "CU_FILE_CUDA_POINTER_RANGE_ERROR"},
        {5015, "CU_FILE_CUDA_CONTEXT_MISMATCH"},
        {5016, "CU_FILE_INVALID_MAPPING_SIZE"},
        {5017, "CU_FILE_INVALID_MAPPING_RANGE"},
        {5018, "CU_FILE_INVALID_FILE_TYPE"},
        {5019, "CU_FILE_INVALID_FILE_OPEN_FLAG"},
        {5020, "CU_FILE_DIO_NOT_SET"},
        {5022, "CU_FILE_INVALID_VALUE"},
        {5023, "CU_FILE_MEMORY_ALREADY_REGISTERED"},
        {5024, "CU_FILE_MEMORY_NOT_REGISTERED"},
        {5025, "CU_FILE_PERMISSION_DENIED"},
        {5026, "CU_FILE_DRIVER_ALREADY_OPEN"},
        {5027, "CU_FILE_HANDLE_NOT_REGISTERED"},
        {5028, "CU_FILE_HANDLE_ALREADY_REGISTERED"},
        {5029, "CU_FILE_DEVICE_NOT_FOUND"},
        {5030, "CU_FILE_INTERNAL_ERROR"},
        {5031, "CU_FILE_GETNEWFD_FAILED"},
        {5033, "CU_FILE_NVFS_SETUP_ERROR"},
        {5034, "CU_FILE_IO_DISABLED"},
        {5035, "CU_FILE_BATCH_SUBMIT_FAILED"},
        {5036, "CU_FILE_GPU_MEMORY_PINNING_FAILED"},
        {5037, "CU_FILE_BATCH_FULL"},
        {5038, "CU_FILE_ASYNC_NOT_SUPPORTED"},
        {5039, "CU_FILE_INTERNAL_BATCH_SETUP_ERROR"},
        {5040, "CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR"},
        {5041, "CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR"},
        {5042, "CU_FILE_INTERNAL_BATCH_CANCEL_ERROR"},
        {5043, "CU_FILE_NOMEM_ERROR"},
        {5044, "CU_FILE_IO_ERROR"},
        {5045, "CU_FILE_INTERNAL_BUF_REGISTER_ERROR"},
        {5046, "CU_FILE_HASH_OPR_ERROR"},
        {5047, "CU_FILE_INVALID_CONTEXT_ERROR"},
        {5048, "CU_FILE_NVFS_INTERNAL_DRIVER_ERROR"},
        {5049, "CU_FILE_BATCH_NOCOMPAT_ERROR"},
        {5050, "CU_FILE_IO_MAX_ERROR"},
        /* not in the header */
        {5021, "CU_FILE_?"},
        {5032, "CU_FILE_?"},
        {5000, "CU_FILE_?"},
        {5051, "CU_FILE_?"},
        {-5044, "CU_FILE_?"},
        {1, "CU_FILE_?"},
        {44, "CU_FILE_?"},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const char *got = s3d_cufile_err_name(table[i].code);
        if (strcmp(got, table[i].name) != 0) {
            fprintf(stderr, "cuFile code %d: named %s, cufile.h says %s\n", table[i].code, got,
                    table[i].name);
            CHECK(0);
        }
    }
}

int main(void)
{
    cufile_error_names();
    host_backend();
    auto_backend();
    emulated_backend();
    return 0;
}
