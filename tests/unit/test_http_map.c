/* test_http_map.c - translation of HTTP status + S3 code and of CURLcode into S3D_E* codes,
 * as a table. No server. */
#include "s3/http.h"
#include "common/compiler.h"
#include "testutil.h"

struct status_case {
    long status;
    const char *code;
    int is_object;
    int want;
};

static const struct status_case status_cases[] = {
    {404, "NoSuchKey", 1, S3D_ENOSUCHKEY},
    {404, NULL, 1, S3D_ENOSUCHKEY}, /* HEAD: no body */
    {404, "NoSuchBucket", 1, S3D_ENOSUCHBUCKET},
    {404, "NoSuchBucket", 0, S3D_ENOSUCHBUCKET},
    {404, NULL, 0, S3D_ENOSUCHBUCKET},
    {403, "AccessDenied", 1, S3D_EACCESS},
    {403, NULL, 1, S3D_EACCESS},
    {403, "SignatureDoesNotMatch", 1, S3D_ESIGNATURE},
    {403, "InvalidAccessKeyId", 1, S3D_EKEYID},
    {503, "SlowDown", 1, S3D_ESLOWDOWN},
    {503, NULL, 1, S3D_ESLOWDOWN},
    {500, "InternalError", 1, S3D_ESERVER},
    {502, NULL, 1, S3D_ESERVER},
    {504, "", 1, S3D_ESERVER},
    {416, "InvalidRange", 1, S3D_ERANGE},
    {416, NULL, 1, S3D_ERANGE},
    {404, "NoSuchUpload", 1, S3D_ENOUPLOAD},
    {409, "BucketAlreadyOwnedByYou", 0, S3D_EBUCKETEXISTS},
    {409, "BucketAlreadyExists", 0, S3D_EBUCKETEXISTS},
    {400, "RequestTimeout", 1, S3D_ETIMEDOUT},
    {400, "InvalidArgument", 1, S3D_EHTTP},
    {405, NULL, 1, S3D_EHTTP},
};

struct curl_case {
    CURLcode cc;
    int want;
};

static const struct curl_case curl_cases[] = {
    {CURLE_COULDNT_CONNECT, S3D_ECONNECT},      {CURLE_COULDNT_RESOLVE_HOST, S3D_ECONNECT},
    {CURLE_OPERATION_TIMEDOUT, S3D_ETIMEDOUT},  {CURLE_SSL_CONNECT_ERROR, S3D_ETLS},
    {CURLE_PEER_FAILED_VERIFICATION, S3D_ETLS}, {CURLE_SSL_CACERT_BADFILE, S3D_ETLS},
    {CURLE_RECV_ERROR, S3D_ENETWORK},           {CURLE_SEND_ERROR, S3D_ENETWORK},
    {CURLE_PARTIAL_FILE, S3D_ENETWORK},         {CURLE_GOT_NOTHING, S3D_ENETWORK},
    {CURLE_OUT_OF_MEMORY, S3D_ENOMEM},
};

int main(void)
{
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(status_cases); i++) {
        const struct status_case *t = &status_cases[i];
        int got = s3d_http_err_from_status(t->status, t->code, t->is_object);
        if (got != t->want)
            t_fail(__FILE__, __LINE__, "status %ld code %s: got %s, want %s", t->status,
                   t->code ? t->code : "-", s3d_err_name(got), s3d_err_name(t->want));
    }
    for (i = 0; i < S3D_ARRAY_LEN(curl_cases); i++) {
        int got = s3d_http_err_from_curl(curl_cases[i].cc);
        if (got != curl_cases[i].want)
            t_fail(__FILE__, __LINE__, "CURLcode %d: got %s, want %s", (int)curl_cases[i].cc,
                   s3d_err_name(got), s3d_err_name(curl_cases[i].want));
    }
    return 0;
}
