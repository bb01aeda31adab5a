/* creds_http.c - credentials from a local HTTP endpoint: the container credentials endpoint
 * (ECS task roles, EKS Pod Identity) and EC2 instance metadata (IMDSv2).
 *
 * Container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is a path on http://169.254.170.2;
 * AWS_CONTAINER_CREDENTIALS_FULL_URI is a whole URL, allowed over http only to a loopback
 * address or the ECS / EKS link-local hosts (as botocore: 127.0.0.0/8, ::1, localhost,
 * 169.254.170.2, 169.254.170.23, fd00:ec2::23), anything over https. The Authorization header
 * comes from the file AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, else from
 * AWS_CONTAINER_AUTHORIZATION_TOKEN.
 *
 * IMDS: PUT /latest/api/token (TTL 21600 s) for a session token, then
 * /latest/meta-data/iam/security-credentials/ for the role name and the credentials under
 * it. AWS_EC2_METADATA_DISABLED=true turns it off; AWS_EC2_METADATA_SERVICE_ENDPOINT moves it.
 * One attempt with a one-second timeout, as botocore's defaults, so a laptop with nothing
 * configured waits at most that long once per client. A token request answered 403/404/405
 * falls back to IMDSv1 requests without the token (as botocore). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/env.h"
#include "common/error.h"
#include "s3/creds_int.h"

#define ECS_HOST         "http://169.254.170.2"
#define IMDS_HOST        "http://169.254.169.254"
#define IMDS_TOKEN_TTL_S "21600" /* the IMDSv2 session token's lifetime asked for: 6 hours */
#define IMDS_BASE_MAX    512     /* AWS_EC2_METADATA_SERVICE_ENDPOINT; url[] has room for it */

int s3d_creds_container_configured(void)
{
    return s3d_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != NULL ||
           s3d_env("AWS_CONTAINER_CREDENTIALS_FULL_URI") != NULL;
}

/* Is the host of an http:// URL one that may receive the token in clear? */
static int allowed_http_host(const char *url)
{
    static const char *const hosts[] = {"localhost", "169.254.170.2", "169.254.170.23",
                                        "fd00:ec2::23"};
    char host[256];
    const char *h = url + 7, *end;
    size_t n;
    struct in_addr a4;
    struct in6_addr a6;
    if (*h == '[') {
        h++;
        end = strchr(h, ']');
    } else {
        end = h + strcspn(h, ":/");
    }
    if (end == NULL || (n = (size_t)(end - h)) == 0 || n >= sizeof(host))
        return 0;
    memcpy(host, h, n);
    host[n] = '\0';
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++)
        if (strcasecmp(host, hosts[i]) == 0)
            return 1;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

static int add_header(struct curl_slist **l, const char *name, const char *value)
{
    char line[S3D_CREDS_MAX_TOKEN + 64];
    struct curl_slist *n;
    snprintf(line, sizeof(line), "%s: %s", name, value);
    if ((n = curl_slist_append(*l, line)) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory building a request");
    *l = n;
    return 0;
}

int s3d_creds_container(const struct s3d_http_conf *http, struct s3d_creds **out)
{
    const char *rel = s3d_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    const char *full = s3d_env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    const char *tok_file = s3d_env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    const char *tok_env = s3d_env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    char *token = NULL, *url = NULL;
    struct curl_slist *hdrs = NULL;
    struct s3d_dynbuf body;
    long status = 0;
    int rc;
    *out = NULL;
    s3d_dynbuf_init(&body, S3D_CREDS_MAX_BODY);
    if (rel != NULL) {
        size_t n = strlen(ECS_HOST) + strlen(rel) + 2;
        if ((url = malloc(n)) == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "out of memory");
            goto out;
        }
        snprintf(url, n, "%s%s%s", ECS_HOST, rel[0] == '/' ? "" : "/", rel);
    } else {
        if (strncasecmp(full, "https://", 8) != 0 &&
            !(strncasecmp(full, "http://", 7) == 0 && allowed_http_host(full))) {
            rc = s3d_fail(S3D_ECREDS,
                          "container-role: AWS_CONTAINER_CREDENTIALS_FULL_URI \"%.200s\" must "
                          "be https, or http to a loopback address or the ECS/EKS link-local "
                          "host",
                          full);
            goto out;
        }
        if ((url = strdup(full)) == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "out of memory");
            goto out;
        }
    }
    if (tok_file != NULL) {
        if ((rc = s3d_creds_read_file(tok_file, "container-role: authorization token file",
                                      &token)) < 0)
            goto out;
    } else if (tok_env != NULL && (token = strdup(tok_env)) == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory");
        goto out;
    }
    if (token != NULL) {
        if (strpbrk(token, "\r\n") != NULL) {
            rc = s3d_fail(S3D_ECREDS, "container-role: the authorization token holds a line break");
            goto out;
        }
        if ((rc = add_header(&hdrs, "Authorization", token)) < 0)
            goto out;
    }
    if ((rc = add_header(&hdrs, "Accept", "application/json")) < 0)
        goto out;
    if ((rc = s3d_creds_http(http, S3D_CREDS_HTTP_MS, "container-role", "GET", url, hdrs, NULL,
                             &status, &body)) < 0)
        goto out;
    if (status != 200) {
        rc = s3d_fail(S3D_ECREDS, "container-role: %s answered HTTP %ld: %.200s", url, status,
                      body.len ? body.data : "");
        goto out;
    }
    rc = s3d_creds_from_json(body.data, body.len, "container-role", "container-role", "AccessKeyId",
                             "SecretAccessKey", "Token", "Expiration", out);
