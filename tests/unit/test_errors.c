/* test_errors.c - error names, messages and the per-thread detail. */
#include <pthread.h>

#define S3D_LAST_ERROR_OK /* the public call is what is tested */
#include "common/error.h"
#include "testutil.h"

static void *other_thread(void *arg)
{
    (void)arg;
    /* A failure on another thread must not touch this thread's detail. */
    s3d_fail(S3D_EIO, "from the other thread");
    return NULL;
}

/* The calling thread's last error is the GetObject NoSuchKey failure of main, with message. */
static void check_last_is_nosuchkey(const char *message)
{
    struct s3d_error_info info = {.struct_size = sizeof(struct s3d_error_info)};
    s3d_last_error(&info);
    CHECK(info.code == S3D_ENOSUCHKEY);
    CHECK(info.http_status == 404);
    CHECK_STREQ(info.operation, "GetObject");
    CHECK_STREQ(info.bucket, "b");
    CHECK_STREQ(info.key, "k");
    CHECK_STREQ(info.s3_code, "NoSuchKey");
    CHECK_STREQ(info.request_id, "rid");
    CHECK_STREQ(info.message, message);
}

int main(void)
{
    struct s3d_error_info info = {.struct_size = sizeof(struct s3d_error_info)};
    struct s3d_err_s3 d = {.operation = "GetObject",
                           .bucket = "b",
                           .key = "k",
                           .http_status = 404,
                           .s3_code = "NoSuchKey",
                           .request_id = "rid"};
    struct s3d_err_record saved;
    struct s3d_err_s3 back;
    pthread_t th;

    CHECK_STREQ(s3d_err_name(S3D_ENOSUCHKEY), "S3D_ENOSUCHKEY");
    CHECK_STREQ(s3d_err_name(12345), "S3D_UNKNOWN");
    CHECK_STREQ(s3d_strerror(S3D_ENOSUCHKEY), "no such key");
    CHECK_STREQ(s3d_strerror(0), "success");

    /* Codes are distinct and negative. */
#define X_CHECK(name, value, desc) CHECK((value) < 0);
    S3D_ERRNO_MAP(X_CHECK)
#undef X_CHECK

    CHECK(s3d_fail_s3(S3D_ENOSUCHKEY, &d, "GetObject s3://b/k: %s", "missing") == S3D_ENOSUCHKEY);
    check_last_is_nosuchkey("GetObject s3://b/k: missing");

    CHECK(pthread_create(&th, NULL, other_thread, NULL) == 0);
    pthread_join(th, NULL);
    CHECK_STREQ(s3d_last_error_message(), "GetObject s3://b/k: missing");

    s3d_fail_prefix(S3D_ENOSUCHKEY, "loading %s", "ckpt");
    CHECK_STREQ(s3d_last_error_message(), "loading ckpt: GetObject s3://b/k: missing");
    s3d_last_error(&info);
    CHECK_STREQ(info.bucket, "b");

    /* A saved error survives the errors recorded after it and comes back whole (the first
     * failure of an upload across its abort; a worker thread's error handed to the caller). */
    s3d_err_save(&saved, S3D_ENOSUCHKEY);
    s3d_fail(S3D_EIO, "the abort failed");
    s3d_last_error(&info);
    CHECK(info.http_status == 0 && info.bucket[0] == '\0');
    CHECK(s3d_err_restore(&saved) == S3D_ENOSUCHKEY);
    check_last_is_nosuchkey("loading ckpt: GetObject s3://b/k: missing");
    /* Its detail under a new message. */
    s3d_err_record_s3(&saved, &back);
    CHECK(s3d_fail_s3(saved.code, &back, "%s; then more", saved.message) == S3D_ENOSUCHKEY);
    check_last_is_nosuchkey("loading ckpt: GetObject s3://b/k: missing; then more");

    CHECK(s3d_err_from_errno(2 /* ENOENT */) == S3D_ENOENT);
    CHECK(s3d_version() == S3D_VERSION_HEX);
    CHECK_STREQ(s3d_version_string(), S3D_VERSION_STRING);
    printf("ok\n");
    return 0;
}
