/* config.c - configuration resolution as the AWS CLI does it: options, environment, shared
 * credentials and config files, defaults; the endpoint URL; request URLs. */
#include "s3/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"
#include "s3/cabundle.h"
#include "s3/uri.h"

/* ---- INI ------------------------------------------------------------------------------ */

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Trims blanks at both ends of s[0..*len) in place; returns the new start. */
static char *trim(char *s, size_t *len)
{
    while (*len > 0 && is_blank(*s)) {
        s++;
        (*len)--;
    }
    while (*len > 0 && (is_blank(s[*len - 1]) || s[*len - 1] == '\r'))
        (*len)--;
    s[*len] = '\0';
    return s;
}

int s3d_ini_parse(const char *text, size_t len, const char *name, s3d_ini_fn fn, void *user)
{
    char line[S3D_CONFIG_MAX_LINE + 1];
    char section[S3D_CONFIG_MAX_LINE + 1];
    char sub[S3D_CONFIG_MAX_LINE + 1];
    int have_section = 0, have_sub = 0, lineno = 0, rc;
    /* After "key =" with an empty value, indented lines are its sub-section. After a key with
     * a value, an indented line would be a multi-line value: refused. */
    enum { AFTER_NOTHING, AFTER_EMPTY_KEY, AFTER_VALUE } prev = AFTER_NOTHING;
    size_t pos = 0;

    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        pos = 3;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - (text + pos)) : len - pos, klen, vlen;
        char *l, *eq, *key, *val;
        int indented;
        lineno++;
        if (llen > S3D_CONFIG_MAX_LINE)
            return s3d_fail(S3D_ECONFIG, "%s:%d: line longer than %d bytes", name, lineno,
                            S3D_CONFIG_MAX_LINE);
        if (memchr(text + pos, '\0', llen) != NULL)
            return s3d_fail(S3D_ECONFIG, "%s:%d: NUL byte in line", name, lineno);
        memcpy(line, text + pos, llen);
        line[llen] = '\0';
        pos += llen + (nl ? 1 : 0);
        indented = llen > 0 && is_blank(line[0]);
        l = trim(line, &llen);
        if (llen == 0 || l[0] == '#' || l[0] == ';')
            continue;
        if (l[0] == '[') {
            size_t slen;
            char *s;
            if (l[llen - 1] != ']' || llen < 3)
                return s3d_fail(S3D_ECONFIG, "%s:%d: malformed section header \"%.80s\"", name,
                                lineno, l);
            slen = llen - 2;
            s = trim(l + 1, &slen);
            if (slen == 0)
                return s3d_fail(S3D_ECONFIG, "%s:%d: empty section name", name, lineno);
            memcpy(section, s, slen + 1);
            have_section = 1;
            have_sub = 0;
            prev = AFTER_NOTHING;
            continue;
        }
        if (!have_section)
            return s3d_fail(S3D_ECONFIG, "%s:%d: \"%.80s\" before any [section]", name, lineno, l);
        if (indented && prev == AFTER_VALUE)
            return s3d_fail(S3D_ECONFIG,
                            "%s:%d: indented line after a value (multi-line "
                            "values are not supported)",
                            name, lineno);
        if (!indented)
            have_sub = 0;
        eq = l + strcspn(l, "=:");
        if (*eq == '\0')
            return s3d_fail(S3D_ECONFIG, "%s:%d: expected \"key = value\", got \"%.80s\"", name,
                            lineno, l);
        klen = (size_t)(eq - l);
        key = trim(l, &klen);
        vlen = strlen(eq + 1);
        val = trim(eq + 1, &vlen);
        if (klen == 0)
            return s3d_fail(S3D_ECONFIG, "%s:%d: empty key", name, lineno);
        for (size_t i = 0; i < klen; i++)
            if (key[i] >= 'A' && key[i] <= 'Z')
                key[i] = (char)(key[i] - 'A' + 'a');
        if (!indented && vlen == 0) {
            /* "s3 =" opens a sub-section; the key itself is reported with an empty value too,
             * so a plain empty setting is still visible to the callback. */
            memcpy(sub, key, klen + 1);
            have_sub = 1;
            prev = AFTER_EMPTY_KEY;
            if ((rc = fn(user, section, NULL, key, "", lineno)) < 0)
                return rc;
            continue;
        }
        if (indented && !have_sub)
            return s3d_fail(S3D_ECONFIG, "%s:%d: indented line outside a sub-section", name,
                            lineno);
        prev = indented ? AFTER_EMPTY_KEY : AFTER_VALUE;
        if ((rc = fn(user, section, indented ? sub : NULL, key, val, lineno)) < 0)
            return rc;
    }
    return 0;
}

