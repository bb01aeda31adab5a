/* test_sigv4.c - SigV4 against the worked examples in the AWS S3 documentation
 * ("Signature Calculations for the Authorization Header: Transferring Payload in a Single
 * Chunk" and "Authenticating Requests: Using Query Parameters"), plus the SHA-256 helpers and
 * argument checks. Table-driven, after curl's unit1979. */
#include <pthread.h>

#include "common/compiler.h"
#include "common/dynbuf.h"
#include "s3/config.h"
#include "s3/sigv4.h"
#include "testutil.h"

#define AKID       "AKIAIOSFODNN7EXAMPLE"
#define SECRET     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define HOST       "examplebucket.s3.amazonaws.com"
#define T_20130524 ((time_t)1369353600) /* 2013-05-24T00:00:00Z */

struct vector {
    const char *name;
    const char *method;
    const char *path;
    struct s3d_kv query[3];
    size_t n_query;
    struct s3d_kv headers[3];
    size_t n_headers;
    const char *payload_hash;
    const char *creq_sha256; /* SHA-256 of the documented canonical request */
    const char *signed_headers;
    const char *signature;
};

static const struct vector vectors[] = {
    {"GET Object",
     "GET",
     "/test.txt",
     {{0}},
     0,
     {{"Range", "bytes=0-9"}},
     1,
     S3D_EMPTY_SHA256,
     "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
     "host;range;x-amz-content-sha256;x-amz-date",
     "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"},
    {"PUT Object",
     "PUT",
     "/test%24file.text",
     {{0}},
     0,
     {{"Date", "Fri, 24 May 2013 00:00:00 GMT"}, {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
     2,
     "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
     "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
     "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
     "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"},
    {"GET Bucket Lifecycle",
     "GET",
     "/",
     {{"lifecycle", ""}},
     1,
     {{0}},
     0,
     S3D_EMPTY_SHA256,
     "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
     "host;x-amz-content-sha256;x-amz-date",
     "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"},
    /* Given in reverse order: the signer sorts. */
    {"List Objects",
     "GET",
     "/",
     {{"prefix", "J"}, {"max-keys", "2"}},
     2,
     {{0}},
     0,
     S3D_EMPTY_SHA256,
     "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
     "host;x-amz-content-sha256;x-amz-date",
     "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"},
};

static const struct s3d_sigv4_creds creds = {AKID, SECRET, NULL};

static void trace_init(struct s3d_sigv4_trace *t)
{
    s3d_dynbuf_init(&t->canonical_request, 1 << 16);
    s3d_dynbuf_init(&t->string_to_sign, 1 << 16);
}

static void trace_free(struct s3d_sigv4_trace *t)
{
    s3d_dynbuf_free(&t->canonical_request);
    s3d_dynbuf_free(&t->string_to_sign);
}

static void test_vectors(void)
{
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(vectors); i++) {
        const struct vector *v = &vectors[i];
        struct s3d_sigv4_request req = {0};
        struct s3d_sigv4_trace tr;
        struct s3d_dynbuf hdrs, want;
        char h[65];
        printf("vector: %s\n", v->name);
        trace_init(&tr);
        s3d_dynbuf_init(&hdrs, 4096);
        s3d_dynbuf_init(&want, 4096);
        req.method = v->method;
        req.host = HOST;
        req.canonical_path = v->path;
        req.query = v->query;
        req.n_query = v->n_query;
        req.headers = v->headers;
        req.n_headers = v->n_headers;
        req.payload_hash = v->payload_hash;
        req.region = "us-east-1";
        req.now = T_20130524;
        CHECK_OK(s3d_sigv4_sign(&req, &creds, &hdrs, &tr));
        CHECK_OK(s3d_sha256_hex(tr.canonical_request.data, tr.canonical_request.len, h));
        if (strcmp(h, v->creq_sha256) != 0)
            printf("canonical request:\n%s\n", tr.canonical_request.data);
        CHECK_STREQ(h, v->creq_sha256);
        CHECK_STREQ(tr.signature, v->signature);
        CHECK_OK(s3d_dynbuf_appendf(&want,
                                    "Authorization: AWS4-HMAC-SHA256 Credential=" AKID
                                    "/20130524/us-east-1/s3/aws4_request, SignedHeaders=%s, "
                                    "Signature=%s\nx-amz-content-sha256: %s\n"
                                    "x-amz-date: 20130524T000000Z\n",
                                    v->signed_headers, v->signature, v->payload_hash));
        CHECK_STREQ(hdrs.data, want.data);
        /* A second signing hits the per-thread key cache and must agree. */
        s3d_dynbuf_reset(&hdrs);
        CHECK_OK(s3d_sigv4_sign(&req, &creds, &hdrs, NULL));
        CHECK_STREQ(hdrs.data, want.data);
        trace_free(&tr);
        s3d_dynbuf_free(&hdrs);
        s3d_dynbuf_free(&want);
    }
}

static void test_get_object_canonical_text(void)
{
    /* The documented canonical request of the GET Object example, byte for byte. */
    static const char want[] = "GET\n/test.txt\n\n"
                               "host:examplebucket.s3.amazonaws.com\n"
                               "range:bytes=0-9\n"
                               "x-amz-content-sha256:" S3D_EMPTY_SHA256 "\n"
                               "x-amz-date:20130524T000000Z\n\n"
                               "host;range;x-amz-content-sha256;x-amz-date\n" S3D_EMPTY_SHA256;
    static const char want_sts[] =
        "AWS4-HMAC-SHA256\n20130524T000000Z\n"
        "20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972";
    struct s3d_kv range = {"  RANGE ", "  bytes=0-9   "}; /* case and blanks normalized */
    struct s3d_sigv4_request req = {"GET",       HOST,       "/test.txt", NULL,
                                    0,           &range,     1,           S3D_EMPTY_SHA256,
                                    "us-east-1", T_20130524, NULL};
    struct s3d_sigv4_trace tr;
    struct s3d_dynbuf hdrs;
    trace_init(&tr);
    s3d_dynbuf_init(&hdrs, 4096);
    /* A header name with blanks is invalid; a padded value is trimmed. */
    CHECK_ERR(s3d_sigv4_sign(&req, &creds, &hdrs, &tr), S3D_EINVAL);
    range.name = "RANGE";
    CHECK_OK(s3d_sigv4_sign(&req, &creds, &hdrs, &tr));
    CHECK_STREQ(tr.canonical_request.data, want);
    CHECK_STREQ(tr.string_to_sign.data, want_sts);
    trace_free(&tr);
    s3d_dynbuf_free(&hdrs);
}

static void test_presign_example(void)
{
    static const char want[] =
        "https://examplebucket.s3.amazonaws.com/test.txt"
        "?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    struct s3d_sigv4_request req = {"GET", HOST, "/test.txt", NULL,       0,   NULL,
                                    0,     NULL, "us-east-1", T_20130524, NULL};
    struct s3d_sigv4_trace tr;
    struct s3d_dynbuf url;
    struct s3d_config cfg;
    char h[65];
    trace_init(&tr);
    s3d_dynbuf_init(&url, 4096);
    CHECK_OK(s3d_sigv4_presign(&req, &creds, 86400,
                               "https://examplebucket.s3.amazonaws.com/test.txt", &url, &tr));
    CHECK_STREQ(url.data, want);
    /* The documented string to sign ends in this canonical-request hash. */
    CHECK_OK(s3d_sha256_hex(tr.canonical_request.data, tr.canonical_request.len, h));
    CHECK_STREQ(h, "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04");

    /* The same through s3d_presign_url and a resolved-looking config (virtual host). */
    memset(&cfg, 0, sizeof(cfg));
    CHECK_OK(s3d_config_parse_endpoint("https://s3.amazonaws.com", &cfg));
    cfg.region = strdup("us-east-1");
    cfg.access_key_id = strdup(AKID);
    cfg.secret_access_key = strdup(SECRET);
    cfg.addressing = S3D_ADDRESSING_AUTO;
    s3d_dynbuf_reset(&url);
    CHECK_OK(s3d_presign_url(&cfg, "GET", "examplebucket", "test.txt", 86400, T_20130524, &url));
    CHECK_STREQ(url.data, want);
    CHECK_ERR(s3d_presign_url(&cfg, "POST", "examplebucket", "k", 60, T_20130524, &url),
              S3D_EINVAL);
    CHECK_ERR(s3d_presign_url(&cfg, "GET", "examplebucket", "k", 604801, T_20130524, &url),
              S3D_EINVAL);
    CHECK_ERR(s3d_presign_url(&cfg, "GET", "examplebucket", "k", 0, T_20130524, &url), S3D_EINVAL);
    CHECK_ERR(s3d_presign_url(&cfg, "GET", "a", "k", 60, T_20130524, &url), S3D_EURI);
    /* A session token is signed as X-Amz-Security-Token and lands in the URL. */
    cfg.session_token = strdup("tok/en+=");
    s3d_dynbuf_reset(&url);
    CHECK_OK(s3d_presign_url(&cfg, "PUT", "examplebucket", "a b/c", 3600, T_20130524, &url));
    CHECK(strstr(url.data, "/a%20b/c?") != NULL);
    CHECK(strstr(url.data, "&X-Amz-Security-Token=tok%2Fen%2B%3D&") != NULL);
    CHECK(strstr(url.data, "X-Amz-Signature=aeeed9bb") == NULL);
    /* Without credentials: S3D_ENOCREDS. */
    free(cfg.access_key_id);
    cfg.access_key_id = NULL;
    CHECK_ERR(s3d_presign_url(&cfg, "GET", "examplebucket", "k", 60, T_20130524, &url),
              S3D_ENOCREDS);
    s3d_config_free(&cfg);
    trace_free(&tr);
    s3d_dynbuf_free(&url);
}

