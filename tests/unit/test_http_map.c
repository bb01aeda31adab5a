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

/* S3D_CURL_VERBOSE output: no signature, no session token. */
struct redact_case {
    const char *in, *want;
};

static const struct redact_case redact_cases[] = {
    {"Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, "
     "SignedHeaders=host;x-amz-date, Signature=0123456789abcdef",
     "Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, "
     "SignedHeaders=host;x-amz-date, Signature=[redacted]"},
    {"authorization: Basic c2VjcmV0", "authorization: [redacted]"},
    {"X-Amz-Security-Token: FQoGZXIvYXdzEXAMPLETOKEN", "X-Amz-Security-Token: [redacted]"},
    {"x-amz-security-token:abc", "x-amz-security-token: [redacted]"},
    /* The credential providers' tokens (issue 23): SSO portal, IMDSv2, container. */
    {"x-amz-sso_bearer_token: sso-access-SECRET", "x-amz-sso_bearer_token: [redacted]"},
    {"X-aws-ec2-metadata-token: AQAEAimds-SECRET==", "X-aws-ec2-metadata-token: [redacted]"},
    {"x-aws-ec2-metadata-token-ttl-seconds: 21600", "x-aws-ec2-metadata-token-ttl-seconds: 21600"},
    {"Authorization: container-SECRET", "Authorization: [redacted]"},
    {"Host: 127.0.0.1:8000", "Host: 127.0.0.1:8000"},
    {"x-amz-date: 20260101T000000Z", "x-amz-date: 20260101T000000Z"},
    {"", ""},
};

/* The proxy libcurl would take from the environment, for naming it in errors. */
static const char *const *fake_env;
static const char *fake_getenv(const char *name)
{
    for (size_t k = 0; fake_env[k] != NULL; k += 2)
        if (strcmp(fake_env[k], name) == 0)
            return fake_env[k + 1];
    return NULL;
}

static void proxy_case(const char *const *env, const char *url, const char *want)
{
    char out[256];
    int r;
    fake_env = env;
    r = s3d_http_proxy_for(url, fake_getenv, out, sizeof(out));
    if (want == NULL) {
        CHECK(r == 0 && out[0] == '\0');
    } else {
        CHECK(r == 1);
        CHECK_STREQ(out, want);
    }
}

int main(void)
{
    size_t i;
    {
        static const char *const none[] = {NULL};
        static const char *const http[] = {"http_proxy", "http://p:3128", "HTTPS_PROXY",
                                           "http://sp:3128", NULL};
        static const char *const upper_http[] = {"HTTP_PROXY", "http://p:3128", NULL};
        static const char *const all[] = {"ALL_PROXY", "socks5://a:1080", NULL};
        static const char *const nop[] = {"all_proxy", "http://a:1", "no_proxy",
                                          "localhost, .internal.example,10.0.0.1", NULL};
        static const char *const star[] = {"all_proxy", "http://a:1", "NO_PROXY", "*", NULL};
        proxy_case(none, "http://127.0.0.1:8000", NULL);
        proxy_case(http, "http://127.0.0.1:8000", "http://p:3128");
        proxy_case(http, "https://s3.amazonaws.com", "http://sp:3128");
        proxy_case(upper_http, "http://h", NULL); /* curl ignores HTTP_PROXY */
        proxy_case(all, "https://h:443/x", "socks5://a:1080");
        proxy_case(nop, "http://localhost:8000", NULL);
        proxy_case(nop, "https://s3.internal.example", NULL);
        proxy_case(nop, "https://internal.example", NULL);
        proxy_case(nop, "https://notinternal.example", "http://a:1");
        proxy_case(nop, "http://10.0.0.1:80/b", NULL);
        proxy_case(nop, "http://10.0.0.12:80/b", "http://a:1");
        proxy_case(star, "http://anything", NULL);
    }
    for (i = 0; i < S3D_ARRAY_LEN(redact_cases); i++) {
        char out[512];
        size_t n =
            s3d_http_redact(redact_cases[i].in, strlen(redact_cases[i].in), out, sizeof(out));
        CHECK_STREQ(out, redact_cases[i].want);
        CHECK(n == strlen(out));
    }
    {
        /* A small buffer cuts, never overflows. */
        char tiny[8];
        const char *in = redact_cases[0].in;
        CHECK(s3d_http_redact(in, strlen(in), tiny, sizeof(tiny)) == 7);
        CHECK(tiny[7] == '\0');
    }
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
