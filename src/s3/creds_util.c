/* creds_util.c - what the credential providers share: profile sections, snapshots, the JSON
 * credential formats, one small HTTP request, small files (see creds_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/fdio.h"
#include "s3/creds_int.h"
#include "s3/ini.h"
#include "s3/timefmt.h"

/* ---- profile sections --------------------------------------------------------------------- */

struct section_ctx {
    const char *kind; /* "profile" or "sso-session" */
    const char *name;
    int config_file;
    struct s3d_profile *p;
};

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

static int section_is(const struct section_ctx *c, const char *section)
{
    size_t kl = strlen(c->kind);
    if (!c->config_file)
        return strcmp(section, c->name) == 0;
    if (strcmp(c->kind, "profile") == 0 && strcmp(c->name, "default") == 0 &&
        strcmp(section, "default") == 0)
        return 1;
    if (strncmp(section, c->kind, kl) != 0 || !blank(section[kl]))
        return 0;
    section += kl;
    while (blank(*section))
        section++;
    return strcmp(section, c->name) == 0;
}

static int section_cb(void *user, const char *section, const char *sub, const char *key,
                      const char *value, int line)
{
    struct section_ctx *c = user;
    struct s3d_profile *p = c->p;
    size_t i;
    char *v;
    (void)line;
    if (sub != NULL || !section_is(c, section))
        return 0;
    p->found = 1;
    if ((v = strdup(value)) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory reading the configuration");
    for (i = 0; i < p->n; i++)
        if (strcmp(p->kv[i].key, key) == 0) {
            free(p->kv[i].value);
            p->kv[i].value = v;
            return 0;
        }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        void *g = s3d_reallocarray(p->kv, cap, sizeof(*p->kv));
        if (g == NULL) {
            free(v);
            return s3d_fail(S3D_ENOMEM, "out of memory reading the configuration");
        }
        p->kv = g;
        p->cap = cap;
    }
    if ((p->kv[p->n].key = strdup(key)) == NULL) {
        free(v);
        return s3d_fail(S3D_ENOMEM, "out of memory reading the configuration");
    }
    p->kv[p->n++].value = v;
    return 0;
}

static int load_one(const char *envname, const char *base, struct section_ctx *c)
{
    char *path = NULL, *text = NULL;
    size_t len = 0;
    int rc;
    if ((rc = s3d_ini_file_path(envname, base, &path)) < 0 || path == NULL)
        return rc;
    rc = s3d_ini_read_file(path, &text, &len);
    if (rc == 0)
        rc = s3d_ini_parse(text, len, path, section_cb, c);
    else if (rc == 1)
        rc = 0;
    if (text != NULL)
        memset(text, 0, len);
    free(text);
    free(path);
    return rc;
}

int s3d_profile_load(const char *kind, const char *name, struct s3d_profile *out)
{
    struct section_ctx c = {kind, name, 1, out};
    int rc;
    memset(out, 0, sizeof(*out));
    if ((rc = load_one("AWS_CONFIG_FILE", "config", &c)) < 0)
        goto fail;
    if (strcmp(kind, "profile") == 0) {
        c.config_file = 0;
        if ((rc = load_one("AWS_SHARED_CREDENTIALS_FILE", "credentials", &c)) < 0)
            goto fail;
    }
    return 0;
fail:
    s3d_profile_free(out);
    return rc;
}

const char *s3d_profile_get(const struct s3d_profile *p, const char *key)
{
    size_t i;
    for (i = 0; i < p->n; i++)
        if (strcmp(p->kv[i].key, key) == 0)
            return p->kv[i].value[0] ? p->kv[i].value : NULL;
    return NULL;
}

void s3d_profile_free(struct s3d_profile *p)
{
    size_t i;
    if (p == NULL)
        return;
    for (i = 0; i < p->n; i++) {
        free(p->kv[i].key);
        memset(p->kv[i].value, 0, strlen(p->kv[i].value));
        free(p->kv[i].value);
    }
    free(p->kv);
    memset(p, 0, sizeof(*p));
}

/* ---- snapshots ---------------------------------------------------------------------------- */

int s3d_creds_make(const char *id, const char *secret, const char *token, int64_t expiration,
                   const char *provider, struct s3d_creds **out)
{
    struct s3d_creds *cr = s3d_calloc(1, sizeof(*cr));
    *out = NULL;
    if (cr == NULL)
        goto nomem;
    atomic_init(&cr->refs, 1);
    cr->expiration = expiration;
    cr->provider = provider;
    if ((cr->access_key_id = strdup(id)) == NULL ||
        (cr->secret_access_key = strdup(secret)) == NULL)
        goto nomem;
    if (token != NULL && token[0] != '\0' && (cr->session_token = strdup(token)) == NULL)
        goto nomem;
    *out = cr;
    return 0;
nomem:
    s3d_creds_release(cr);
    return s3d_fail(S3D_ENOMEM, "out of memory storing credentials");
}

void s3d_creds_release(struct s3d_creds *cr)
{
    if (cr == NULL || atomic_fetch_sub(&cr->refs, 1) != 1)
        return;
    free(cr->access_key_id);
    if (cr->secret_access_key != NULL)
        memset(cr->secret_access_key, 0, strlen(cr->secret_access_key));
    free(cr->secret_access_key);
    if (cr->session_token != NULL)
        memset(cr->session_token, 0, strlen(cr->session_token));
    free(cr->session_token);
    free(cr);
}