out:
    if (token != NULL)
        memset(token, 0, strlen(token));
    free(token);
    free(url);
    curl_slist_free_all(hdrs);
    s3d_dynbuf_free(&body);
    return rc;
}

int s3d_creds_imds(const struct s3d_http_conf *http, struct s3d_creds **out)
{
    const char *dis = s3d_env("AWS_EC2_METADATA_DISABLED");
    const char *base = s3d_env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    const char *text;
    struct curl_slist *put_h = NULL, *get_h = NULL;
    struct s3d_dynbuf body;
    char url[1024], role[256], tok[1024];
    long status = 0;
    size_t blen, n;
    int rc;
    *out = NULL;
    if (dis != NULL && strcasecmp(dis, "true") == 0)
        return s3d_fail(S3D_ENOCREDS, "instance metadata disabled (AWS_EC2_METADATA_DISABLED)");
    if (base == NULL)
        base = IMDS_HOST;
    blen = strlen(base);
    while (blen > 0 && base[blen - 1] == '/')
        blen--;
    if (blen > IMDS_BASE_MAX)
        return s3d_fail(S3D_ECONFIG, "AWS_EC2_METADATA_SERVICE_ENDPOINT is too long");
    s3d_dynbuf_init(&body, S3D_CREDS_MAX_BODY);

    snprintf(url, sizeof(url), "%.*s/latest/api/token", (int)blen, base);
    if ((rc = add_header(&put_h, "x-aws-ec2-metadata-token-ttl-seconds", IMDS_TOKEN_TTL_S)) < 0)
        goto out;
    if (s3d_creds_http(http, S3D_CREDS_IMDS_MS, "iam-role", "PUT", url, put_h, NULL, &status,
                       &body) < 0) {
        rc = s3d_fail(S3D_ENOCREDS, "instance metadata not reachable at %.*s", (int)blen, base);
        goto out;
    }
    if (status == 200) {
        if (body.len == 0 || body.len >= sizeof(tok) || memchr(body.data, '\n', body.len)) {
            rc = s3d_fail(S3D_ECREDS, "iam-role: malformed IMDSv2 token from %s", url);
            goto out;
        }
        memcpy(tok, body.data, body.len);
        tok[body.len] = '\0';
        if ((rc = add_header(&get_h, "x-aws-ec2-metadata-token", tok)) < 0)
            goto out;
    } else if (status != 403 && status != 404 && status != 405) {
        rc = s3d_fail(S3D_ENOCREDS, "instance metadata token request answered HTTP %ld", status);
        goto out;
    }

    snprintf(url, sizeof(url), "%.*s/latest/meta-data/iam/security-credentials/", (int)blen, base);
    if (s3d_creds_http(http, S3D_CREDS_IMDS_MS, "iam-role", "GET", url, get_h, NULL, &status,
                       &body) < 0 ||
        status != 200) {
        rc = s3d_fail(S3D_ENOCREDS, "instance metadata has no role (HTTP %ld)", status);
        goto out;
    }
    /* An empty body may have no buffer at all (data NULL). */
    text = body.data ? body.data : "";
    n = strcspn(text, "\r\n");
    if (n == 0 || n >= sizeof(role) || memchr(text, '/', n) != NULL) {
        rc = s3d_fail(S3D_ENOCREDS, "instance metadata has no role name");
        goto out;
    }
    memcpy(role, text, n);
    role[n] = '\0';
    snprintf(url, sizeof(url), "%.*s/latest/meta-data/iam/security-credentials/%s", (int)blen, base,
             role);
    if ((rc = s3d_creds_http(http, S3D_CREDS_IMDS_MS, "iam-role", "GET", url, get_h, NULL, &status,
                             &body)) < 0)
        goto out;
    if (status != 200) {
        rc = s3d_fail(S3D_ECREDS, "iam-role: %s answered HTTP %ld", url, status);
        goto out;
    }
    rc = s3d_creds_from_json(body.data, body.len, "iam-role", "iam-role", "AccessKeyId",
                             "SecretAccessKey", "Token", "Expiration", out);
out:
    curl_slist_free_all(put_h);
    curl_slist_free_all(get_h);
    s3d_dynbuf_free(&body);
    return rc;
}
