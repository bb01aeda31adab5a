/* test_creds_expired.c - a request answered "ExpiredToken" refreshes the credentials and is
 * resent once, in the multipart engine (a part) and in a single request (DeleteObject); with
 * static credentials there is nothing to refresh and the error (S3D_EEXPIRED) comes back.
 *
 * The credentials come from a credential_process (a shell script that counts its runs and
 * prints the server's keys with an expiration an hour away); the ExpiredToken answer comes
 * from the test proxy (tproxy.c), so the server never sees that request. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "tproxy.h"

static char dir[512], counter[600];

static int runs(void)
{
    FILE *f = fopen(counter, "r");
    int n = 0;
    char line[64];
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n++;
    fclose(f);
    return n;
}

static int count_lines(const char *log, const char *a, const char *b)
{
    int n = 0;
    const char *line = log;
    while (line != NULL && *line != '\0') {
        const char *nl = strchr(line, '\n');
        char buf[4096];
        snprintf(buf, sizeof(buf), "%.*s", (int)(nl ? (size_t)(nl - line) : strlen(line)), line);
        if (strstr(buf, a) != NULL && (b == NULL || strstr(buf, b) != NULL))
            n++;
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

static struct s3d_client *client_at(const char *url, const char *profile)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = url;
    o.profile = profile;
    o.part_size = 5u << 20;
    o.max_concurrency = 2;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    char host[256], bucket[128], path[700], text[2048];
    struct s3d_client *direct, *via;
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    struct tproxy *px;
    struct tproxy_opts po;
    const uint64_t n = 12u << 20;
    char *src = malloc(n);
    FILE *f;
    int port;

    CHECK(src != NULL);
    if (id == NULL || secret == NULL)
        t_skip("no AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for the server");
    setenv("S3D_TEST_RETRY_BASE_MS", "20", 1);
    snprintf(dir, sizeof(dir), "%s/creds_expired", t_tmpdir());
    mkdir(dir, 0700);
    snprintf(counter, sizeof(counter), "%s/runs", dir);
    remove(counter);
    snprintf(path, sizeof(path), "%s/proc.sh", dir);
    f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f,
            "#!/bin/sh\necho run >> '%s'\n"
            "exp=$(date -u -d '+1 hour' +%%Y-%%m-%%dT%%H:%%M:%%SZ)\n"
            "printf '{\"Version\": 1, \"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\", "
            "\"Expiration\": \"%%s\"}' \"$exp\"\n",
            counter, id, secret);
    fclose(f);
    chmod(path, 0700);
    snprintf(text, sizeof(text), "%s/config", dir);
    f = fopen(text, "w");
    CHECK(f != NULL);
    fprintf(f, "[profile proc]\ncredential_process = %s\n", path);
    fclose(f);
    setenv("AWS_CONFIG_FILE", text, 1);

    direct = t_s3_client();
    t_s3_bucket(direct, "credexp", bucket, sizeof(bucket));
    tproxy_parse_endpoint(ep, host, sizeof(host), &port);
    t_fill_random(src, n, 7);

    /* 1. Part 2 answered 400 ExpiredToken: the engine fetches new credentials (a second run of
     * the process) and resends part 2 at once; the upload completes. */
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.cut_c2s_after = po.stall_s2c_after = -1;
    po.fail_request = "partNumber=2&";
    po.fail_status = 400;
    po.fail_code = "ExpiredToken";
    px = tproxy_start(host, port, &po);
    via = client_at(tproxy_url(px), "proc");
    CHECK_OK(s3d_upload_from_buffer(via, bucket, "mp", src, n, NULL));
    CHECK(tproxy_failed_requests(px) == 1);
    fprintf(stderr, "proxy log:\n%s", tproxy_log(px));
    CHECK(count_lines(tproxy_log(px), "PUT /", "partNumber=2&") == 2);
    CHECK(runs() == 2);
    s3d_client_free(via);
    tproxy_stop(px);

    CHECK_OK(s3d_head_object(direct, bucket, "mp", &info));
    CHECK_EQ_U64(info.size, n);

    /* 2. The same for a single request (DeleteObject through s3d_s3_op_run; a HEAD answer has
     * no body to carry the code). */
    remove(counter);
    po.fail_request = "DELETE /";
    px = tproxy_start(host, port, &po);
    via = client_at(tproxy_url(px), "proc");
    CHECK_OK(s3d_delete_object(via, bucket, "mp"));
    CHECK_ERR(s3d_head_object(direct, bucket, "mp", &info), S3D_ENOSUCHKEY);
    CHECK(count_lines(tproxy_log(px), "DELETE /", NULL) == 2);
    CHECK(runs() == 2);
    s3d_client_free(via);
    tproxy_stop(px);

    /* 3. Static credentials (from the environment): nothing to refresh, the error is
     * returned after the one request. */
    px = tproxy_start(host, port, &po);
    via = client_at(tproxy_url(px), NULL);
    CHECK_ERR(s3d_delete_object(via, bucket, "mp"), S3D_EEXPIRED);
    CHECK(strstr(s3d_last_error_message(), "ExpiredToken") != NULL);
    CHECK(count_lines(tproxy_log(px), "DELETE /", NULL) == 1);
    s3d_client_free(via);
    tproxy_stop(px);

    /* 4. A credential_process whose Expiration is already past: refused with S3D_ECREDS
     * naming the time, as the AWS CLI refuses it; nothing is sent with them. */
    snprintf(path, sizeof(path), "%s/stale.sh", dir);
    f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f,
            "#!/bin/sh\n"
            "printf '{\"Version\": 1, \"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\", "
            "\"Expiration\": \"2020-01-02T03:04:05Z\"}'\n",
            id, secret);
    fclose(f);
    chmod(path, 0700);
    snprintf(text, sizeof(text), "%s/config", dir);
    f = fopen(text, "w");
    CHECK(f != NULL);
    fprintf(f, "[profile stale]\ncredential_process = %s\n", path);
    fclose(f);
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.cut_c2s_after = po.stall_s2c_after = -1;
    px = tproxy_start(host, port, &po);
    via = client_at(tproxy_url(px), "stale");
    CHECK_ERR(s3d_head_object(via, bucket, "anything", &info), S3D_ECREDS);
    CHECK(strstr(s3d_last_error_message(), "expired at 2020-01-02T03:04:05Z") != NULL);
    CHECK(count_lines(tproxy_log(px), "HEAD /", NULL) == 0);
    s3d_client_free(via);
    tproxy_stop(px);

    s3d_client_free(direct);
    free(src);
    return 0;
}