/* ---- JSON --------------------------------------------------------------------------------- */

static const char *json_str(json_t *o, const char *key)
{
    json_t *v = key ? json_object_get(o, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int s3d_creds_from_json(const char *text, size_t len, const char *what, const char *provider,
                        const char *id_key, const char *secret_key, const char *token_key,
                        const char *exp_key, struct s3d_creds **out)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    const char *id, *secret, *token, *exp;
    int64_t expiration = 0;
    int rc;
    *out = NULL;
    if (root == NULL || !json_is_object(root)) {
        rc = s3d_fail(S3D_ECREDS, "%s: the response is not a JSON object (%s)", what,
                      root ? "not an object" : jerr.text);
        goto out;
    }
    id = json_str(root, id_key);
    secret = json_str(root, secret_key);
    token = json_str(root, token_key);
    exp = json_str(root, exp_key);
    if (id == NULL || secret == NULL || id[0] == '\0' || secret[0] == '\0') {
        rc = s3d_fail(S3D_ECREDS, "%s: the response has no %s and %s", what, id_key, secret_key);
        goto out;
    }
    if (exp != NULL && s3d_time_parse_iso8601(exp, strlen(exp), &expiration) < 0) {
        rc = s3d_fail(S3D_ECREDS, "%s: %s \"%.40s\" is not an ISO 8601 time", what, exp_key, exp);
        goto out;
    }
    rc = s3d_creds_make(id, secret, token, expiration, provider, out);
out:
    json_decref(root);
    return rc;
}

/* ---- HTTP --------------------------------------------------------------------------------- */

int s3d_creds_http(const struct s3d_http_conf *http, long timeout_ms, const char *what,
                   const char *method, const char *url, struct curl_slist *headers,
                   const char *body, long *status, struct s3d_dynbuf *resp)
{
    struct s3d_http_conf conf = *http;
    struct s3d_http_req req;
    struct iovec iov;
    CURL *e = curl_easy_init();
    CURLcode cc;
    int rc;
    *status = 0;
    if (e == NULL)
        return s3d_fail(S3D_ENOMEM, "curl_easy_init failed");
    memset(&req, 0, sizeof(req));
    conf.connect_timeout_ms = timeout_ms;
    conf.low_speed_limit = 0;
    req.method = method;
    req.url = url;
    req.headers = headers;
    if (body != NULL && body[0] != '\0') {
        iov.iov_base = (void *)body;
        iov.iov_len = strlen(body);
        req.iov = &iov;
        req.iovcnt = 1;
        req.body_len = iov.iov_len;
    }
    req.body_max = S3D_CREDS_MAX_BODY;
    req.timeout_ms = timeout_ms;
    if ((rc = s3d_http_setup(e, &req, &conf)) < 0)
        goto out;
    cc = curl_easy_perform(e);
    if (cc != CURLE_OK) {
        rc = s3d_fail(S3D_ECREDS, "%s: %s: %s", what, url, s3d_http_curl_detail(&req, e, cc));
        goto out;
    }
    if (req.resp.body_toobig || req.resp.header_toobig) {
        rc = s3d_fail(S3D_ECREDS, "%s: %s: response over %u bytes", what, url, S3D_CREDS_MAX_BODY);
        goto out;
    }
    *status = req.resp.status;
    s3d_dynbuf_reset(resp);
    if ((rc = s3d_dynbuf_append(resp, req.resp.body.data ? req.resp.body.data : "",
                                req.resp.body.len)) < 0)
        rc = s3d_fail(rc, "%s: response too large", what);
out:
    s3d_http_req_cleanup(&req);
    curl_easy_cleanup(e);
    return rc;
}

/* ---- files -------------------------------------------------------------------------------- */

int s3d_creds_read_file(const char *path, const char *what, char **out)
{
    char *buf = NULL;
    size_t got = 0;
    uint64_t n;
    int fd, rc = 0, e;
    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return s3d_fail(S3D_ECREDS, "%s: cannot open %s: %s", what, path, strerror(errno));
    if ((buf = malloc(S3D_CREDS_MAX_TOKEN + 1)) == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading %s", path);
        goto out;
    }
    /* A byte past the cap means too large. */
    if ((e = s3d_read_full(fd, buf, S3D_CREDS_MAX_TOKEN + 1, &n)) < 0) {
        rc = s3d_fail(S3D_ECREDS, "%s: cannot read %s: %s", what, path, strerror(-e));
        goto out;
    }
    got = (size_t)n;
    if (got > S3D_CREDS_MAX_TOKEN) {
        rc = s3d_fail(S3D_ECREDS, "%s: %s is over %u bytes", what, path, S3D_CREDS_MAX_TOKEN);
        goto out;
    }
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || blank(buf[got - 1])))
        got--;
    buf[got] = '\0';
    if (memchr(buf, '\0', got) != NULL) {
        rc = s3d_fail(S3D_ECREDS, "%s: %s holds a NUL byte", what, path);
        goto out;
    }
    *out = buf;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}
