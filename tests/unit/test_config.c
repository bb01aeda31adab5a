/* test_config.c - configuration resolution: every source and its precedence, profiles, the
 * nested s3 section, malformed files, endpoint URL parsing, addressing and request URLs.
 * Runs in a scratch HOME with every AWS_* variable it reads cleared first. */
#include <sys/stat.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/dynbuf.h"
#include "common/error.h"
#include "s3/config.h"
#include "s3/ini.h"
#include "testutil.h"

static char home[512];

static const char *const env_vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_REGION",        "AWS_DEFAULT_REGION",    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",  "AWS_CA_BUNDLE",         "SSL_CERT_FILE",
    "AWS_PROFILE",       "AWS_CONFIG_FILE",       "AWS_SHARED_CREDENTIALS_FILE",
};

static void clear_env(void)
{
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(env_vars); i++)
        unsetenv(env_vars[i]);
}

static void write_file(const char *name, const char *text)
{
    char path[1024];
    FILE *f;
    snprintf(path, sizeof(path), "%s/.aws/%s", home, name);
    f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fwrite(text, 1, strlen(text), f) == strlen(text));
    fclose(f);
}

static void remove_files(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/.aws/config", home);
    unlink(path);
    snprintf(path, sizeof(path), "%s/.aws/credentials", home);
    unlink(path);
}

static void reset(void)
{
    clear_env();
    remove_files();
    setenv("HOME", home, 1);
}

static struct s3d_config resolve_ok(const struct s3d_client_options *o)
{
    struct s3d_config c;
    CHECK_OK(s3d_config_resolve(o, &c));
    return c;
}

static void test_defaults(void)
{
    struct s3d_config c;
    reset();
    c = resolve_ok(NULL);
    CHECK_STREQ(c.region, "us-east-1");
    CHECK_STREQ(c.endpoint_url, "https://s3.us-east-1.amazonaws.com");
    CHECK_STREQ(c.host, "s3.us-east-1.amazonaws.com");
    CHECK(c.https == 1 && c.port == 443 && c.port_explicit == 0 && c.host_is_ip == 0);
    CHECK_STREQ(c.base_path, "");
    CHECK_STREQ(c.credential_source, "none");
    CHECK(c.access_key_id == NULL && c.secret_access_key == NULL && c.session_token == NULL);
    CHECK_STREQ(c.profile, "default");
    CHECK(c.anonymous == 0 && c.no_verify_ssl == 0);
    /* No bundle configured: the system's file when this machine has one (cabundle.h). */
    CHECK(strcmp(c.ca_bundle_source, "system") == 0 ||
          strcmp(c.ca_bundle_source, "curl-default") == 0);
    CHECK((c.ca_bundle != NULL) == (strcmp(c.ca_bundle_source, "system") == 0));
    CHECK(c.addressing == S3D_ADDRESSING_AUTO);
    CHECK(s3d_config_addressing_resolved(&c) == S3D_ADDRESSING_VIRTUAL);
    CHECK(c.payload_signing == S3D_PAYLOAD_UNSIGNED);
    s3d_config_free(&c);
    s3d_config_free(&c);
    s3d_config_free(NULL);
    /* No HOME at all: the files are skipped, not an error. */
    unsetenv("HOME");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.credential_source, "none");
    s3d_config_free(&c);
}

static void test_credential_precedence(void)
{
    struct s3d_client_options o = {0};
    struct s3d_config c;
    reset();
    write_file("credentials", "[default]\naws_access_key_id = FILEKEY\n"
                              "aws_secret_access_key = FILESECRET\n"
                              "aws_session_token = FILETOKEN\n");
    write_file("config", "[default]\naws_access_key_id = CONFKEY\n"
                         "aws_secret_access_key = CONFSECRET\nregion = eu-west-3\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.credential_source, "shared-credentials-file");
    CHECK_STREQ(c.access_key_id, "FILEKEY");
    CHECK_STREQ(c.secret_access_key, "FILESECRET");
    CHECK_STREQ(c.session_token, "FILETOKEN");
    CHECK_STREQ(c.region, "eu-west-3");
    s3d_config_free(&c);

    /* Env key id alone is not a set: the file still wins. */
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.credential_source, "shared-credentials-file");
    s3d_config_free(&c);
    setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.credential_source, "env");
    CHECK_STREQ(c.access_key_id, "ENVKEY");
    CHECK_STREQ(c.secret_access_key, "ENVSECRET");
    CHECK(c.session_token == NULL); /* the file's token does not mix into env credentials */
    s3d_config_free(&c);
    setenv("AWS_SESSION_TOKEN", "ENVTOKEN", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.session_token, "ENVTOKEN");
    s3d_config_free(&c);

    /* Options win over everything, as a set. */
    o.access_key_id = "OPTKEY";
    o.secret_access_key = "OPTSECRET";
    c = resolve_ok(&o);
    CHECK_STREQ(c.credential_source, "options");
    CHECK_STREQ(c.access_key_id, "OPTKEY");
    CHECK(c.session_token == NULL);
    s3d_config_free(&c);
    o.secret_access_key = NULL;
    CHECK_ERR(s3d_config_resolve(&o, &c), S3D_ECONFIG);
    CHECK_MSG_HAS("access_key_id given without secret_access_key");
    CHECK(c.region == NULL);

    /* Anonymous: no credentials at all. */
    o.access_key_id = NULL;
    o.anonymous = 1;
    c = resolve_ok(&o);
    CHECK_STREQ(c.credential_source, "anonymous");
    CHECK(c.anonymous == 1 && c.access_key_id == NULL);
    s3d_config_free(&c);

    /* Config file credentials when the credentials file has none for the profile. */
    reset();
    write_file("credentials", "[other]\naws_access_key_id = X\naws_secret_access_key = Y\n");
    write_file("config", "[default]\naws_access_key_id = CONFKEY\n"
                         "aws_secret_access_key = CONFSECRET\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.credential_source, "config-file");
    CHECK_STREQ(c.access_key_id, "CONFKEY");
    s3d_config_free(&c);
}

