/* test_cabundle.c - the CA bundle search (s3/cabundle.h) as a table, with a fake file system:
 * configured, SSL_CERT_FILE, the default (certifi), then the distributions' files, in order. */
#include <string.h>

#include "common/compiler.h"
#include "s3/cabundle.h"
#include "testutil.h"

/* The fake file system: the paths in `present` exist. */
static const char *const *present;

static int fake_usable(const char *path)
{
    size_t i;
    for (i = 0; present[i] != NULL; i++)
        if (strcmp(present[i], path) == 0)
            return 1;
    return 0;
}

struct ca_case {
    const char *configured, *ssl_cert_file, *default_bundle;
    const char *present[4];
    const char *want, *want_source;
};

#define DEBIAN  "/etc/ssl/certs/ca-certificates.crt"
#define RHEL    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"
#define FEDORA  "/etc/pki/tls/certs/ca-bundle.crt"
#define SUSE    "/etc/ssl/ca-bundle.pem"
#define ALPINE  "/etc/ssl/cert.pem"
#define CERTIFI "/venv/certifi/cacert.pem"

static const struct ca_case cases[] = {
    /* Configured wins and is used as given, even when missing. */
    {"/my.pem", "/ssl.pem", CERTIFI, {DEBIAN, CERTIFI}, "/my.pem", "configured"},
    {"/missing.pem", NULL, CERTIFI, {CERTIFI}, "/missing.pem", "configured"},
    /* SSL_CERT_FILE next, as given. */
    {NULL, "/ssl.pem", CERTIFI, {DEBIAN, CERTIFI}, "/ssl.pem", "SSL_CERT_FILE"},
    {"", "/ssl.pem", NULL, {NULL}, "/ssl.pem", "SSL_CERT_FILE"},
    /* certifi (the default) when it exists, before the system's files. */
    {NULL, NULL, CERTIFI, {DEBIAN, CERTIFI}, CERTIFI, "default_ca_bundle"},
    {NULL, "", CERTIFI, {RHEL, CERTIFI}, CERTIFI, "default_ca_bundle"},
    {NULL, NULL, CERTIFI, {DEBIAN}, DEBIAN, "system"},
    /* Each distribution's file is found on its own. */
    {NULL, NULL, NULL, {DEBIAN}, DEBIAN, "system"},
    {NULL, NULL, NULL, {RHEL}, RHEL, "system"},
    {NULL, NULL, NULL, {FEDORA, RHEL}, FEDORA, "system"},
    {NULL, NULL, NULL, {SUSE}, SUSE, "system"},
    {NULL, NULL, NULL, {ALPINE}, ALPINE, "system"},
    {NULL, NULL, "", {ALPINE, DEBIAN}, DEBIAN, "system"},
    /* Nothing anywhere: libcurl's own default. */
    {NULL, NULL, CERTIFI, {NULL}, NULL, "curl-default"},
    {NULL, NULL, NULL, {"/etc/other.pem"}, NULL, "curl-default"},
};

int main(void)
{
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        const struct ca_case *t = &cases[i];
        const char *source = NULL, *got;
        present = t->present;
        got = s3d_ca_bundle_choose(t->configured, t->ssl_cert_file, t->default_bundle, fake_usable,
                                   &source);
        if ((got == NULL) != (t->want == NULL) || (got != NULL && strcmp(got, t->want) != 0) ||
            source == NULL || strcmp(source, t->want_source) != 0)
            t_fail(__FILE__, __LINE__, "case %zu: got %s (%s), want %s (%s)", i, got ? got : "NULL",
                   source ? source : "NULL", t->want ? t->want : "NULL", t->want_source);
    }
    /* The real check: a directory, a missing file and "" are not usable; a file is. */
    CHECK(s3d_ca_file_usable("/") == 0);
    CHECK(s3d_ca_file_usable("/nonexistent/ca.pem") == 0);
    CHECK(s3d_ca_file_usable("") == 0);
    CHECK(s3d_ca_file_usable(NULL) == 0);
    CHECK(s3d_ca_file_usable("/proc/self/status") == 1);
    printf("ok\n");
    return 0;
}
