/* endpoint.c - the endpoint URL (parsed and normalized into struct s3d_config), path-style
 * or virtual-hosted addressing, and each request's URL, Host header and canonical path. */
#include "s3/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"
#include "s3/uri.h"

/* Caps of a request's Host header and path (base path, bucket, encoded key): a key is at most
 * 1,024 bytes, three times that encoded. */
#define HOST_HEADER_MAX 4096
#define URL_PATH_MAX    16384

/* ---- endpoint ------------------------------------------------------------------------- */

static int host_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

static int path_char(unsigned char c)
{
    return host_char(c) || c == '~' || c == '/' || c == '%';
}

static int is_ipv4(const char *h, size_t n)
{
    int parts = 0, digits = 0, val = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        if (h[i] == '.') {
            if (digits == 0)
                return 0;
            parts++;
            digits = val = 0;
        } else if (h[i] >= '0' && h[i] <= '9') {
            val = val * 10 + (h[i] - '0');
            if (++digits > 3 || val > 255)
                return 0;
        } else {
            return 0;
        }
    }
    return parts == 3 && digits > 0;
}

int s3d_config_parse_endpoint(const char *url, struct s3d_config *out)
{
    const char *p, *auth, *auth_end, *host_end, *path;
    size_t hlen, plen, i;
    char *host = NULL, *base = NULL, *norm = NULL;
    unsigned long port = 0;
    int https, explicit_port = 0, is_ip = 0;

    if (url == NULL || url[0] == '\0')
        return s3d_fail(S3D_ECONFIG, "empty endpoint URL");
    if (strncasecmp(url, "https://", 8) == 0) {
        https = 1;
        auth = url + 8;
    } else if (strncasecmp(url, "http://", 7) == 0) {
        https = 0;
        auth = url + 7;
    } else {
        return s3d_fail(S3D_ECONFIG,
                        "endpoint URL \"%.200s\": scheme must be http:// or "
                        "https://",
                        url);
    }
    for (p = url; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '?' || c == '#' || c == '@' || c <= ' ' || c >= 0x7f)
            return s3d_fail(S3D_ECONFIG,
                            "endpoint URL \"%.200s\": unexpected '%c' (no user, "
                            "query, fragment or blanks allowed)",
                            url, c > ' ' && c < 0x7f ? c : '?');
    }
    auth_end = auth + strcspn(auth, "/");
    path = auth_end;
    if (auth[0] == '[') {
        host_end = memchr(auth, ']', (size_t)(auth_end - auth));
        if (host_end == NULL || host_end == auth + 1)
            return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\": unterminated IPv6 address", url);
        for (p = auth + 1; p < host_end; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
                  (*p >= 'A' && *p <= 'F') || *p == ':' || *p == '.'))
                return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\": bad IPv6 address", url);
        host_end++;
        is_ip = 1;
    } else {
        host_end = auth + strcspn(auth, ":/");
        for (p = auth; p < host_end; p++)
            if (!host_char((unsigned char)*p))
                return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\": bad character in host", url);
    }
    hlen = (size_t)(host_end - auth);
    if (hlen == 0)
        return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\" has no host", url);
    if (!is_ip)
        is_ip = is_ipv4(auth, hlen);
    if (host_end < auth_end) {
        if (*host_end != ':' || host_end + 1 == auth_end || auth_end - host_end - 1 > 5)
            return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\": malformed port", url);
        for (p = host_end + 1; p < auth_end; p++) {
            if (*p < '0' || *p > '9')
                return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\": malformed port", url);
            port = port * 10 + (unsigned long)(*p - '0');
        }
        if (port < 1 || port > 65535)
            return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\": port out of range", url);
        explicit_port = 1;
    } else {
        port = s3d_config_default_port(https);
    }
    plen = strlen(path);
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    for (i = 0; i < plen; i++)
        if (!path_char((unsigned char)path[i]))
            return s3d_fail(S3D_ECONFIG, "endpoint URL \"%.200s\": bad character in path", url);
    if ((host = s3d_strndup(auth, hlen)) == NULL || (base = s3d_strndup(path, plen)) == NULL ||
        (norm = malloc(hlen + plen + 24)) == NULL) {
        free(host);
        free(base);
        return s3d_fail(S3D_ENOMEM, "out of memory parsing the endpoint URL");
    }
    for (i = 0; i < hlen; i++)
        if (host[i] >= 'A' && host[i] <= 'Z')
            host[i] = (char)(host[i] - 'A' + 'a');
    if (explicit_port)
        snprintf(norm, hlen + plen + 24, "%s://%s:%lu%s", https ? "https" : "http", host, port,
                 base);
    else
        snprintf(norm, hlen + plen + 24, "%s://%s%s", https ? "https" : "http", host, base);
    free(out->endpoint_url);
    free(out->host);
    free(out->base_path);
    out->endpoint_url = norm;
    out->host = host;
    out->base_path = base;
    out->https = https;
    out->port = (uint16_t)port;
    out->port_explicit = explicit_port;
    out->host_is_ip = is_ip;
    return 0;
}