/* ---- reading the files ---------------------------------------------------------------- */

/* Reads path into *out (malloc'ed, NUL-terminated). Returns 0, 1 when the file does not exist,
 * or S3D_ECONFIG / S3D_ENOMEM. */
int s3d_config_read_file(const char *path, char **out, size_t *out_len)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd, rc = 0;
    *out = NULL;
    *out_len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 1;
        return s3d_fail(S3D_ECONFIG, "cannot open %s: %s", path, strerror(errno));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = s3d_fail(S3D_ECONFIG, "%s is not a regular file", path);
        goto out;
    }
    if (st.st_size > S3D_CONFIG_MAX_FILE) {
        rc = s3d_fail(S3D_ECONFIG, "%s is %lld bytes, over the limit of %d", path,
                      (long long)st.st_size, S3D_CONFIG_MAX_FILE);
        goto out;
    }
    if ((buf = malloc(S3D_CONFIG_MAX_FILE + 1)) == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading %s", path);
        goto out;
    }
    /* Read to EOF with the cap, not trusting st_size (the file may grow meanwhile). */
    for (;;) {
        ssize_t n = read(fd, buf + got, S3D_CONFIG_MAX_FILE + 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = s3d_fail(S3D_ECONFIG, "cannot read %s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got > S3D_CONFIG_MAX_FILE) {
            rc = s3d_fail(S3D_ECONFIG, "%s is over the limit of %d bytes", path,
                          S3D_CONFIG_MAX_FILE);
            goto out;
        }
    }
    buf[got] = '\0';
    *out = buf;
    *out_len = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---- resolution ----------------------------------------------------------------------- */

/* What one file says for the chosen profile. */
struct prof {
    int found;
    char *key_id, *secret, *token, *region, *endpoint, *s3_endpoint, *addressing, *ca_bundle;
    char *payload_signing, *services;
};

static void prof_free(struct prof *p)
{
    free(p->key_id);
    free(p->secret);
    free(p->token);
    free(p->region);
    free(p->endpoint);
    free(p->s3_endpoint);
    free(p->addressing);
    free(p->ca_bundle);
    free(p->payload_signing);
    free(p->services);
    memset(p, 0, sizeof(*p));
}

struct prof_ctx {
    const char *profile;
    int config_file;      /* 1: "[profile NAME]" / "[default]" sections */
    const char *services; /* non-NULL: collect "[services NAME]" s3 endpoint_url instead */
    struct prof *p;
};

static int set_str(char **dst, const char *v)
{
    char *s = strdup(v);
    if (s == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory reading the configuration");
    free(*dst);
    *dst = s;
    return 0;
}

/* Does section name this profile? "profile NAME" (blanks between) in the config file, with
 * "default" also accepted bare there; "NAME" in the credentials file. */
static int section_matches(const struct prof_ctx *c, const char *section)
{
    if (c->services != NULL) {
        if (strncmp(section, "services", 8) != 0 || !is_blank(section[8]))
            return 0;
        section += 9;
        while (is_blank(*section))
            section++;
        return strcmp(section, c->services) == 0;
    }
    if (!c->config_file)
        return strcmp(section, c->profile) == 0;
    if (strcmp(c->profile, "default") == 0 && strcmp(section, "default") == 0)
        return 1;
    if (strncmp(section, "profile", 7) != 0 || !is_blank(section[7]))
        return 0;
    section += 8;
    while (is_blank(*section))
        section++;
    return strcmp(section, c->profile) == 0;
}

static int prof_cb(void *user, const char *section, const char *sub, const char *key,
                   const char *value, int line)
{
    struct prof_ctx *c = user;
    struct prof *p = c->p;
    char **dst = NULL;
    (void)line;
    if (!section_matches(c, section))
        return 0;
    p->found = 1;
    if (c->services != NULL) {
        if (sub != NULL && strcmp(sub, "s3") == 0 && strcmp(key, "endpoint_url") == 0)
            dst = &p->s3_endpoint;
    } else if (sub == NULL) {
        if (value[0] == '\0')
            return 0; /* an empty setting (or a sub-section opener) counts as unset */
        if (strcmp(key, "aws_access_key_id") == 0)
            dst = &p->key_id;
        else if (strcmp(key, "aws_secret_access_key") == 0)
            dst = &p->secret;
        else if (strcmp(key, "aws_session_token") == 0 ||
                 (strcmp(key, "aws_security_token") == 0 && p->token == NULL))
            dst = &p->token;
        else if (c->config_file && strcmp(key, "region") == 0)
            dst = &p->region;
        else if (c->config_file && strcmp(key, "endpoint_url") == 0)
            dst = &p->endpoint;
        else if (c->config_file && strcmp(key, "ca_bundle") == 0)
            dst = &p->ca_bundle;
        else if (c->config_file && strcmp(key, "services") == 0)
            dst = &p->services;
    } else if (c->config_file && strcmp(sub, "s3") == 0) {
        if (strcmp(key, "endpoint_url") == 0)
            dst = &p->s3_endpoint;
        else if (strcmp(key, "addressing_style") == 0)
            dst = &p->addressing;
        else if (strcmp(key, "payload_signing_enabled") == 0)
            dst = &p->payload_signing;
    }
    return dst != NULL ? set_str(dst, value) : 0;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Path of a shared file: the environment variable (with "~/" expanded) or ~/.aws/NAME.
 * Returns 0 with *out NULL when there is no HOME to look in. */
int s3d_config_file_path(const char *envname, const char *basename, char **out)
{
    const char *p = env(envname), *home = env("HOME");
    size_t n;
    *out = NULL;
    if (p != NULL && !(p[0] == '~' && p[1] == '/')) {
        *out = strdup(p);
    } else if (home != NULL) {
        const char *rest = p ? p + 1 : NULL;
        n = strlen(home) + (rest ? strlen(rest) : strlen(basename) + 6) + 1;
        if ((*out = malloc(n)) != NULL) {
            if (rest)
                snprintf(*out, n, "%s%s", home, rest);
            else
                snprintf(*out, n, "%s/.aws/%s", home, basename);
        }
    } else {
        return 0;
    }
    return *out ? 0 : s3d_fail(S3D_ENOMEM, "out of memory resolving %s", envname);
}

/* Reads one shared file into *p (for the profile, or for a services section). */
static int load_file(const char *path, struct prof_ctx *ctx, const char *text, size_t len)
{
    (void)path;
    return s3d_ini_parse(text, len, path, prof_cb, ctx);
}

static int parse_bool(const char *v, int *out)
{
    if (strcasecmp(v, "true") == 0) {
        *out = 1;
        return 0;
    }
    if (strcasecmp(v, "false") == 0) {
        *out = 0;
        return 0;
    }
    return -1;
}

static int dup_or_null(char **dst, const char *v)
{
    *dst = NULL;
    if (v == NULL)
        return 0;
    return set_str(dst, v);
}

void s3d_config_free(struct s3d_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->endpoint_url);
    free(cfg->host);
    free(cfg->base_path);
    free(cfg->region);
    free(cfg->profile);
    free(cfg->access_key_id);
    if (cfg->secret_access_key != NULL)
        memset(cfg->secret_access_key, 0, strlen(cfg->secret_access_key));
    free(cfg->secret_access_key);
    free(cfg->session_token);
    free(cfg->ca_bundle);
    memset(cfg, 0, sizeof(*cfg));
}

int s3d_config_resolve(const struct s3d_client_options *opts, struct s3d_config *out)
{
    static const struct s3d_client_options zero_opts;
    struct prof cred = {0}, conf = {0}, svc = {0};
    char *cred_path = NULL, *conf_path = NULL, *cred_text = NULL, *conf_text = NULL;
    char *default_ep = NULL;
    size_t cred_len = 0, conf_len = 0;
    const char *profile, *region, *endpoint, *ca;
    int explicit_profile, rc, cred_missing = 1, conf_missing = 1, addressing, payload;

    memset(out, 0, sizeof(*out));
    if (opts == NULL)
        opts = &zero_opts;
    /* Only fields inside struct_size exist in an older caller's struct: the fields read here
     * are all in the first version, so struct_size needs no check yet. */

    if ((opts->access_key_id == NULL) != (opts->secret_access_key == NULL)) {
        rc = s3d_fail(S3D_ECONFIG, "options: %s given without %s",
                      opts->access_key_id ? "access_key_id" : "secret_access_key",
                      opts->access_key_id ? "secret_access_key" : "access_key_id");
        goto fail;
    }
    if (opts->addressing < S3D_ADDRESSING_AUTO || opts->addressing > S3D_ADDRESSING_VIRTUAL ||
        opts->payload_signing < S3D_PAYLOAD_AUTO || opts->payload_signing > S3D_PAYLOAD_UNSIGNED) {
        rc = s3d_fail(S3D_ECONFIG, "options: addressing %d or payload_signing %d out of range",
                      opts->addressing, opts->payload_signing);
        goto fail;
    }

    explicit_profile = 1;
    profile = opts->profile && opts->profile[0] ? opts->profile : env("AWS_PROFILE");
    if (profile == NULL) {
        profile = "default";
        explicit_profile = 0;
    }

    /* The shared files, for the profile. */
    if ((rc = s3d_config_file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials", &cred_path)) < 0 ||
        (rc = s3d_config_file_path("AWS_CONFIG_FILE", "config", &conf_path)) < 0)
        goto fail;
    if (cred_path != NULL) {
        struct prof_ctx ctx = {profile, 0, NULL, &cred};
        if ((rc = s3d_config_read_file(cred_path, &cred_text, &cred_len)) < 0)
            goto fail;
        cred_missing = rc == 1;
        if (!cred_missing && (rc = load_file(cred_path, &ctx, cred_text, cred_len)) < 0)
            goto fail;
    }
    if (conf_path != NULL) {
        struct prof_ctx ctx = {profile, 1, NULL, &conf};
        if ((rc = s3d_config_read_file(conf_path, &conf_text, &conf_len)) < 0)
            goto fail;
        conf_missing = rc == 1;
        if (!conf_missing && (rc = load_file(conf_path, &ctx, conf_text, conf_len)) < 0)
            goto fail;
        if (!conf_missing && conf.services != NULL) {
            struct prof_ctx sctx = {profile, 1, conf.services, &svc};
            if ((rc = load_file(conf_path, &sctx, conf_text, conf_len)) < 0)
                goto fail;
        }
    }
    if (explicit_profile && !cred.found && !conf.found) {
        rc = s3d_fail(S3D_ECONFIG, "profile \"%s\" not found in %s or %s", profile,
                      cred_path ? cred_path : "(no credentials file)",
                      conf_path ? conf_path : "(no config file)");
        goto fail;
    }
    if ((rc = set_str(&out->profile, profile)) < 0)
        goto fail;

    /* Credentials: taken as a set from the first source that has both halves. */
    if (opts->anonymous) {
        out->anonymous = 1;
        out->credential_source = "anonymous";
    } else {
        const char *id = NULL, *secret = NULL, *token = NULL;
        if (opts->access_key_id != NULL) {
            id = opts->access_key_id;
            secret = opts->secret_access_key;
            token = opts->session_token;
            out->credential_source = "options";
        } else if (!(opts->profile && opts->profile[0]) && env("AWS_ACCESS_KEY_ID") &&
                   env("AWS_SECRET_ACCESS_KEY")) {
            /* A profile named in the options skips the environment's keys, as botocore's
             * Session(profile=...) does (AWS_PROFILE does not). */
            id = env("AWS_ACCESS_KEY_ID");
            secret = env("AWS_SECRET_ACCESS_KEY");
            token = env("AWS_SESSION_TOKEN");
            out->credential_source = "env";
        } else if (cred.key_id && cred.secret) {
            id = cred.key_id;
            secret = cred.secret;
            token = cred.token;
            out->credential_source = "shared-credentials-file";
        } else if (conf.key_id && conf.secret) {
            id = conf.key_id;
            secret = conf.secret;
            token = conf.token;
            out->credential_source = "config-file";
        } else {
            out->credential_source = "none";
        }
        if (token != NULL && token[0] == '\0')
            token = NULL;
        if ((rc = dup_or_null(&out->access_key_id, id)) < 0 ||
            (rc = dup_or_null(&out->secret_access_key, secret)) < 0 ||
            (rc = dup_or_null(&out->session_token, token)) < 0)
            goto fail;
    }

    region = opts->region && opts->region[0] ? opts->region : env("AWS_REGION");
    if (region == NULL)
        region = env("AWS_DEFAULT_REGION");
    if (region == NULL)
        region = conf.region;
    if (region == NULL)
        region = "us-east-1";
    if (strchr(region, '/') != NULL || strchr(region, ' ') != NULL) {
        rc = s3d_fail(S3D_ECONFIG, "invalid region \"%.64s\"", region);
        goto fail;
    }
    if ((rc = set_str(&out->region, region)) < 0)
        goto fail;

    ca = opts->ca_bundle && opts->ca_bundle[0] ? opts->ca_bundle : env("AWS_CA_BUNDLE");
    if (ca == NULL)
        ca = conf.ca_bundle;
    ca = s3d_ca_bundle_choose(ca, env("SSL_CERT_FILE"), opts->default_ca_bundle, s3d_ca_file_usable,
                              &out->ca_bundle_source);
    if ((rc = dup_or_null(&out->ca_bundle, ca)) < 0)
        goto fail;
    out->no_verify_ssl = opts->no_verify_ssl != 0;

    addressing = opts->addressing;
    if (addressing == S3D_ADDRESSING_AUTO && conf.addressing != NULL) {
        if (strcmp(conf.addressing, "path") == 0)
            addressing = S3D_ADDRESSING_PATH;
        else if (strcmp(conf.addressing, "virtual") == 0)
            addressing = S3D_ADDRESSING_VIRTUAL;
        else if (strcmp(conf.addressing, "auto") != 0) {
            rc = s3d_fail(S3D_ECONFIG,
                          "%s: profile \"%s\": s3 addressing_style \"%.40s\" is "
                          "not auto, path or virtual",
                          conf_path, profile, conf.addressing);
            goto fail;
        }
    }
    out->addressing = addressing;

    endpoint = opts->endpoint_url && opts->endpoint_url[0] ? opts->endpoint_url
                                                           : env("AWS_ENDPOINT_URL_S3");
    if (endpoint == NULL)
        endpoint = env("AWS_ENDPOINT_URL");
    if (endpoint == NULL)
        endpoint = svc.s3_endpoint;
    if (endpoint == NULL)
        endpoint = conf.s3_endpoint;
    if (endpoint == NULL)
        endpoint = conf.endpoint;
    if (endpoint == NULL) {
        size_t n = strlen(out->region) + 32;
        if ((default_ep = malloc(n)) == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "out of memory resolving the endpoint");
            goto fail;
        }
        snprintf(default_ep, n, "https://s3.%s.amazonaws.com", out->region);
        endpoint = default_ep;
    }
    if ((rc = s3d_config_parse_endpoint(endpoint, out)) < 0)
        goto fail;

    payload = opts->payload_signing;
    if (payload == S3D_PAYLOAD_AUTO && conf.payload_signing != NULL) {
        int b;
        if (parse_bool(conf.payload_signing, &b) < 0) {
            rc = s3d_fail(S3D_ECONFIG,
                          "%s: profile \"%s\": s3 payload_signing_enabled "
                          "\"%.40s\" is not true or false",
                          conf_path, profile, conf.payload_signing);
            goto fail;
        }
        payload = b ? S3D_PAYLOAD_SIGNED : S3D_PAYLOAD_UNSIGNED;
    }
    if (payload == S3D_PAYLOAD_AUTO)
        payload = out->https ? S3D_PAYLOAD_UNSIGNED : S3D_PAYLOAD_SIGNED;
    out->payload_signing = payload;
    rc = 0;
    goto out;
fail:
    s3d_config_free(out);
out:
    prof_free(&cred);
    prof_free(&conf);
    prof_free(&svc);
    free(cred_path);
    free(conf_path);
    if (cred_text != NULL)
        memset(cred_text, 0, cred_len);
    free(cred_text);
    if (conf_text != NULL)
        memset(conf_text, 0, conf_len);
    free(conf_text);
    free(default_ep);
    (void)cred_missing;
    (void)conf_missing;
    return rc;
}

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
        port = https ? 443 : 80;
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
    int default_port = cfg->port == (cfg->https ? 443 : 80);
    int has_key = key != NULL && key[0] != '\0';

    s3d_dynbuf_init(&host, 4096);
    s3d_dynbuf_init(&path, 16384);
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
