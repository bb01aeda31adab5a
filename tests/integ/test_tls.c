/* test_tls.c - TLS is verified by default: a server with a self-signed certificate is refused
 * with S3D_ETLS; trusted through ca_bundle it works; no_verify_ssl skips the check. The TLS
 * server is a private nginx started here (openssl makes the certificate), terminating TLS in
 * front of the test S3 server and passing the Host header through unchanged (it is signed). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tproxy.h"
#include "testutil.h"

static pid_t nginx_pid = -1;

static void stop_nginx(void)
{
    if (nginx_pid > 0) {
        kill(nginx_pid, SIGQUIT);
        waitpid(nginx_pid, NULL, 0);
        nginx_pid = -1;
    }
}

static struct s3d_client *tls_client(const char *url, const char *ca, int no_verify)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = url;
    o.ca_bundle = ca;
    o.no_verify_ssl = no_verify;
    o.max_attempts = 1;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    const char *dir = t_tmpdir();
    char cmd[4096], conf[512], cert[512], key[512], url[128], host[256], bucket[128];
    struct s3d_client *c, *direct;
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    int port, up_port, i;
    FILE *f;

    if (access("/usr/sbin/nginx", X_OK) != 0 || system("openssl version >/dev/null 2>&1") != 0)
        t_skip("no nginx or openssl");
    tproxy_parse_endpoint(ep, host, sizeof(host), &up_port);
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 -keyout '%s' -out '%s' 2>/dev/null",
             key, cert);
    CHECK(system(cmd) == 0);

    port = 20000 + (int)(getpid() % 20000);
    snprintf(conf, sizeof(conf), "%s/nginx.conf", dir);
    f = fopen(conf, "w");
    CHECK(f != NULL);
    fprintf(f,
            "pid %s/nginx.pid;\nerror_log %s/error.log;\nevents {}\nhttp {\n"
            "  access_log off;\n  client_body_temp_path %s;\n  proxy_temp_path %s;\n"
            "  client_max_body_size 0;\n"
            "  server {\n    listen 127.0.0.1:%d ssl;\n    ssl_certificate %s;\n"
            "    ssl_certificate_key %s;\n    location / {\n"
            "      proxy_pass http://%s:%d;\n      proxy_set_header Host $http_host;\n"
            "      proxy_http_version 1.1;\n      proxy_request_buffering off;\n"
            "      proxy_buffering off;\n    }\n  }\n}\n",
            dir, dir, dir, dir, port, cert, key, host, up_port);
    fclose(f);
    nginx_pid = fork();
    CHECK(nginx_pid >= 0);
    if (nginx_pid == 0) {
        execl("/usr/sbin/nginx", "nginx", "-p", dir, "-c", conf, "-g", "daemon off;", (char *)NULL);
        _exit(127);
    }
    atexit(stop_nginx);
    snprintf(url, sizeof(url), "https://127.0.0.1:%d", port);
    snprintf(cmd, sizeof(cmd), "curl -sk -o /dev/null %s/", url);
    for (i = 0; i < 100 && system(cmd) != 0; i++)
        usleep(50000);
    CHECK(i < 100);

    direct = t_s3_client();
    t_s3_bucket(direct, "tls", bucket, sizeof(bucket));
    CHECK_OK(s3d_upload_from_buffer(direct, bucket, "k", "over tls", 8, NULL));

    /* Default: the self-signed certificate is refused. */
    c = tls_client(url, NULL, 0);
    CHECK_ERR(s3d_head_object(c, bucket, "k", &info), S3D_ETLS);
    s3d_client_free(c);

    /* Trusted through ca_bundle: works, uploads and downloads included. */
    c = tls_client(url, cert, 0);
    CHECK_OK(s3d_head_object(c, bucket, "k", &info));
    CHECK_EQ_U64(info.size, 8);
    {
        char buf[4096];
        uint64_t got = 0;
        CHECK_OK(s3d_upload_from_buffer(c, bucket, "k2", "written over tls", 16, NULL));
        CHECK_OK(
            s3d_download_to_buffer(c, bucket, "k2", 0, UINT64_MAX, buf, sizeof(buf), &got, NULL));
        CHECK_EQ_U64(got, 16);
        CHECK(memcmp(buf, "written over tls", 16) == 0);
    }
    s3d_client_free(c);

    /* no_verify_ssl: works without trusting anything. */
    c = tls_client(url, NULL, 1);
    CHECK_OK(s3d_head_object(c, bucket, "k", &info));
    s3d_client_free(c);

    stop_nginx();
    CHECK_OK(s3d_delete_object(direct, bucket, "k"));
    CHECK_OK(s3d_delete_object(direct, bucket, "k2"));
    CHECK_OK(s3d_delete_bucket(direct, bucket));
    s3d_client_free(direct);
    return 0;
}
