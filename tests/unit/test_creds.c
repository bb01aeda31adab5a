/* test_creds.c - the credential chain without a network: the refresh rule (a table), the STS
 * endpoint choice, profile sections merged from both files, credential_process (the JSON v1
 * format, failures, the timeout, argument quoting), and the cache under threads (one refresh
 * at a time, old credentials kept while a refresh fails and they are still valid).
 * Runs in a scratch HOME with the AWS_* variables it reads cleared. */
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/dynbuf.h"
#include "common/error.h"
#include "s3/config.h"
#include "s3/creds.h"
#include "s3/creds_int.h"
#include "testutil.h"

static char home[512];

static void reset(void)
{
    static const char *const vars[] = {"AWS_ACCESS_KEY_ID",
                                       "AWS_SECRET_ACCESS_KEY",
                                       "AWS_SESSION_TOKEN",
                                       "AWS_PROFILE",
                                       "AWS_CONFIG_FILE",
                                       "AWS_SHARED_CREDENTIALS_FILE",
                                       "AWS_ENDPOINT_URL",
                                       "AWS_ENDPOINT_URL_STS",
                                       "AWS_STS_REGIONAL_ENDPOINTS",
                                       "AWS_ROLE_ARN",
                                       "AWS_WEB_IDENTITY_TOKEN_FILE",
                                       "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                                       "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                       "AWS_REGION",
                                       "AWS_DEFAULT_REGION"};
    for (size_t i = 0; i < S3D_ARRAY_LEN(vars); i++)
        unsetenv(vars[i]);
    setenv("HOME", home, 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    unsetenv("S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS");
}

static void write_file(const char *name, const char *text, int mode)
{
    char path[1024];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", home, name);
    f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fwrite(text, 1, strlen(text), f) == strlen(text));
    fclose(f);
    chmod(path, (mode_t)mode);
}

static void test_refresh_rule(void)
{
    static const struct {
        int64_t now, obtained, exp;
        int due;
    } t[] = {
        {1000, 0, 0, 0},                              /* never expires */
        {1000, 1000, 4600, 0},                        /* an hour left */
        {4299, 1000, 4600, 0},                        /* 301 s left: margin 300 */
        {4300, 1000, 4600, 1},                        /* 300 s left */
        {1001, 1000, 1004, 0},                        /* 4 s lifetime: margin 2 s */
        {1002, 1000, 1004, 1}, {1005, 1000, 1004, 1}, /* expired */
        {1000, 1000, 900, 1},                         /* expired when obtained */
    };
    for (size_t i = 0; i < S3D_ARRAY_LEN(t); i++)
        if (s3d_creds_refresh_due(t[i].now, t[i].obtained, t[i].exp) != t[i].due)
            t_fail(__FILE__, __LINE__, "refresh rule row %zu", i);
}

static void test_sts_endpoint(void)
{
    struct s3d_dynbuf b;
    const char *r;
    s3d_dynbuf_init(&b, 4096);
    reset();
    CHECK_OK(s3d_sts_endpoint("eu-west-1", NULL, &b, &r));
    CHECK_STREQ(b.data, "https://sts.eu-west-1.amazonaws.com");
    CHECK_STREQ(r, "eu-west-1");
    CHECK_OK(s3d_sts_endpoint("eu-west-1", "legacy", &b, &r));
    CHECK_STREQ(b.data, "https://sts.amazonaws.com");
    CHECK_STREQ(r, "us-east-1");
    CHECK_OK(s3d_sts_endpoint("ap-east-1", "legacy", &b, &r)); /* never had the global one */
    CHECK_STREQ(b.data, "https://sts.ap-east-1.amazonaws.com");
    setenv("AWS_STS_REGIONAL_ENDPOINTS", "regional", 1); /* the environment wins */
    CHECK_OK(s3d_sts_endpoint("eu-west-1", "legacy", &b, &r));
    CHECK_STREQ(b.data, "https://sts.eu-west-1.amazonaws.com");
    setenv("AWS_STS_REGIONAL_ENDPOINTS", "bogus", 1);
    CHECK_ERR(s3d_sts_endpoint("eu-west-1", NULL, &b, &r), S3D_ECONFIG);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    CHECK_OK(s3d_sts_endpoint("eu-west-1", NULL, &b, &r));
    CHECK_STREQ(b.data, "http://127.0.0.1:1");
    setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:2", 1);
    CHECK_OK(s3d_sts_endpoint("eu-west-1", NULL, &b, &r));
    CHECK_STREQ(b.data, "http://127.0.0.1:2");
    s3d_dynbuf_free(&b);
}