/* ---- addressing and URLs -------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int s3d_config_virtual_host(const struct s3d_config *cfg, const char *bucket)
{
    /* An IP literal cannot take a bucket label in front of it, whatever was asked for. */
    if (bucket == NULL || !s3d_bucket_dns_compatible(bucket) || cfg->host_is_ip)
        return 0;
    switch (cfg->addressing) {
    case S3D_ADDRESSING_VIRTUAL:
        return 1;
    case S3D_ADDRESSING_PATH:
        return 0;
    default:
        if (cfg->host_is_ip || cfg->host == NULL || !ends_with(cfg->host, "amazonaws.com"))
            return 0;
        return !(cfg->https && strchr(bucket, '.') != NULL);
    }
}

int s3d_config_addressing_resolved(const struct s3d_config *cfg)
{
    return s3d_config_virtual_host(cfg, "example-bucket") ? S3D_ADDRESSING_VIRTUAL
                                                          : S3D_ADDRESSING_PATH;
}

int s3d_config_build_url(const struct s3d_config *cfg, const char *bucket, const char *key,
                         const char *query, struct s3d_dynbuf *url, struct s3d_dynbuf *host_header,
                         struct s3d_dynbuf *canonical_path)
{
    struct s3d_dynbuf host, path;
    int vhost = s3d_config_virtual_host(cfg, bucket), rc;
    int default_port = cfg->port == s3d_config_default_port(cfg->https);
    int has_key = key != NULL && key[0] != '\0';

    s3d_dynbuf_init(&host, HOST_HEADER_MAX);
    s3d_dynbuf_init(&path, URL_PATH_MAX);
    if (vhost && (rc = s3d_dynbuf_appendf(&host, "%s.", bucket)) < 0)
        goto toobig;
    if ((rc = s3d_dynbuf_appendf(&host, "%s", cfg->host)) < 0)
        goto toobig;
    if (cfg->port_explicit && !default_port &&
        (rc = s3d_dynbuf_appendf(&host, ":%u", (unsigned)cfg->port)) < 0)
        goto toobig;

    if ((rc = s3d_dynbuf_appendf(&path, "%s", cfg->base_path ? cfg->base_path : "")) < 0)
        goto toobig;
    if (bucket != NULL && !vhost) {
        if ((rc = s3d_dynbuf_append(&path, "/", 1)) < 0)
            goto toobig;
        if ((rc = s3d_uri_encode(&path, bucket, strlen(bucket), 1)) < 0)
            goto out;
    }
    if (has_key) {
        if ((rc = s3d_dynbuf_append(&path, "/", 1)) < 0)
            goto toobig;
        if ((rc = s3d_uri_encode(&path, key, strlen(key), 0)) < 0)
            goto out;
    } else if (bucket == NULL || vhost) {
        if ((rc = s3d_dynbuf_append(&path, "/", 1)) < 0)
            goto toobig;
    }

    s3d_dynbuf_reset(url);
    if ((rc = s3d_dynbuf_appendf(url, "%s://%s%s", cfg->https ? "https" : "http", host.data,
                                 path.data)) < 0 ||
        (query && query[0] && (rc = s3d_dynbuf_appendf(url, "?%s", query)) < 0))
        goto toobig;
    if (host_header != NULL) {
        s3d_dynbuf_reset(host_header);
        if ((rc = s3d_dynbuf_append(host_header, host.data, host.len)) < 0)
            goto toobig;
    }
    if (canonical_path != NULL) {
        s3d_dynbuf_reset(canonical_path);
        if ((rc = s3d_dynbuf_append(canonical_path, path.data, path.len)) < 0)
            goto toobig;
    }
    rc = 0;
    goto out;
toobig:
    rc = s3d_fail(rc, "request URL for bucket \"%.64s\" over a buffer limit", bucket ? bucket : "");
out:
    s3d_dynbuf_free(&host);
    s3d_dynbuf_free(&path);
    return rc;
}
