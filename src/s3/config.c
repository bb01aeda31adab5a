/* config.c - configuration resolution as the AWS CLI does it: options, environment, shared
 * credentials and config files (read by ini.c), defaults. The endpoint URL and request URLs
 * are endpoint.c's. */
#include "s3/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"
#include "s3/cabundle.h"
#include "s3/ini.h"

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
        if (strncmp(section, "services", 8) != 0 || !s3d_ini_is_blank(section[8]))
            return 0;
        section += 9;
        while (s3d_ini_is_blank(*section))
            section++;
        return strcmp(section, c->services) == 0;
    }
    if (!c->config_file)
        return strcmp(section, c->profile) == 0;
    if (strcmp(c->profile, "default") == 0 && strcmp(section, "default") == 0)
        return 1;
    if (strncmp(section, "profile", 7) != 0 || !s3d_ini_is_blank(section[7]))
        return 0;
    section += 8;
    while (s3d_ini_is_blank(*section))
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
    if ((rc = s3d_ini_file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials", &cred_path)) < 0 ||
        (rc = s3d_ini_file_path("AWS_CONFIG_FILE", "config", &conf_path)) < 0)
        goto fail;
    if (cred_path != NULL) {
        struct prof_ctx ctx = {profile, 0, NULL, &cred};
        if ((rc = s3d_ini_read_file(cred_path, &cred_text, &cred_len)) < 0)
            goto fail;
        cred_missing = rc == 1;
        if (!cred_missing && (rc = load_file(cred_path, &ctx, cred_text, cred_len)) < 0)
            goto fail;
    }
    if (conf_path != NULL) {
        struct prof_ctx ctx = {profile, 1, NULL, &conf};
        if ((rc = s3d_ini_read_file(conf_path, &conf_text, &conf_len)) < 0)
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