static void test_profile_merge(void)
{
    struct s3d_profile p;
    reset();
    write_file(".aws/config",
               "[profile a]\nrole_arn = R1\nregion = eu-west-1\n[sso-session corp]\n"
               "sso_region = us-west-2\n[profile b]\nx = 1\n",
               0600);
    write_file(".aws/credentials", "[a]\nrole_arn = R2\naws_access_key_id = K\n", 0600);
    CHECK_OK(s3d_profile_load("profile", "a", &p));
    CHECK(p.found);
    CHECK_STREQ(s3d_profile_get(&p, "role_arn"), "R2"); /* the credentials file wins */
    CHECK_STREQ(s3d_profile_get(&p, "region"), "eu-west-1");
    CHECK_STREQ(s3d_profile_get(&p, "aws_access_key_id"), "K");
    CHECK(s3d_profile_get(&p, "x") == NULL);
    s3d_profile_free(&p);
    CHECK_OK(s3d_profile_load("sso-session", "corp", &p));
    CHECK_STREQ(s3d_profile_get(&p, "sso_region"), "us-west-2");
    s3d_profile_free(&p);
    CHECK_OK(s3d_profile_load("profile", "missing", &p));
    CHECK(!p.found);
    s3d_profile_free(&p);
}

static void test_process(void)
{
    struct s3d_creds *cr = NULL;
    char cmd[2048];
    reset();
    write_file("ok.sh",
               "#!/bin/sh\n[ \"$1\" = 'a b' ] || exit 9\necho 'to stderr' >&2\n"
               "echo '{\"Version\": 1, \"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"S\", "
               "\"SessionToken\": \"T\", \"Expiration\": \"2030-01-02T03:04:05Z\"}'\n",
               0700);
    snprintf(cmd, sizeof(cmd), "%s/ok.sh 'a b'", home);
    CHECK_OK(s3d_creds_process(cmd, "p", &cr));
    CHECK_STREQ(cr->access_key_id, "AKID");
    CHECK_STREQ(cr->secret_access_key, "S");
    CHECK_STREQ(cr->session_token, "T");
    CHECK(cr->expiration == 1893553445);
    CHECK_STREQ(cr->provider, "custom-process");
    s3d_creds_release(cr);
    snprintf(cmd, sizeof(cmd), "%s/ok.sh \"a b\"", home);
    CHECK_OK(s3d_creds_process(cmd, "p", &cr));
    s3d_creds_release(cr);
    snprintf(cmd, sizeof(cmd), "%s/ok.sh a b", home); /* two words: the script exits 9 */
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    CHECK(strstr(s3d_last_error_message(), "exit status 9") != NULL);
    CHECK_ERR(s3d_creds_process("'unterminated", "p", &cr), S3D_ECONFIG);
    CHECK_ERR(s3d_creds_process("/nonexistent/cmd", "p", &cr), S3D_ECREDS);

    write_file("v2.sh",
               "#!/bin/sh\necho '{\"Version\": 2, \"AccessKeyId\": \"A\", "
               "\"SecretAccessKey\": \"S\"}'\n",
               0700);
    snprintf(cmd, sizeof(cmd), "%s/v2.sh", home);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    write_file("nokey.sh", "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"A\"}'\n", 0700);
    snprintf(cmd, sizeof(cmd), "%s/nokey.sh", home);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    write_file("badexp.sh",
               "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"A\", "
               "\"SecretAccessKey\": \"S\", \"Expiration\": \"soon\"}'\n",
               0700);
    snprintf(cmd, sizeof(cmd), "%s/badexp.sh", home);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    write_file("notjson.sh", "#!/bin/sh\necho hello\n", 0700);
    snprintf(cmd, sizeof(cmd), "%s/notjson.sh", home);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    /* Output over the cap: killed, refused. */
    write_file("flood.sh", "#!/bin/sh\nyes\n", 0700);
    snprintf(cmd, sizeof(cmd), "%s/flood.sh", home);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    /* The timeout. */
    write_file("slow.sh", "#!/bin/sh\nexec sleep 10\n", 0700);
    snprintf(cmd, sizeof(cmd), "%s/slow.sh", home);
    setenv("S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS", "200", 1);
    {
        time_t t0 = time(NULL);
        CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
        CHECK(strstr(s3d_last_error_message(), "200 ms") != NULL);
        CHECK(time(NULL) - t0 < 5);
    }
}

