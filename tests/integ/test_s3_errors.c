/* test_s3_errors.c - each failure has its code and a message that names what failed:
 * wrong secret, unknown key id, missing key, missing bucket, nothing listening, a client
 * used after fork, and detail fields (operation, bucket, key, HTTP status, S3 code). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/xfer.h"
#include "testutil.h"

static struct s3d_client *client_with(const char *url, const char *akid, const char *secret)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = url;
    o.access_key_id = akid;
    o.secret_access_key = secret;
    o.max_attempts = 2;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    const char *akid = getenv("AWS_ACCESS_KEY_ID");
    struct s3d_client *c, *bad;
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    struct s3d_error_info ei = {.struct_size = sizeof(struct s3d_error_info)};
    char bucket[128], buf[16], msg[256];
    pid_t pid;
    int st;

    setenv("S3D_TEST_RETRY_BASE_MS", "10", 1);
    c = t_s3_client();
    t_s3_bucket(c, "errs", bucket, sizeof(bucket));
    CHECK_OK(s3d_upload_from_buffer(c, bucket, "there", "hello", 5, NULL));

    /* Missing key: GET and HEAD; the message names bucket and key. */
    CHECK_ERR(s3d_head_object(c, bucket, "missing/key", &info), S3D_ENOSUCHKEY);
    snprintf(msg, sizeof(msg), "s3://%s/missing/key", bucket);
    CHECK_MSG_HAS(msg);
    s3d_last_error(&ei);
    CHECK(ei.http_status == 404);
    CHECK_STREQ(ei.bucket, bucket);
    CHECK_STREQ(ei.key, "missing/key");
    CHECK_STREQ(ei.operation, "HeadObject");
    CHECK_ERR(s3d_download_to_buffer(c, bucket, "missing/key", 0, UINT64_MAX, buf, sizeof(buf),
                                     NULL, NULL),
              S3D_ENOSUCHKEY);
    CHECK_MSG_HAS(msg);

    /* A GetObject (not HEAD) on a missing key has a body with the S3 code. */
    {
        struct s3d_transfer_options to;
        memset(&to, 0, sizeof(to));
        CHECK_ERR(s3d_copy_object(c, bucket, "missing/key", bucket, "x", &to), S3D_ENOSUCHKEY);
    }

    /* Missing bucket. */
    CHECK_ERR(s3d_list_objects(c, "no-such-bucket-s3d-test", NULL, NULL,
                               (s3d_list_fn)(void (*)(void))abort, NULL),
              S3D_ENOSUCHBUCKET);
    CHECK_MSG_HAS("no-such-bucket-s3d-test");
    CHECK_MSG_HAS("NoSuchBucket");
    s3d_last_error(&ei);
    CHECK_STREQ(ei.s3_code, "NoSuchBucket");
    CHECK(ei.request_id[0] != '\0');

    /* HEAD has no error body: a missing bucket is still told apart from a missing key. */
    {
        struct s3d_object_info oi = {.struct_size = sizeof(struct s3d_object_info)};
        CHECK_ERR(s3d_head_object(c, "no-such-bucket-s3d-test", "k", &oi), S3D_ENOSUCHBUCKET);
        CHECK_MSG_HAS("no such bucket 'no-such-bucket-s3d-test'");
        s3d_last_error(&ei);
        CHECK_STREQ(ei.s3_code, "NoSuchBucket");
        CHECK(ei.http_status == 404);
        CHECK_ERR(s3d_head_object(c, bucket, "missing/key", &oi), S3D_ENOSUCHKEY);
        CHECK_MSG_HAS("missing/key");
        s3d_last_error(&ei);
        CHECK_STREQ(ei.s3_code, "NoSuchKey");
    }

    /* Existing bucket. */
    CHECK_ERR(s3d_create_bucket(c, bucket), S3D_EBUCKETEXISTS);

    /* Range past the end. */
    CHECK_ERR(s3d_download_to_buffer(c, bucket, "there", 6, 1, buf, sizeof(buf), NULL, NULL),
              S3D_ERANGE);
    /* Too small a buffer. */
    CHECK_ERR(s3d_download_to_buffer(c, bucket, "there", 0, UINT64_MAX, buf, 2, NULL, NULL),
              S3D_ETOOBIG);

    /* A range the server refuses (416 InvalidRange), through the engine (no HEAD first). */
    {
        struct s3d_get_job job;
        memset(&job, 0, sizeof(job));
        job.bucket = bucket;
        job.key = "there";
        job.offset = 100;
        job.length = 10;
        job.dst = buf;
        CHECK_ERR(s3d_xfer_get(c, &job, 1, NULL, 0, NULL, NULL, NULL), S3D_ERANGE);
        CHECK_MSG_HAS("416");
    }
    /* An upload id that does not exist. */
    CHECK_ERR(s3d_abort_multipart_upload(c, bucket, "there", "2~nosuchuploadid"), S3D_ENOUPLOAD);
    CHECK_MSG_HAS("NoSuchUpload");

    /* Wrong secret: SignatureDoesNotMatch. */
    bad = client_with(ep, akid, "wrongsecretwrongsecretwrongsecret0000000");
    /* A HEAD's 403 has no body: a 1-byte GET learns the code. */
    CHECK_ERR(s3d_head_object(bad, bucket, "there", &info), S3D_ESIGNATURE);
    CHECK_MSG_HAS("SignatureDoesNotMatch");
    /* Downloads start with a ranged GET, whose error body names the cause. */
    CHECK_ERR(s3d_download_to_buffer(bad, bucket, "there", 0, 5, buf, sizeof(buf), NULL, NULL),
              S3D_ESIGNATURE);
    CHECK_MSG_HAS("SignatureDoesNotMatch");
    {
        char p[512];
        snprintf(p, sizeof(p), "%s/sig.out", t_tmpdir());
        CHECK_ERR(s3d_download_to_file(bad, bucket, "there", p, NULL), S3D_ESIGNATURE);
        /* Opening a checkpoint starts with a ranged GET too. */
        struct s3d_reader *rd = NULL;
        snprintf(p, sizeof(p), "s3://%s/there", bucket);
        CHECK_ERR(s3d_reader_open(bad, p, &rd), S3D_ESIGNATURE);
        CHECK(rd == NULL);
    }
    CHECK_ERR(s3d_list_objects(bad, bucket, NULL, NULL, (s3d_list_fn)(void (*)(void))abort, NULL),
              S3D_ESIGNATURE);
    CHECK_MSG_HAS("SignatureDoesNotMatch");
    CHECK_MSG_HAS("403");
    CHECK_ERR(s3d_upload_from_buffer(bad, bucket, "x", "abc", 3, NULL), S3D_ESIGNATURE);
    s3d_client_free(bad);

    /* Unknown key id. */
    bad = client_with(ep, "NOSUCHKEYID000000000", "whatever000000000000000000000000000000000");
    CHECK_ERR(s3d_list_objects(bad, bucket, NULL, NULL, (s3d_list_fn)(void (*)(void))abort, NULL),
              S3D_EKEYID);
    CHECK_MSG_HAS("InvalidAccessKeyId");
    CHECK_ERR(s3d_head_object(bad, bucket, "there", &info), S3D_EKEYID);
    CHECK_MSG_HAS("InvalidAccessKeyId");
    CHECK_ERR(s3d_download_to_buffer(bad, bucket, "there", 0, 5, buf, sizeof(buf), NULL, NULL),
              S3D_EKEYID);
    s3d_client_free(bad);

    /* Nothing listening: ECONNECT naming the endpoint. */
    bad = client_with("http://127.0.0.1:1", akid, "x");
    CHECK_ERR(s3d_head_object(bad, bucket, "there", &info), S3D_ECONNECT);
    CHECK_MSG_HAS("could not connect to http://127.0.0.1:1: Connection refused");
    s3d_client_free(bad);

    /* Outside us-east-1 CreateBucket sends a LocationConstraint: RGW refuses a region that
     * is not its zonegroup, which proves the body went out. */
    {
        struct s3d_client_options o;
        char b2[160];
        memset(&o, 0, sizeof(o));
        o.endpoint_url = ep;
        o.region = "eu-west-1";
        CHECK_OK(s3d_client_new(&o, &bad));
        snprintf(b2, sizeof(b2), "%s-eu", bucket);
        CHECK_ERR(s3d_create_bucket(bad, b2), S3D_EHTTP);
        CHECK_MSG_HAS("InvalidLocationConstraint");
        s3d_client_free(bad);
    }

    /* A client used in a forked child fails clearly. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int rc = s3d_head_object(c, bucket, "there", &info);
        int ok = rc == S3D_EINVAL && strstr(s3d_last_error_message(), "fork") != NULL;
        s3d_client_free(c); /* must leave the parent's connections alone */
        _exit(ok ? 0 : 1);
    }
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* ... and still works in the parent, over its kept-alive connections. */
    CHECK_OK(s3d_head_object(c, bucket, "there", &info));
    CHECK_OK(s3d_head_object(c, bucket, "there", &info));
    CHECK_EQ_U64(info.size, 5);

    CHECK_OK(s3d_delete_object(c, bucket, "there"));
    CHECK_OK(s3d_delete_object(c, bucket, "there")); /* missing: still fine */
    CHECK_OK(s3d_delete_bucket(c, bucket));
    s3d_client_free(c);
    return 0;
}
