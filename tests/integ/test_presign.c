/* test_presign.c - a presigned URL works with the plain curl binary (GET and PUT); a tampered
 * one, or one for another key, is refused with 403. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Runs curl on url, returns the HTTP status; the body goes to out_path. */
static int curl_status(const char *method, const char *url, const char *upload,
                       const char *out_path)
{
    char cmd[8192];
    FILE *f;
    int status = -1;
    snprintf(cmd, sizeof(cmd), "curl -s -o '%s' -w '%%{http_code}' -X %s %s%s%s '%s'", out_path,
             method, upload ? "--data-binary @'" : "", upload ? upload : "", upload ? "'" : "",
             url);
    f = popen(cmd, "r");
    CHECK(f != NULL);
    if (fscanf(f, "%d", &status) != 1)
        status = -1;
    pclose(f);
    return status;
}

int main(void)
{
    struct s3d_client *c = t_s3_client();
    char bucket[128], url[4096], bad[4096], body_path[512], up_path[512], buf[64];
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    uint64_t got;
    FILE *f;
    char *sig;

    if (system("curl --version >/dev/null 2>&1") != 0)
        t_skip("no curl binary");
    t_s3_bucket(c, "presign", bucket, sizeof(bucket));
    snprintf(body_path, sizeof(body_path), "%s/body", t_tmpdir());
    snprintf(up_path, sizeof(up_path), "%s/up", t_tmpdir());
    CHECK_OK(s3d_upload_from_buffer(c, bucket, "dir/a key ü.txt", "presigned hello", 15, NULL));

    CHECK_OK(s3d_presign(c, "GET", bucket, "dir/a key ü.txt", 300, url, sizeof(url)));
    CHECK(strstr(url, "X-Amz-Signature=") != NULL);
    CHECK(curl_status("GET", url, NULL, body_path) == 200);
    f = fopen(body_path, "r");
    CHECK(f != NULL);
    memset(buf, 0, sizeof(buf));
    CHECK(fread(buf, 1, sizeof(buf) - 1, f) == 15);
    fclose(f);
    CHECK_STREQ(buf, "presigned hello");

    /* Tampered signature: one hex digit changed. */
    snprintf(bad, sizeof(bad), "%s", url);
    sig = strstr(bad, "X-Amz-Signature=") + strlen("X-Amz-Signature=");
    sig[0] = sig[0] == '0' ? '1' : '0';
    CHECK(curl_status("GET", bad, NULL, body_path) == 403);
    /* Tampered expiry. */
    snprintf(bad, sizeof(bad), "%s", url);
    CHECK(strstr(bad, "X-Amz-Expires=300") != NULL);
    memcpy(strstr(bad, "X-Amz-Expires=300") + strlen("X-Amz-Expires="), "900", 3);
    CHECK(curl_status("GET", bad, NULL, body_path) == 403);

    /* PUT through a presigned URL. */
    f = fopen(up_path, "w");
    CHECK(f != NULL);
    fputs("uploaded by curl", f);
    fclose(f);
    CHECK_OK(s3d_presign(c, "PUT", bucket, "put-by-url", 300, url, sizeof(url)));
    CHECK(curl_status("PUT", url, up_path, body_path) == 200);
    CHECK_OK(s3d_head_object(c, bucket, "put-by-url", &info));
    CHECK_EQ_U64(info.size, 16);
    CHECK_OK(s3d_download_to_buffer(c, bucket, "put-by-url", 0, UINT64_MAX, buf, sizeof(buf), &got,
                                    NULL));
    CHECK(memcmp(buf, "uploaded by curl", 16) == 0);

    /* Errors: too small a buffer; an invalid expiry. */
    CHECK_ERR(s3d_presign(c, "GET", bucket, "k", 300, url, 10), S3D_ETOOBIG);
    CHECK_ERR(s3d_presign(c, "GET", bucket, "k", 0, url, sizeof(url)), S3D_EINVAL);

    CHECK_OK(s3d_delete_object(c, bucket, "dir/a key ü.txt"));
    CHECK_OK(s3d_delete_object(c, bucket, "put-by-url"));
    CHECK_OK(s3d_delete_bucket(c, bucket));
    s3d_client_free(c);
    return 0;
}
