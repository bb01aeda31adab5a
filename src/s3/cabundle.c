/* cabundle.c - the run-time search for a CA bundle (see cabundle.h). */
#include "s3/cabundle.h"

#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

/* The files distributions keep their trusted CAs in, as Go's crypto/x509 (root_linux.go)
 * lists them. */
const char *const s3d_ca_system_paths[] = {
    "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu, Gentoo, Arch */
    "/etc/pki/tls/certs/ca-bundle.crt",                  /* Fedora, RHEL 6 */
    "/etc/ssl/ca-bundle.pem",                            /* OpenSUSE */
    "/etc/pki/tls/cacert.pem",                           /* OpenELEC */
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* CentOS, RHEL 7+ */
    "/etc/ssl/cert.pem",                                 /* Alpine */
    NULL,
};

int s3d_ca_file_usable(const char *path)
{
    struct stat st;
    if (path == NULL || path[0] == '\0')
        return 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    return access(path, R_OK) == 0;
}

static int set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

const char *s3d_ca_bundle_choose(const char *configured, const char *ssl_cert_file,
                                 const char *default_bundle, int (*usable)(const char *path),
                                 const char **source)
{
    size_t i;
    /* What the user named is used as given: falling back past a typo would trust CAs the
     * user did not choose. */
    if (set(configured)) {
        *source = "configured";
        return configured;
    }
    if (set(ssl_cert_file)) {
        *source = "SSL_CERT_FILE";
        return ssl_cert_file;
    }
    if (set(default_bundle) && usable(default_bundle)) {
        *source = "default_ca_bundle";
        return default_bundle;
    }
    for (i = 0; s3d_ca_system_paths[i] != NULL; i++) {
        if (usable(s3d_ca_system_paths[i])) {
            *source = "system";
            return s3d_ca_system_paths[i];
        }
    }
    *source = "curl-default";
    return NULL;
}