static void test_profiles(void)
{
    struct s3d_client_options o = {0};
    struct s3d_config c;
    reset();
    write_file("credentials", "[default]\naws_access_key_id = DEF\naws_secret_access_key = S\n"
                              "[dev]\naws_access_key_id = DEV\naws_secret_access_key = S\n"
                              "[prod]\naws_access_key_id = PROD\naws_secret_access_key = S\n");
    write_file("config", "[default]\nregion = us-west-1\n"
                         "[profile dev]\nregion = eu-central-1\n"
                         "[prod]\nregion = wrong-bare-section\n"
                         "[profile   prod]\nregion = ap-south-1\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.access_key_id, "DEF");
    CHECK_STREQ(c.region, "us-west-1");
    s3d_config_free(&c);
    setenv("AWS_PROFILE", "dev", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.profile, "dev");
    CHECK_STREQ(c.access_key_id, "DEV");
    CHECK_STREQ(c.region, "eu-central-1");
    s3d_config_free(&c);
    /* options.profile beats AWS_PROFILE; "[prod]" in the config file is not the profile. */
    o.profile = "prod";
    c = resolve_ok(&o);
    CHECK_STREQ(c.access_key_id, "PROD");
    CHECK_STREQ(c.region, "ap-south-1");
    s3d_config_free(&c);
    /* A chosen profile that exists nowhere is an error naming it. */
    o.profile = "nosuch";
    CHECK_ERR(s3d_config_resolve(&o, &c), S3D_ECONFIG);
    CHECK_MSG_HAS("profile \"nosuch\" not found");
    /* "[profile default]" is the default profile too. */
    reset();
    write_file("config", "[profile default]\nregion = sa-east-1\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.region, "sa-east-1");
    s3d_config_free(&c);
    /* A profile only in the config file is found. */
    setenv("AWS_PROFILE", "default", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.region, "sa-east-1");
    s3d_config_free(&c);
}

static void test_region_and_ca(void)
{
    struct s3d_client_options o = {0};
    struct s3d_config c;
    reset();
    write_file("config", "[default]\nregion = from-config\nca_bundle = /etc/conf.pem\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.region, "from-config");
    CHECK_STREQ(c.ca_bundle, "/etc/conf.pem");
    CHECK_STREQ(c.endpoint_url, "https://s3.from-config.amazonaws.com");
    s3d_config_free(&c);
    setenv("AWS_DEFAULT_REGION", "from-default-region", 1);
    setenv("AWS_CA_BUNDLE", "/etc/env.pem", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.region, "from-default-region");
    CHECK_STREQ(c.ca_bundle, "/etc/env.pem");
    s3d_config_free(&c);
    setenv("AWS_REGION", "from-region", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.region, "from-region");
    s3d_config_free(&c);
    o.region = "from-options";
    o.ca_bundle = "/etc/opt.pem";
    c = resolve_ok(&o);
    CHECK_STREQ(c.region, "from-options");
    CHECK_STREQ(c.ca_bundle, "/etc/opt.pem");
    s3d_config_free(&c);
    /* An empty variable counts as unset. */
    setenv("AWS_REGION", "", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.region, "from-default-region");
    s3d_config_free(&c);
    o.region = "bad/region";
    CHECK_ERR(s3d_config_resolve(&o, &c), S3D_ECONFIG);
}

/* The CA bundle after the configured ones: SSL_CERT_FILE, then options.default_ca_bundle when
 * it exists (the Python layer's certifi), then the system's files. */
static void test_ca_fallbacks(void)
{
    struct s3d_client_options o = {0};
    struct s3d_config c;
    char pem[1024];
    FILE *f;
    reset();
    snprintf(pem, sizeof(pem), "%s/certifi.pem", home);
    f = fopen(pem, "w");
    CHECK(f != NULL);
    fclose(f);
    o.default_ca_bundle = pem;
    c = resolve_ok(&o);
    CHECK_STREQ(c.ca_bundle, pem);
    CHECK_STREQ(c.ca_bundle_source, "default_ca_bundle");
    s3d_config_free(&c);
    /* A default that does not exist is skipped (never handed to curl). */
    o.default_ca_bundle = "/nonexistent/certifi.pem";
    c = resolve_ok(&o);
    CHECK(c.ca_bundle == NULL || strcmp(c.ca_bundle, "/nonexistent/certifi.pem") != 0);
    s3d_config_free(&c);
    o.default_ca_bundle = pem;
    setenv("SSL_CERT_FILE", "/etc/ssl-cert-file.pem", 1);
    c = resolve_ok(&o);
    CHECK_STREQ(c.ca_bundle, "/etc/ssl-cert-file.pem");
    CHECK_STREQ(c.ca_bundle_source, "SSL_CERT_FILE");
    s3d_config_free(&c);
    write_file("config", "[default]\nca_bundle = /etc/conf.pem\n");
    c = resolve_ok(&o);
    CHECK_STREQ(c.ca_bundle, "/etc/conf.pem");
    CHECK_STREQ(c.ca_bundle_source, "configured");
    s3d_config_free(&c);
    unlink(pem);
}

static void test_endpoint_precedence(void)
{
    struct s3d_client_options o = {0};
    struct s3d_config c;
    reset();
    write_file("config", "[default]\nendpoint_url = http://profile-ep:1\n"
                         "services = mysvc\n"
                         "s3 =\n  endpoint_url = http://nested-ep:2\n"
                         "  addressing_style = path\n"
                         "[services mysvc]\ns3 =\n    endpoint_url = http://services-ep:3\n"
                         "ec2 =\n    endpoint_url = http://wrong:9\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.endpoint_url, "http://services-ep:3");
    CHECK(c.addressing == S3D_ADDRESSING_PATH);
    s3d_config_free(&c);
    write_file("config", "[default]\nendpoint_url = http://profile-ep:1\n"
                         "s3 =\n  endpoint_url = http://nested-ep:2\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.endpoint_url, "http://nested-ep:2");
    s3d_config_free(&c);
    write_file("config", "[default]\nendpoint_url = http://profile-ep:1\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.endpoint_url, "http://profile-ep:1");
    CHECK(c.https == 0 && c.port == 1 && c.port_explicit == 1);
    CHECK(c.payload_signing == S3D_PAYLOAD_AUTO); /* over http: signed until the probe */
    s3d_config_free(&c);
    setenv("AWS_ENDPOINT_URL", "http://env-global:4", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.endpoint_url, "http://env-global:4");
    s3d_config_free(&c);
    setenv("AWS_ENDPOINT_URL_S3", "http://env-s3:5", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.endpoint_url, "http://env-s3:5");
    s3d_config_free(&c);
    o.endpoint_url = "https://options:6/";
    c = resolve_ok(&o);
    CHECK_STREQ(c.endpoint_url, "https://options:6");
    s3d_config_free(&c);
    o.endpoint_url = "ftp://x";
    CHECK_ERR(s3d_config_resolve(&o, &c), S3D_ECONFIG);
    CHECK_MSG_HAS("ftp://x");
}

static void test_nested_and_signing(void)
{
    struct s3d_client_options o = {0};
    struct s3d_config c;
    reset();
    write_file("config", "[default]\ns3 =\n  addressing_style = virtual\n"
                         "  payload_signing_enabled = true\nregion = r1\n");
    c = resolve_ok(NULL);
    CHECK(c.addressing == S3D_ADDRESSING_VIRTUAL);
    CHECK(c.payload_signing == S3D_PAYLOAD_SIGNED); /* explicit, even over https */
    CHECK_STREQ(c.region, "r1"); /* the sub-section ended at the unindented line */
    s3d_config_free(&c);
    o.addressing = S3D_ADDRESSING_PATH;
    o.payload_signing = S3D_PAYLOAD_UNSIGNED;
    c = resolve_ok(&o);
    CHECK(c.addressing == S3D_ADDRESSING_PATH);
    CHECK(c.payload_signing == S3D_PAYLOAD_UNSIGNED);
    s3d_config_free(&c);
    write_file("config", "[default]\ns3 =\n  addressing_style = sideways\n");
    CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
    CHECK_MSG_HAS("sideways");
    write_file("config", "[default]\ns3 =\n  payload_signing_enabled = maybe\n");
    CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
    o.addressing = 7;
    CHECK_ERR(s3d_config_resolve(&o, &c), S3D_ECONFIG);
    /* options.no_verify_ssl is the only source of that setting. */
    reset();
    memset(&o, 0, sizeof(o));
    o.no_verify_ssl = 1;
    c = resolve_ok(&o);
    CHECK(c.no_verify_ssl == 1);
    s3d_config_free(&c);
}

/* A client made with o reports these transfer settings. */
static void expect_client(const struct s3d_client_options *o, uint32_t conc, uint64_t part,
                          uint64_t threshold)
{
    struct s3d_client_config got = {.struct_size = sizeof(got)};
    struct s3d_client *cl = NULL;
    CHECK_OK(s3d_client_new(o, &cl));
    CHECK_OK(s3d_client_get_config(cl, &got));
    CHECK(got.max_concurrency == conc);
    CHECK_EQ_U64(got.part_size, part);
    CHECK_EQ_U64(got.multipart_threshold, threshold);
    s3d_client_free(cl);
}

/* The AWS CLI's s3 transfer settings (max_concurrent_requests, multipart_chunksize,
 * multipart_threshold) in the profile: parsed as awscli parses sizes, bounded, and applied by
 * the client below its options. */
static void test_transfer_settings(void)
{
    static const struct {
        const char *text;
        uint64_t want; /* 0: refused */
    } sizes[] = {
        {"5242880", 5242880},
        {"16MB", 16ull << 20},
        {"16mb", 16ull << 20},
        {"16MiB", 16ull << 20},
        {"1kb", 1024},
        {"2GiB", 2ull << 30},
        {"1TB", 1ull << 40},
        {"0", 0},
        {"", 0},
        {"MB", 0},
        {"16M", 0},
        {"1.5MB", 0},
        {"-1", 0},
        {"16 MB", 16ull << 20},
        {" MB", 0},
        {"16MBB", 0},
        {"16PB", 0},
        {"99999999999999999999", 0},
        {"17179869184TB", 0},
    };
    static const struct {
        const char *line, *says;
    } bad[] = {
        {"max_concurrent_requests = 10MB", "max_concurrent_requests \"10MB\""},
        {"max_concurrent_requests = 0", "from 1 to 1024"},
        {"max_concurrent_requests = 1025", "from 1 to 1024"},
        {"multipart_chunksize = 8M", "multipart_chunksize \"8M\""},
        {"multipart_chunksize = 6GB", "from 1 byte to 5 GiB"},
        {"multipart_threshold = 0", "multipart_threshold \"0\" is not a size from 1 byte ("},
    };
    struct s3d_client_options o = {0};
    struct s3d_client *cl = NULL;
    struct s3d_config c;
    size_t i;

    for (i = 0; i < S3D_ARRAY_LEN(sizes); i++) {
        uint64_t v = 0;
        int rc = s3d_config_parse_size(sizes[i].text, &v);
        if (sizes[i].want == 0 && strcmp(sizes[i].text, "0") != 0) {
            if (rc != -1)
                t_fail(__FILE__, __LINE__, "size \"%s\" accepted as %llu", sizes[i].text,
                       (unsigned long long)v);
        } else {
            CHECK(rc == 0);
            CHECK_EQ_U64(v, sizes[i].want);
        }
    }

    reset();
    c = resolve_ok(NULL);
    CHECK(c.max_concurrency == 0 && c.part_size == 0 && c.multipart_threshold == 0);
    s3d_config_free(&c);
    write_file("config", "[default]\ns3 =\n  max_concurrent_requests = 20\n"
                         "  multipart_chunksize = 16MB\n  multipart_threshold = 64MiB\n"
                         "region = r1\n[profile other]\ns3 =\n  max_concurrent_requests = 3\n");
    c = resolve_ok(NULL);
    CHECK(c.max_concurrency == 20);
    CHECK_EQ_U64(c.part_size, 16ull << 20);
    CHECK_EQ_U64(c.multipart_threshold, 64ull << 20);
    s3d_config_free(&c);

    /* The client: the profile's values, then the options over them, then the defaults. */
    o.endpoint_url = "http://127.0.0.1:9";
    o.device = -1;
    expect_client(&o, 20, 16ull << 20, 64ull << 20);
    o.max_concurrency = 5;
    o.part_size = 6ull << 20;
    o.multipart_threshold = 7ull << 20;
    expect_client(&o, 5, 6ull << 20, 7ull << 20);
    o.max_concurrency = 0;
    o.part_size = 0;
    o.multipart_threshold = 0;
    o.profile = "other"; /* only max_concurrent_requests: the threshold follows the part size */
    expect_client(&o, 3, 8ull << 20, 8ull << 20);

    /* Malformed or out of range: a configuration error naming the setting and the value. */
    for (i = 0; i < S3D_ARRAY_LEN(bad); i++) {
        char text[256];
        snprintf(text, sizeof(text), "[default]\ns3 =\n  %s\n", bad[i].line);
        write_file("config", text);
        CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
        CHECK_MSG_HAS(bad[i].says);
    }
    o.profile = NULL;
    CHECK_ERR(s3d_client_new(&o, &cl), S3D_ECONFIG);
    CHECK(cl == NULL);
    /* The device option: -1 and 0 only; the others are reserved (they choose nothing, and
     * were accepted silently). */
    write_file("config", "[default]\n");
    for (int dv = -3; dv <= 3; dv++) {
        struct s3d_client_options od;
        memset(&od, 0, sizeof(od));
        od.device = dv;
        if (dv == -1 || dv == 0) {
            CHECK_OK(s3d_client_new(&od, &cl));
            s3d_client_free(cl);
            cl = NULL;
            continue;
        }
        CHECK_ERR(s3d_client_new(&od, &cl), S3D_EINVAL);
        CHECK(cl == NULL);
        CHECK_MSG_HAS("device");
        CHECK_MSG_HAS("reserved");
    }
    /* Outside the s3 sub-section these keys are not the AWS CLI's: ignored, as it does. */
    write_file("config", "[default]\nmax_concurrent_requests = 0\n");
    c = resolve_ok(NULL);
    CHECK(c.max_concurrency == 0);
    s3d_config_free(&c);
    reset();
}

/* The AWS CLI's s3 target_bandwidth (and the target_throughput option): bytes per second, or
 * a number with a bytes (B) or bits (b) rate suffix, prefixes powers of 1024. */
static void test_target_bandwidth(void)
{
    static const struct {
        const char *text;
        uint64_t want; /* 0 = refused */
    } rates[] = {
        {"1073741824", 1073741824ull},
        {"200MB/s", 200ull << 20},
        {"10GB/s", 10ull << 30},
        {"10Gb/s", (10ull << 30) / 8},
        {"200Mb/s", (200ull << 20) / 8},
        {"1KB/s", 1024},
        {"8b/s", 1},
        {"1B/s", 1},
        {"1.5GB/s", 3ull << 29},
        {"2 MiB/s", 2ull << 20},
        {"5TB/s", 5ull << 40},
        {"", 0},
        {"0", 0},
        {"fast", 0},
        {"10Gb", 0},
        {"10GB/m", 0},
        {"10XB/s", 0},
        {"1.5", 0},
        {"-1MB/s", 0},
        {"1b/s", 0}, /* under a byte */
        {"1iB/s", 0},
        {"99999999999999999999", 0},
    };
    struct s3d_config c;
    for (size_t i = 0; i < S3D_ARRAY_LEN(rates); i++) {
        uint64_t v = 0;
        int rc = s3d_config_parse_rate(rates[i].text, &v);
        if (rates[i].want == 0) {
            if (rc != -1)
                t_fail(__FILE__, __LINE__, "rate \"%s\" accepted as %llu", rates[i].text,
                       (unsigned long long)v);
        } else if (rc != 0 || v != rates[i].want) {
            t_fail(__FILE__, __LINE__, "rate \"%s\": rc %d, %llu, want %llu", rates[i].text, rc,
                   (unsigned long long)v, (unsigned long long)rates[i].want);
        }
    }
    reset();
    write_file("config", "[default]\ns3 =\n  target_bandwidth = 10Gb/s\n");
    c = resolve_ok(NULL);
    CHECK_EQ_U64(c.target_throughput, (10ull << 30) / 8);
    s3d_config_free(&c);
    {
        struct s3d_client_options o = {.target_throughput = "100MB/s"};
        c = resolve_ok(&o); /* the option wins */
        CHECK_EQ_U64(c.target_throughput, 100ull << 20);
        s3d_config_free(&c);
    }
    write_file("config", "[default]\ns3 =\n  target_bandwidth = quick\n");
    CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
    CHECK_MSG_HAS("target_bandwidth \"quick\"");
    reset();
}

static void test_file_syntax(void)
{
    struct s3d_config c;
    char path[1024];
    reset();
    /* BOM, CRLF, comments, blanks, "key: value", upper-case keys, '#' inside a value. */
    write_file("credentials", "\xEF\xBB\xBF# comment\r\n; other comment\r\n\r\n"
                              "  [ default ]  \r\n"
                              "AWS_ACCESS_KEY_ID: KEY#1\r\n"
                              "aws_secret_access_key=SECRET ;x  \t\r\n");
    c = resolve_ok(NULL);
    CHECK_STREQ(c.access_key_id, "KEY#1");
    CHECK_STREQ(c.secret_access_key, "SECRET ;x");
    s3d_config_free(&c);

    /* Alternate file locations, "~/" expanded. */
    reset();
    snprintf(path, sizeof(path), "%s/.aws/alt-creds", home);
    {
        FILE *f = fopen(path, "w");
        fputs("[default]\naws_access_key_id = ALT\naws_secret_access_key = S\n", f);
        fclose(f);
    }
    setenv("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/alt-creds", 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.access_key_id, "ALT");
    s3d_config_free(&c);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    c = resolve_ok(NULL);
    CHECK_STREQ(c.access_key_id, "ALT");
    s3d_config_free(&c);
    setenv("AWS_CONFIG_FILE", "/nonexistent/dir/config", 1);
    c = resolve_ok(NULL); /* missing: fine */
    s3d_config_free(&c);
    unlink(path);
}

static void test_malformed_files(void)
{
    static const struct {
        const char *file;
        const char *text;
        const char *msg;
    } cases[] = {
        {"credentials", "aws_access_key_id = X\n", "credentials:1: "},
        {"credentials", "[default]\naws_access_key_id = X\njust words\n", "credentials:3: "},
        {"config", "[default\nregion = x\n", "config:1: malformed section header"},
        {"config", "[default]\n\n# c\n[]\n", "config:4: "},
        {"config", "[default]\nregion = x\n  continued = y\n", "config:3: "},
        {"config", "[default]\n= value\n", "config:2: empty key"},
        {"config", "[default]\n  indented = y\n", "config:2: "},
    };
    size_t i;
    struct s3d_config c;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        reset();
        write_file(cases[i].file, cases[i].text);
        CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
        CHECK_MSG_HAS(cases[i].msg);
        CHECK_MSG_HAS(home); /* the full path of the file */
    }
    /* A line over the cap, a file over the cap, a NUL byte, a directory. */
    {
        char *big = malloc(S3D_CONFIG_MAX_FILE + 100);
        reset();
        memset(big, 'a', S3D_CONFIG_MAX_LINE + 1);
        strcpy(big + S3D_CONFIG_MAX_LINE + 1, "\n");
        write_file("config", "[default]\n");
        {
            char p[1024];
            FILE *f;
            snprintf(p, sizeof(p), "%s/.aws/config", home);
            f = fopen(p, "a");
            fputs(big, f);
            fclose(f);
        }
        CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
        CHECK_MSG_HAS("config:2: line longer than");
        memset(big, '#', S3D_CONFIG_MAX_FILE + 10);
        big[S3D_CONFIG_MAX_FILE + 10] = '\0';
        write_file("config", big);
        CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
        CHECK_MSG_HAS("over the limit");
        free(big);
    }
    {
        char p[1024];
        FILE *f;
        reset();
        snprintf(p, sizeof(p), "%s/.aws/config", home);
        f = fopen(p, "w");
        fwrite("[default]\nregion = a\0b\n", 1, 23, f);
        fclose(f);
        CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
        CHECK_MSG_HAS("config:2: NUL");
        unlink(p);
        CHECK(mkdir(p, 0700) == 0);
        CHECK_ERR(s3d_config_resolve(NULL, &c), S3D_ECONFIG);
        CHECK_MSG_HAS("not a regular file");
        rmdir(p);
    }
}

static void test_endpoint_parse(void)
{
    static const struct {
        const char *url;
        int ok;
        const char *norm, *host, *base;
        int https, port, explicit_port, is_ip;
    } cases[] = {
        {"http://127.0.0.1:8000", 1, "http://127.0.0.1:8000", "127.0.0.1", "", 0, 8000, 1, 1},
        {"HTTPS://S3.Example.COM/", 1, "https://s3.example.com", "s3.example.com", "", 1, 443, 0,
         0},
        {"http://minio", 1, "http://minio", "minio", "", 0, 80, 0, 0},
        {"https://host:443", 1, "https://host:443", "host", "", 1, 443, 1, 0},
        {"http://[::1]:8000", 1, "http://[::1]:8000", "[::1]", "", 0, 8000, 1, 1},
        {"https://[2001:DB8::1]/", 1, "https://[2001:db8::1]", "[2001:db8::1]", "", 1, 443, 0, 1},
        {"http://gw.local:9000/s3/base//", 1, "http://gw.local:9000/s3/base", "gw.local",
         "/s3/base", 0, 9000, 1, 0},
        {"http://a_b-c.d:65535", 1, "http://a_b-c.d:65535", "a_b-c.d", "", 0, 65535, 1, 0},
        {"http://999.1.1.1", 1, "http://999.1.1.1", "999.1.1.1", "", 0, 80, 0, 0},
        {"ftp://host", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"host:8000", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://:8000", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host:", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host:0", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host:65536", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host:80a", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host:123456", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://user:pw@host", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host/?q=1", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host/#f", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://ho st", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://[::1", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://[]:80", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://[::1]x", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://[zz::1]", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"http://host/a b", 0, NULL, NULL, NULL, 0, 0, 0, 0},
        {"", 0, NULL, NULL, NULL, 0, 0, 0, 0},
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        struct s3d_config c;
        int rc;
        memset(&c, 0, sizeof(c));
        rc = s3d_config_parse_endpoint(cases[i].url, &c);
        if ((rc == 0) != cases[i].ok)
            t_fail(__FILE__, __LINE__, "endpoint \"%s\": %s (%s)", cases[i].url, s3d_err_name(rc),
                   s3d_last_error_message());
        if (rc != 0) {
            CHECK(rc == S3D_ECONFIG);
            continue;
        }
        CHECK_STREQ(c.endpoint_url, cases[i].norm);
        CHECK_STREQ(c.host, cases[i].host);
        CHECK_STREQ(c.base_path, cases[i].base);
        CHECK(c.https == cases[i].https);
        CHECK(c.port == cases[i].port);
        CHECK(c.port_explicit == cases[i].explicit_port);
        CHECK(c.host_is_ip == cases[i].is_ip);
        s3d_config_free(&c);
    }
}

static void test_addressing_and_urls(void)
{
    static const struct {
        const char *endpoint;
        int addressing;
        const char *bucket, *key, *query;
        int vhost;
        const char *url, *host, *path;
    } cases[] = {
        /* AWS: virtual-hosted when the bucket can be a host name. */
        {"https://s3.us-east-1.amazonaws.com", 0, "examplebucket", "test.txt", NULL, 1,
         "https://examplebucket.s3.us-east-1.amazonaws.com/test.txt",
         "examplebucket.s3.us-east-1.amazonaws.com", "/test.txt"},
        {"https://s3.us-east-1.amazonaws.com", 0, "my.bucket", "k", NULL, 0,
         "https://s3.us-east-1.amazonaws.com/my.bucket/k", "s3.us-east-1.amazonaws.com",
         "/my.bucket/k"},
        {"http://s3.us-east-1.amazonaws.com", 0, "my.bucket", "k", NULL, 1,
         "http://my.bucket.s3.us-east-1.amazonaws.com/k", "my.bucket.s3.us-east-1.amazonaws.com",
         "/k"},
        {"https://s3.amazonaws.com", 0, "Legacy_Bucket", "k", NULL, 0,
         "https://s3.amazonaws.com/Legacy_Bucket/k", "s3.amazonaws.com", "/Legacy_Bucket/k"},
        {"https://s3.amazonaws.com", 0, "examplebucket", NULL, "list-type=2", 1,
         "https://examplebucket.s3.amazonaws.com/?list-type=2", "examplebucket.s3.amazonaws.com",
         "/"},
        {"https://s3.amazonaws.com", 0, NULL, NULL, NULL, 0, "https://s3.amazonaws.com/",
         "s3.amazonaws.com", "/"},
        {"https://s3.amazonaws.com", S3D_ADDRESSING_PATH, "examplebucket", "a/b", NULL, 0,
         "https://s3.amazonaws.com/examplebucket/a/b", "s3.amazonaws.com", "/examplebucket/a/b"},
        /* Custom endpoints and IPs: path-style unless VIRTUAL is asked for. */
        {"http://127.0.0.1:8000", 0, "bucket", "dir/a b+c%.bin", "uploadId=x&partNumber=1", 0,
         "http://127.0.0.1:8000/bucket/dir/a%20b%2Bc%25.bin?uploadId=x&partNumber=1",
         "127.0.0.1:8000", "/bucket/dir/a%20b%2Bc%25.bin"},
        {"http://127.0.0.1:8000", 0, "bucket", "", "uploads=", 0,
         "http://127.0.0.1:8000/bucket?uploads=", "127.0.0.1:8000", "/bucket"},
        {"http://[::1]:8000", 0, "bucket", "k", NULL, 0, "http://[::1]:8000/bucket/k", "[::1]:8000",
         "/bucket/k"},
        {"http://10.0.0.1:8000", S3D_ADDRESSING_VIRTUAL, "bucket", "k", NULL, 0,
         "http://10.0.0.1:8000/bucket/k", "10.0.0.1:8000", "/bucket/k"},
        {"https://minio.local:443/", S3D_ADDRESSING_VIRTUAL, "bucket", "k", NULL, 1,
         "https://bucket.minio.local/k", "bucket.minio.local", "/k"},
        {"https://minio.local", S3D_ADDRESSING_VIRTUAL, "Bad_Name", "k", NULL, 0,
         "https://minio.local/Bad_Name/k", "minio.local", "/Bad_Name/k"},
        {"http://gw:9000/s3", 0, "b-1", "k", NULL, 0, "http://gw:9000/s3/b-1/k", "gw:9000",
         "/s3/b-1/k"},
        {"http://gw:9000/s3", 0, NULL, NULL, NULL, 0, "http://gw:9000/s3/", "gw:9000", "/s3/"},
        {"http://gw:80", 0, "bkt", "/lead//slash", NULL, 0, "http://gw/bkt//lead//slash", "gw",
         "/bkt//lead//slash"},
        {"http://gw", 0, "bkt", "\xe6\x97\xa5\xe6\x9c\xac", NULL, 0,
         "http://gw/bkt/%E6%97%A5%E6%9C%AC", "gw", "/bkt/%E6%97%A5%E6%9C%AC"},
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        struct s3d_config c;
        struct s3d_dynbuf url, host, path;
        memset(&c, 0, sizeof(c));
        s3d_dynbuf_init(&url, 8192);
        s3d_dynbuf_init(&host, 8192);
        s3d_dynbuf_init(&path, 8192);
        CHECK_OK(s3d_config_parse_endpoint(cases[i].endpoint, &c));
        c.addressing = cases[i].addressing;
        if (s3d_config_virtual_host(&c, cases[i].bucket) != cases[i].vhost)
            t_fail(__FILE__, __LINE__, "case %zu: virtual_host != %d", i, cases[i].vhost);
        CHECK_OK(s3d_dynbuf_append(&url, "stale", 5)); /* reset first, not appended to */
        CHECK_OK(s3d_config_build_url(&c, cases[i].bucket, cases[i].key, cases[i].query, &url,
                                      &host, &path));
        CHECK_STREQ(url.data, cases[i].url);
        CHECK_STREQ(host.data, cases[i].host);
        CHECK_STREQ(path.data, cases[i].path);
        CHECK_OK(s3d_config_build_url(&c, cases[i].bucket, cases[i].key, cases[i].query, &url, NULL,
                                      NULL));
        CHECK_STREQ(url.data, cases[i].url);
        s3d_config_free(&c);
        s3d_dynbuf_free(&url);
        s3d_dynbuf_free(&host);
        s3d_dynbuf_free(&path);
    }
}

struct ini_rec {
    struct s3d_dynbuf log;
};

static int ini_cb(void *user, const char *section, const char *sub, const char *key,
                  const char *value, int line)
{
    struct ini_rec *r = user;
    return s3d_dynbuf_appendf(&r->log, "%d[%s]%s%s%s=%s;", line, section, sub ? sub : "",
                              sub ? "." : "", key, value);
}

static int stop_cb(void *user, const char *section, const char *sub, const char *key,
                   const char *value, int line)
{
    (void)user;
    (void)section;
    (void)sub;
    (void)value;
    return strcmp(key, "stop") == 0 ? s3d_fail(S3D_ECANCELED, "stopped at %d", line) : 0;
}

static void test_ini(void)
{
    static const char text[] = "[a]\nk1 = v1\ns3 =\n  x = 1\n\n  # c\n  y=2\nk2=\n[ b c ]\n"
                               "K3 : v:3 = 4\n";
    struct ini_rec r;
    s3d_dynbuf_init(&r.log, 4096);
    CHECK_OK(s3d_ini_parse(text, strlen(text), "t", ini_cb, &r));
    CHECK_STREQ(r.log.data, "2[a]k1=v1;3[a]s3=;4[a]s3.x=1;7[a]s3.y=2;8[a]k2=;10[b c]k3=v:3 = 4;");
    s3d_dynbuf_free(&r.log);
    /* Not NUL-terminated: only len bytes are read. */
    s3d_dynbuf_init(&r.log, 4096);
    CHECK_OK(s3d_ini_parse("[a]\nk=v\nGARBAGE", 8, "t", ini_cb, &r));
    CHECK_STREQ(r.log.data, "2[a]k=v;");
    s3d_dynbuf_free(&r.log);
    CHECK_ERR(s3d_ini_parse("[a]\nstop=1\n", 11, "t", stop_cb, NULL), S3D_ECANCELED);
    CHECK_OK(s3d_ini_parse("", 0, "t", stop_cb, NULL));
}

int main(void)
{
    snprintf(home, sizeof(home), "%s/home", t_tmpdir());
    CHECK(mkdir(home, 0700) == 0);
    {
        char aws[600];
        snprintf(aws, sizeof(aws), "%s/.aws", home);
        CHECK(mkdir(aws, 0700) == 0);
    }
    test_defaults();
    test_credential_precedence();
    test_profiles();
    test_region_and_ca();
    test_ca_fallbacks();
    test_endpoint_precedence();
    test_nested_and_signing();
    test_transfer_settings();
    test_target_bandwidth();
    test_file_syntax();
    test_malformed_files();
    test_endpoint_parse();
    test_addressing_and_urls();
    test_ini();
    printf("ok\n");
    return 0;
}