static void test_session_token_and_errors(void)
{
    struct s3d_sigv4_creds tc = {AKID, SECRET, "FQoGZXIvYXdzE//token=="};
    struct s3d_kv bad_hdr[2] = {{"x-amz-meta-a", "1"}, {"X-Amz-Meta-A", "2"}};
    struct s3d_kv reserved = {"Host", "evil"};
    struct s3d_kv crlf = {"x-amz-meta-a", "a\r\nInjected: 1"};
    struct s3d_sigv4_request req = {"GET", HOST, "/k",        NULL,       0,   NULL,
                                    0,     NULL, "us-east-1", T_20130524, NULL};
    struct s3d_sigv4_creds nocreds = {NULL, NULL, NULL};
    struct s3d_sigv4_trace tr;
    struct s3d_dynbuf hdrs;
    trace_init(&tr);
    s3d_dynbuf_init(&hdrs, 4096);
    CHECK_OK(s3d_sigv4_sign(&req, &tc, &hdrs, &tr));
    CHECK(strstr(hdrs.data, "\nx-amz-security-token: FQoGZXIvYXdzE//token==\n") != NULL);
    CHECK(strstr(hdrs.data, "SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                            "x-amz-security-token, ") != NULL);
    CHECK(strstr(hdrs.data, "x-amz-content-sha256: UNSIGNED-PAYLOAD\n") != NULL);
    CHECK(strstr(tr.canonical_request.data, "\nx-amz-security-token:FQoGZXIvYXdzE//token==\n") !=
          NULL);

    req.headers = bad_hdr;
    req.n_headers = 2;
    CHECK_ERR(s3d_sigv4_sign(&req, &creds, &hdrs, NULL), S3D_EINVAL);
    CHECK_MSG_HAS("given twice");
    req.headers = &reserved;
    req.n_headers = 1;
    CHECK_ERR(s3d_sigv4_sign(&req, &creds, &hdrs, NULL), S3D_EINVAL);
    req.headers = &crlf;
    CHECK_ERR(s3d_sigv4_sign(&req, &creds, &hdrs, NULL), S3D_EINVAL);
    req.headers = NULL;
    req.n_headers = 0;
    req.payload_hash = "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855";
    CHECK_ERR(s3d_sigv4_sign(&req, &creds, &hdrs, NULL), S3D_EINVAL);
    req.payload_hash = "abc";
    CHECK_ERR(s3d_sigv4_sign(&req, &creds, &hdrs, NULL), S3D_EINVAL);
    req.payload_hash = NULL;
    CHECK_ERR(s3d_sigv4_sign(&req, &nocreds, &hdrs, NULL), S3D_ENOCREDS);
    req.canonical_path = "k";
    CHECK_ERR(s3d_sigv4_sign(&req, &creds, &hdrs, NULL), S3D_EINVAL);
    req.canonical_path = "/k";
    /* Dates: other days and regions derive other keys (cache must not leak across). */
    {
        char a[65], b[65];
        req.now = T_20130524;
        CHECK_OK(s3d_sigv4_sign(&req, &creds, &hdrs, &tr));
        memcpy(a, tr.signature, 65);
        req.region = "eu-west-1";
        CHECK_OK(s3d_sigv4_sign(&req, &creds, &hdrs, &tr));
        memcpy(b, tr.signature, 65);
        CHECK(strcmp(a, b) != 0);
        CHECK(strstr(tr.string_to_sign.data, "20130524/eu-west-1/s3/aws4_request") != NULL);
        req.region = "us-east-1";
        CHECK_OK(s3d_sigv4_sign(&req, &creds, &hdrs, &tr));
        CHECK_STREQ(tr.signature, a);
    }
    trace_free(&tr);
    s3d_dynbuf_free(&hdrs);
}

static void test_canonical_query(void)
{
    static const struct {
        struct s3d_kv p[4];
        size_t n;
        const char *want;
    } cases[] = {
        {{{"uploads", ""}}, 1, "uploads="},
        {{{"b", "2"}, {"a", "1"}, {"a", "0"}}, 3, "a=0&a=1&b=2"},
        {{{"prefix", "dir/sub dir/+%~"}, {"list-type", "2"}},
         2,
         "list-type=2&prefix=dir%2Fsub%20dir%2F%2B%25~"},
        {{{"continuation-token", "1/abc=="}}, 1, "continuation-token=1%2Fabc%3D%3D"},
        /* Sorted by encoded bytes: '%' (0x25) sorts before letters. */
        {{{"z", "1"}, {"\xc3\xa9", "e"}, {"A", "v"}}, 3, "%C3%A9=e&A=v&z=1"},
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        struct s3d_dynbuf b;
        s3d_dynbuf_init(&b, 4096);
        CHECK_OK(s3d_sigv4_canonical_query(cases[i].p, cases[i].n, &b));
        CHECK_STREQ(b.data, cases[i].want);
        s3d_dynbuf_free(&b);
    }
}

static void test_sha256(void)
{
    static const char abc_hash[] =
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    struct iovec iov[3] = {{"a", 1}, {NULL, 0}, {"bc", 2}};
    struct s3d_sha256 h;
    char out[65];
    CHECK_OK(s3d_sha256_hex("", 0, out));
    CHECK_STREQ(out, S3D_EMPTY_SHA256);
    CHECK_OK(s3d_sha256_hex("abc", 3, out));
    CHECK_STREQ(out, abc_hash);
    CHECK_OK(s3d_sha256_iov_hex(iov, 3, out));
    CHECK_STREQ(out, abc_hash);
    CHECK_OK(s3d_sha256_init(&h));
    CHECK_OK(s3d_sha256_update(&h, "ab", 2));
    CHECK_OK(s3d_sha256_update(&h, "c", 1));
    CHECK_OK(s3d_sha256_final(&h, out));
    CHECK_STREQ(out, abc_hash);
    CHECK(h.ctx == NULL);
    CHECK_ERR(s3d_sha256_update(&h, "x", 1), S3D_EINVAL);
    s3d_sha256_free(&h);
    s3d_sha256_free(NULL);
    CHECK_OK(s3d_sha256_hex("Welcome to Amazon S3.", 21, out));
    CHECK_STREQ(out, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

static void test_amz_date(void)
{
    char d[17];
    CHECK_OK(s3d_sigv4_amz_date(T_20130524, d));
    CHECK_STREQ(d, "20130524T000000Z");
    CHECK_OK(s3d_sigv4_amz_date((time_t)1796228877, d));
    CHECK_STREQ(d, "20261202T162757Z");
    CHECK_OK(s3d_sigv4_amz_date((time_t)0, d));
    CHECK_STREQ(d, "19700101T000000Z");
}

/* The per-thread key cache under concurrency: threads alternate between two secrets and two
 * regions; every signature must equal the one computed alone beforehand. */
struct thread_arg {
    const char *want[2][2];
    int bad;
};

static void sign_with(const char *secret, const char *region, char out[65])
{
    struct s3d_sigv4_creds c = {AKID, secret, NULL};
    struct s3d_sigv4_request req = {"GET", HOST, "/k",   NULL,       0,   NULL,
                                    0,     NULL, region, T_20130524, NULL};
    struct s3d_sigv4_trace tr;
    struct s3d_dynbuf hdrs;
    trace_init(&tr);
    s3d_dynbuf_init(&hdrs, 4096);
    if (s3d_sigv4_sign(&req, &c, &hdrs, &tr) != 0)
        abort();
    memcpy(out, tr.signature, 65);
    trace_free(&tr);
    s3d_dynbuf_free(&hdrs);
}

static const char *const secrets[2] = {SECRET, "another/secret+key0000000000000000000000"};
static const char *const regions[2] = {"us-east-1", "ap-northeast-1"};

static void *sign_thread(void *p)
{
    struct thread_arg *a = p;
    int i;
    for (i = 0; i < 2000; i++) {
        char sig[65];
        int s = i & 1, r = (i >> 1) & 1;
        sign_with(secrets[s], regions[r], sig);
        if (strcmp(sig, a->want[s][r]) != 0)
            a->bad++;
    }
    return NULL;
}

static void test_key_cache_threads(void)
{
    char want[2][2][65];
    struct thread_arg args[4];
    pthread_t th[4];
    int s, r, t;
    for (s = 0; s < 2; s++)
        for (r = 0; r < 2; r++)
            sign_with(secrets[s], regions[r], want[s][r]);
    CHECK(strcmp(want[0][0], want[1][0]) != 0 && strcmp(want[0][0], want[0][1]) != 0);
    for (t = 0; t < 4; t++) {
        for (s = 0; s < 2; s++)
            for (r = 0; r < 2; r++)
                args[t].want[s][r] = want[s][r];
        args[t].bad = 0;
        CHECK(pthread_create(&th[t], NULL, sign_thread, &args[t]) == 0);
    }
    for (t = 0; t < 4; t++) {
        CHECK(pthread_join(th[t], NULL) == 0);
        CHECK(args[t].bad == 0);
    }
}

/* AWS's example of a PUT in signed chunks ("Signature Calculations for the Authorization
 * Header: Transferring Payload in Multiple Chunks"): the seed signature of the request signed
 * with STREAMING-AWS4-HMAC-SHA256-PAYLOAD, then the chunks of 65536 and 1024 bytes of 'a' and
 * the final empty one, each signed after the one before. */
static void test_chunk_signatures(void)
{
    static const struct s3d_kv h[] = {{"content-encoding", "aws-chunked"},
                                      {"content-length", "66824"},
                                      {"x-amz-decoded-content-length", "66560"},
                                      {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
    static const char *const want[3] = {
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"};
    const size_t lens[3] = {65536, 1024, 0};
    struct s3d_sigv4_request req = {0};
    struct s3d_sigv4_trace tr;
    struct s3d_sigv4_chunk_key k;
    struct s3d_dynbuf hdrs;
    char prev[65], sig[65], sha[65];
    static char a[65536];
    memset(a, 'a', sizeof(a));
    trace_init(&tr);
    s3d_dynbuf_init(&hdrs, 4096);
    req.method = "PUT";
    req.host = "s3.amazonaws.com";
    req.canonical_path = "/examplebucket/chunkObject.txt";
    req.headers = h;
    req.n_headers = S3D_ARRAY_LEN(h);
    req.payload_hash = S3D_STREAMING_PAYLOAD;
    req.region = "us-east-1";
    req.now = T_20130524;
    CHECK_OK(s3d_sigv4_sign(&req, &creds, &hdrs, &tr));
    CHECK_STREQ(tr.signature, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
    CHECK_OK(s3d_sigv4_chunk_key(SECRET, "us-east-1", T_20130524, &k));
    CHECK_STREQ(k.scope, "20130524/us-east-1/s3/aws4_request");
    memcpy(prev, tr.signature, 65);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(s3d_sha256_hex(a, lens[i], sha));
        CHECK_OK(s3d_sigv4_chunk_sign(&k, prev, sha, sig));
        CHECK_STREQ(sig, want[i]);
        memcpy(prev, sig, 65);
    }
    trace_free(&tr);
    s3d_dynbuf_free(&hdrs);
}

int main(void)
{
    test_vectors();
    test_chunk_signatures();
    test_get_object_canonical_text();
    test_presign_example();
    test_session_token_and_errors();
    test_canonical_query();
    test_sha256();
    test_amz_date();
    test_key_cache_threads();
    printf("ok\n");
    return 0;
}