/* ---- credential_process that hangs --------------------------------------------------------- */

static pid_t read_pid(const char *name)
{
    char path[1024];
    long v = 0;
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", home, name);
    f = fopen(path, "r");
    CHECK(f != NULL);
    CHECK(fscanf(f, "%ld", &v) == 1);
    fclose(f);
    return (pid_t)v;
}

/* 1 once pid is gone or a zombie (killed; not our child, so reaped by init when it gets to
 * it), within 2 s. */
static int gone(pid_t pid)
{
    for (int i = 0; i < 200; i++) {
        char path[64], buf[256];
        const char *rp;
        FILE *f;
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return 1;
        snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
        f = fopen(path, "r");
        if (f != NULL) {
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            buf[n] = '\0';
            rp = strrchr(buf, ')');
            if (rp != NULL && rp[1] == ' ' && rp[2] == 'Z')
                return 1;
        }
        usleep(10000);
    }
    return 0;
}

/* Each within the timeout, reported, and nothing it started left running. */
static void process_hang_cases(void)
{
    struct s3d_creds *cr = NULL;
    char cmd[1024], text[1600];
    time_t t0;
    pid_t pid;

    setenv("S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS", "300", 1);
    /* Closes stdout and stays alive: before, waitpid waited for its exit (30 s here). */
    snprintf(text, sizeof(text), "#!/bin/sh\necho $$ > %s/closer.pid\nexec sleep 30 >&-\n", home);
    write_file("closer.sh", text, 0700);
    snprintf(cmd, sizeof(cmd), "%s/closer.sh", home);
    t0 = time(NULL);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    CHECK(time(NULL) - t0 < 5);
    CHECK_MSG_HAS("closed its stdout but did not exit");
    pid = read_pid("closer.pid");
    CHECK(gone(pid));
    /* Exits at once, a background child of its own holding stdout: before, the timeout
     * fired and the child survived it. */
    snprintf(text, sizeof(text), "#!/bin/sh\nsleep 30 &\necho $! > %s/bg.pid\n", home);
    write_file("bg.sh", text, 0700);
    snprintf(cmd, sizeof(cmd), "%s/bg.sh", home);
    t0 = time(NULL);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    CHECK(time(NULL) - t0 < 5);
    CHECK_MSG_HAS("kept its stdout open");
    CHECK(gone(read_pid("bg.pid")));
    /* A shell waiting on a hung command: the shell was killed, the command left running. */
    snprintf(text, sizeof(text), "#!/bin/sh\nsleep 30 &\necho $! > %s/hung.pid\nwait\n", home);
    write_file("hung.sh", text, 0700);
    snprintf(cmd, sizeof(cmd), "%s/hung.sh", home);
    t0 = time(NULL);
    CHECK_ERR(s3d_creds_process(cmd, "p", &cr), S3D_ECREDS);
    CHECK(time(NULL) - t0 < 5);
    CHECK_MSG_HAS("did not finish within 300 ms");
    CHECK(gone(read_pid("hung.pid")));
    CHECK(cr == NULL);
    /* A host process that ignores SIGCHLD: the kernel reaps the command (waitpid: ECHILD),
     * and its output still counts, at once. */
    setenv("S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS", "20000", 1);
    signal(SIGCHLD, SIG_IGN);
    snprintf(cmd, sizeof(cmd), "%s/ok.sh 'a b'", home);
    t0 = time(NULL);
    CHECK_OK(s3d_creds_process(cmd, "p", &cr));
    CHECK(time(NULL) - t0 < 5);
    CHECK_STREQ(cr->access_key_id, "AKID");
    s3d_creds_release(cr);
    signal(SIGCHLD, SIG_DFL);
    unsetenv("S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS");
}

/* In a child with no controlling terminal (setsid), as a service or a job runs: there the
 * command gets a process group of its own whatever terminal this test was started from. */
static void test_process_hangs(void)
{
    int st = 0;
    pid_t kid;
    fflush(NULL);
    kid = fork();
    CHECK(kid >= 0);
    if (kid == 0) {
        CHECK(setsid() > 0);
        process_hang_cases();
        fflush(NULL);
        _exit(0);
    }
    CHECK(waitpid(kid, &st, 0) == kid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- the cache under threads ------------------------------------------------------------- */

struct worker {
    struct s3d_credcache *c;
    int fails;
    int gets;
};

/* Set by the main thread, read by the workers: atomic (volatile is no synchronisation). */
static atomic_int stop_workers;

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    while (!atomic_load(&stop_workers)) {
        struct s3d_creds *cr = NULL;
        if (s3d_credcache_get(w->c, &cr) != 0 || cr == NULL ||
            (cr->expiration != 0 && cr->expiration < (int64_t)time(NULL)))
            w->fails++;
        s3d_creds_release(cr);
        w->gets++;
        usleep(2000);
    }
    return NULL;
}

static int count_lines_in(const char *name)
{
    char path[1024], line[256];
    int n = 0;
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", home, name);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n++;
    fclose(f);
    return n;
}

static void test_cache_threads(void)
{
    struct s3d_client_options o;
    struct s3d_config cfg;
    struct s3d_http_conf http;
    struct s3d_credcache *c = NULL;
    struct worker w[8];
    pthread_t th[8];
    char script[4096], conf[4096];
    const char *prov, *key;
    int runs, overlaps, i;

    reset();
    /* Each run: 6 s credentials, a 0.3 s fetch, a lock directory that shows overlapping runs. */
    snprintf(script, sizeof(script),
             "#!/bin/sh\ncd '%s'\nmkdir lock 2>/dev/null || echo x >> overlaps\necho r >> runs\n"
             "sleep 0.3\nrmdir lock 2>/dev/null\n"
             "exp=$(date -u -d '+6 seconds' +%%Y-%%m-%%dT%%H:%%M:%%SZ)\n"
             "printf '{\"Version\": 1, \"AccessKeyId\": \"AKID%%s\", \"SecretAccessKey\": \"S\", "
             "\"Expiration\": \"%%s\"}' $(wc -l < runs) \"$exp\"\n",
             home);
    write_file("cache.sh", script, 0700);
    snprintf(conf, sizeof(conf), "[default]\ncredential_process = %s/cache.sh\n", home);
    write_file(".aws/config", conf, 0600);
    write_file(".aws/credentials", "", 0600);
    memset(&o, 0, sizeof(o));
    CHECK_OK(s3d_config_resolve(&o, &cfg));
    memset(&http, 0, sizeof(http));
    CHECK_OK(s3d_credcache_new(&cfg, &http, NULL, &c));
    atomic_store(&stop_workers, 0);
    for (i = 0; i < 8; i++) {
        w[i].c = c;
        w[i].fails = w[i].gets = 0;
        CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
    }
    sleep(6);
    atomic_store(&stop_workers, 1);
    for (i = 0; i < 8; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        CHECK(w[i].fails == 0);
        CHECK(w[i].gets > 10);
    }
    runs = count_lines_in("runs");
    overlaps = count_lines_in("overlaps");
    fprintf(stderr, "cache: %d process runs in 6 s with 8 threads, %d overlapping\n", runs,
            overlaps);
    CHECK(overlaps == 0);
    CHECK(runs >= 2 && runs <= 5); /* about one per 3 s (refresh at half the lifetime) */
    s3d_credcache_describe(c, &prov, &key);
    CHECK_STREQ(prov, "custom-process");
    CHECK_STREQ(key, "AKID1");

    /* A refresh that fails while the credentials are still valid keeps them. Fresh 8 s
     * credentials first (forced through s3d_credcache_expired), then a failing process: due
     * after about 4 s, expired after about 7 s. */
    snprintf(script, sizeof(script),
             "#!/bin/sh\nexp=$(date -u -d '+8 seconds' +%%Y-%%m-%%dT%%H:%%M:%%SZ)\n"
             "printf '{\"Version\": 1, \"AccessKeyId\": \"AKIDLAST\", \"SecretAccessKey\": "
             "\"S\", \"Expiration\": \"%%s\"}' \"$exp\"\n");
    write_file("cache.sh", script, 0700);
    {
        struct s3d_creds *cr = NULL;
        CHECK_OK(s3d_credcache_get(c, &cr));
        CHECK(s3d_credcache_expired(c, cr) == 1);
        s3d_creds_release(cr);
        CHECK_OK(s3d_credcache_get(c, &cr));
        CHECK_STREQ(cr->access_key_id, "AKIDLAST");
        s3d_creds_release(cr);
        write_file("cache.sh", "#!/bin/sh\nexit 1\n", 0700);
        sleep(5); /* due, not expired: the failed refresh leaves the valid ones */
        CHECK_OK(s3d_credcache_get(c, &cr));
        CHECK_STREQ(cr->access_key_id, "AKIDLAST");
        s3d_creds_release(cr);
        sleep(4); /* expired: the failure comes back */
        CHECK_ERR(s3d_credcache_get(c, &cr), S3D_ECREDS);
    }
    s3d_credcache_free(c);
    s3d_config_free(&cfg);
}

static void test_chain_errors(void)
{
    struct s3d_client_options o;
    struct s3d_config cfg;
    struct s3d_http_conf http;
    struct s3d_credcache *c = NULL;
    struct s3d_creds *cr = NULL;
    reset();
    memset(&http, 0, sizeof(http));
    memset(&o, 0, sizeof(o));
    /* role_arn with both sources, with neither, a missing source profile, a loop. */
    write_file(".aws/config",
               "[profile both]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = x\n"
               "credential_source = Environment\n"
               "[profile neither]\nrole_arn = arn:aws:iam::1:role/r\n"
               "[profile nosrc]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = ghost\n"
               "[profile l1]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = l2\n"
               "[profile l2]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = l1\n"
               "[profile badsrc]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Moon\n"
               "[profile dur]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Environment\n"
               "duration_seconds = 10\n"
               "[profile sso]\nsso_session = none\nsso_account_id = 1\nsso_role_name = r\n",
               0600);
    write_file(".aws/credentials", "", 0600);
    {
        static const char *const profiles[] = {"both",   "neither", "nosrc", "l1",
                                               "badsrc", "dur",     "sso"};
        for (size_t i = 0; i < S3D_ARRAY_LEN(profiles); i++) {
            o.profile = profiles[i];
            CHECK_OK(s3d_config_resolve(&o, &cfg));
            CHECK_OK(s3d_credcache_new(&cfg, &http, o.profile, &c));
            if (s3d_credcache_get(c, &cr) != S3D_ECONFIG)
                t_fail(__FILE__, __LINE__, "profile %s: %s", profiles[i], s3d_last_error_message());
            fprintf(stderr, "profile %s: %s\n", profiles[i], s3d_last_error_message());
            s3d_credcache_free(c);
            s3d_config_free(&cfg);
        }
    }
    /* Nothing at all (IMDS disabled): S3D_ENOCREDS, asked again on the next get. */
    write_file(".aws/config", "", 0600);
    o.profile = NULL;
    CHECK_OK(s3d_config_resolve(&o, &cfg));
    CHECK_OK(s3d_credcache_new(&cfg, &http, NULL, &c));
    CHECK_ERR(s3d_credcache_get(c, &cr), S3D_ENOCREDS);
    CHECK_ERR(s3d_credcache_get(c, &cr), S3D_ENOCREDS);
    s3d_credcache_free(c);
    s3d_config_free(&cfg);
}

int main(void)
{
    char path[600];
    snprintf(home, sizeof(home), "%s/creds_home", t_tmpdir());
    mkdir(home, 0700);
    snprintf(path, sizeof(path), "%s/.aws", home);
    mkdir(path, 0700);
    test_refresh_rule();
    test_sts_endpoint();
    test_profile_merge();
    test_process();
    test_process_hangs();
    test_chain_errors();
    test_cache_threads();
    return 0;
}
