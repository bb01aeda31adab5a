/* config.c - configuration resolution as the AWS CLI does it: options, environment, shared
 * credentials and config files (read by ini.c), defaults. The endpoint URL and request URLs
 * are endpoint.c's. */
#include "s3/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/env.h"
#include "common/error.h"
#include "s3/cabundle.h"
#include "s3/ini.h"

/* ---- resolution ----------------------------------------------------------------------- */

/* What one file says for the chosen profile. */
struct prof {
    int found;
    char *key_id, *secret, *token, *region, *endpoint, *s3_endpoint, *addressing, *ca_bundle;
    char *payload_signing, *services;
    char *max_requests, *chunksize, *threshold; /* the AWS CLI's s3 transfer settings */
    char *target_bandwidth;
    char *max_attempts, *retry_mode; /* the AWS CLI's retry settings */
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
    free(p->max_attempts);
    free(p->retry_mode);
    free(p->payload_signing);
    free(p->services);
    free(p->max_requests);
    free(p->chunksize);
    free(p->threshold);
    free(p->target_bandwidth);
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
        else if (c->config_file && strcmp(key, "max_attempts") == 0)
            dst = &p->max_attempts;
        else if (c->config_file && strcmp(key, "retry_mode") == 0)
            dst = &p->retry_mode;
    } else if (c->config_file && strcmp(sub, "s3") == 0) {
        if (strcmp(key, "endpoint_url") == 0)
            dst = &p->s3_endpoint;
        else if (strcmp(key, "addressing_style") == 0)
            dst = &p->addressing;
        else if (strcmp(key, "payload_signing_enabled") == 0)
            dst = &p->payload_signing;
        else if (strcmp(key, "max_concurrent_requests") == 0)
            dst = &p->max_requests;
        else if (strcmp(key, "multipart_chunksize") == 0)
            dst = &p->chunksize;
        else if (strcmp(key, "multipart_threshold") == 0)
            dst = &p->threshold;
        else if (strcmp(key, "target_bandwidth") == 0)
            dst = &p->target_bandwidth;
    }
    return dst != NULL ? set_str(dst, value) : 0;
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

/* A size as the AWS CLI writes it in the s3 section (awscli's human_readable_to_bytes): a
 * decimal integer of bytes, optionally followed (blanks allowed between) by KB, MB, GB, TB or
 * KiB, MiB, GiB, TiB (any case; all powers of 1024). Returns 0, or -1 for anything else or a
 * value over 2^64 - 1. */
int s3d_config_parse_size(const char *v, uint64_t *out)
{
    static const char *const units[] = {"kb", "mb", "gb", "tb"};
    size_t n = strlen(v), digits = n;
    unsigned shift = 0;
    uint64_t x = 0;
    size_t i;

    if (n >= 2 && (v[n - 1] | 0x20) == 'b') {
        int iec = n >= 3 && (v[n - 2] | 0x20) == 'i';
        char u = (char)(v[n - 2 - iec] | 0x20);
        for (i = 0; i < S3D_ARRAY_LEN(units); i++) {
            if (u == units[i][0]) {
                shift = 10 * (unsigned)(i + 1);
                digits = n - 2 - (size_t)iec;
                break;
            }
        }
    }
    while (shift != 0 && digits > 0 && (v[digits - 1] == ' ' || v[digits - 1] == '\t'))
        digits--; /* "16 MB": Python's int() takes the blank */
    if (digits == 0)
        return -1;
    for (i = 0; i < digits; i++) {
        if (v[i] < '0' || v[i] > '9' || x > (UINT64_MAX - (uint64_t)(v[i] - '0')) / 10)
            return -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (shift != 0 && x > (UINT64_MAX >> shift))
        return -1;
    *out = x << shift;
    return 0;
}

/* A rate as the AWS CLI writes the s3 section's target_bandwidth: a whole number of bytes per
 * second, or a number (a decimal fraction allowed) followed by B/s, KB/s, MB/s, GB/s, TB/s
 * (bytes) or b/s, Kb/s, Mb/s, Gb/s, Tb/s (bits; the case of the B tells), the prefixes
 * powers of 1024 as in the AWS CLI ("KiB/s" spelled out is taken too). Returns 0, or -1 for
 * anything else, 0 B/s, or a value over 2^63. */
int s3d_config_parse_rate(const char *v, uint64_t *out)
{
    static const char prefixes[] = "kmgt";
    size_t n = strlen(v), digits;
    double x = 0, scale = 1, frac = 0.1;
    int seen_digit = 0, seen_dot = 0;
    size_t i;

    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    digits = n;
    if (n >= 3 && v[n - 2] == '/' && (v[n - 1] | 0x20) == 's') {
        char unit = v[n - 3];
        size_t k = n - 3;
        if (unit != 'B' && unit != 'b')
            return -1;
        if (unit == 'b')
            scale = 1.0 / 8;
        if (k > 0 && (v[k - 1] | 0x20) == 'i')
            k--;
        if (k > 0) {
            const char *pfx = strchr(prefixes, v[k - 1] | 0x20);
            if (pfx != NULL) {
                for (i = 0; i <= (size_t)(pfx - prefixes); i++)
                    scale *= 1024;
                k--;
            } else if (k != n - 3) {
                return -1; /* an "i" with no prefix */
            }
        }
        digits = k;
        while (digits > 0 && (v[digits - 1] == ' ' || v[digits - 1] == '\t'))
            digits--;
    }
    for (i = 0; i < digits; i++) {
        if (v[i] == '.' && !seen_dot && digits != n) {
            seen_dot = 1;
        } else if (v[i] >= '0' && v[i] <= '9') {
            seen_digit = 1;
            if (seen_dot) {
                x += (v[i] - '0') * frac;
                frac /= 10;
            } else {
                x = x * 10 + (v[i] - '0');
            }
        } else {
            return -1;
        }
        if (x > 9.2e18)
            return -1;
    }
    x *= scale;
    if (!seen_digit || x < 1 || x > 9.2e18)
        return -1;
    *out = (uint64_t)x;
    return 0;
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

/* The state of one resolution: the options, what the shared files say for the profile, and
 * what is being filled. Each resolve_* step below settles one setting in r->out, in the order
 * the later ones depend on (the default endpoint names the region; payload signing's default
 * depends on the endpoint's scheme). */
struct resolve {
    const struct s3d_client_options *opts;
    struct s3d_config *out;
    const char *profile;
    int explicit_profile;        /* named in the options or AWS_PROFILE */
    struct prof cred, conf, svc; /* credentials file, config file, its [services] section */
    char *cred_path, *conf_path; /* NULL when there is no HOME to look in */
    char *cred_text, *conf_text; /* the files' bytes (wiped when done: they hold secrets) */
    size_t cred_len, conf_len;
    char *default_ep;
};

/* The options alone: keys given as a pair, enums in range. */
static int check_options(struct resolve *r)
{
    const struct s3d_client_options *opts = r->opts;
    if ((opts->access_key_id == NULL) != (opts->secret_access_key == NULL))
        return s3d_fail(S3D_ECONFIG, "options: %s given without %s",
                        opts->access_key_id ? "access_key_id" : "secret_access_key",
                        opts->access_key_id ? "secret_access_key" : "access_key_id");
    if (opts->addressing < S3D_ADDRESSING_AUTO || opts->addressing > S3D_ADDRESSING_VIRTUAL ||
        opts->payload_signing < S3D_PAYLOAD_AUTO || opts->payload_signing > S3D_PAYLOAD_UNSIGNED)
        return s3d_fail(S3D_ECONFIG, "options: addressing %d or payload_signing %d out of range",
                        opts->addressing, opts->payload_signing);
    return 0;
}

/* The profile: options, AWS_PROFILE, then "default" (not explicit). */
static int resolve_profile(struct resolve *r)
{
    r->explicit_profile = 1;
    r->profile =
        r->opts->profile && r->opts->profile[0] ? r->opts->profile : s3d_env("AWS_PROFILE");
    if (r->profile == NULL) {
        r->profile = "default";
        r->explicit_profile = 0;
    }
    return 0;
}

/* Reads both shared files for the profile (and the config file's services section when the
 * profile names one); an explicitly chosen profile must be in one of them. */
static int load_shared_files(struct resolve *r)
{
    int rc;
    if ((rc = s3d_ini_file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials", &r->cred_path)) < 0 ||
        (rc = s3d_ini_file_path("AWS_CONFIG_FILE", "config", &r->conf_path)) < 0)
        return rc;
    if (r->cred_path != NULL) {
        struct prof_ctx ctx = {r->profile, 0, NULL, &r->cred};
        if ((rc = s3d_ini_read_file(r->cred_path, &r->cred_text, &r->cred_len)) < 0)
            return rc;
        if (rc != 1 && (rc = load_file(r->cred_path, &ctx, r->cred_text, r->cred_len)) < 0)
            return rc;
    }
    if (r->conf_path != NULL) {
        struct prof_ctx ctx = {r->profile, 1, NULL, &r->conf};
        int missing;
        if ((rc = s3d_ini_read_file(r->conf_path, &r->conf_text, &r->conf_len)) < 0)
            return rc;
        missing = rc == 1;
        if (!missing && (rc = load_file(r->conf_path, &ctx, r->conf_text, r->conf_len)) < 0)
            return rc;
        if (!missing && r->conf.services != NULL) {
            struct prof_ctx sctx = {r->profile, 1, r->conf.services, &r->svc};
            if ((rc = load_file(r->conf_path, &sctx, r->conf_text, r->conf_len)) < 0)
                return rc;
        }
    }
    if (r->explicit_profile && !r->cred.found && !r->conf.found)
        return s3d_fail(S3D_ECONFIG, "profile \"%s\" not found in %s or %s", r->profile,
                        r->cred_path ? r->cred_path : "(no credentials file)",
                        r->conf_path ? r->conf_path : "(no config file)");
    return set_str(&r->out->profile, r->profile);
}

/* Credentials: taken as a set from the first source that has both halves. */
static int resolve_credentials(struct resolve *r)
{
    const struct s3d_client_options *opts = r->opts;
    struct s3d_config *out = r->out;
    const char *id = NULL, *secret = NULL, *token = NULL;
    int rc;
    if (opts->anonymous) {
        out->anonymous = 1;
        out->credential_source = "anonymous";
        return 0;
    }
    if (opts->access_key_id != NULL) {
        id = opts->access_key_id;
        secret = opts->secret_access_key;
        token = opts->session_token;
        out->credential_source = "options";
    } else if (!(opts->profile && opts->profile[0]) && s3d_env("AWS_ACCESS_KEY_ID") &&
               s3d_env("AWS_SECRET_ACCESS_KEY")) {
        /* A profile named in the options skips the environment's keys, as botocore's
         * Session(profile=...) does (AWS_PROFILE does not). */
        id = s3d_env("AWS_ACCESS_KEY_ID");
        secret = s3d_env("AWS_SECRET_ACCESS_KEY");
        token = s3d_env("AWS_SESSION_TOKEN");
        out->credential_source = "env";
    } else if (r->cred.key_id && r->cred.secret) {
        id = r->cred.key_id;
        secret = r->cred.secret;
        token = r->cred.token;
        out->credential_source = "shared-credentials-file";
    } else if (r->conf.key_id && r->conf.secret) {
        id = r->conf.key_id;
        secret = r->conf.secret;
        token = r->conf.token;
        out->credential_source = "config-file";
    } else {
        out->credential_source = "none";
    }
    if (token != NULL && token[0] == '\0')
        token = NULL;
    if ((rc = dup_or_null(&out->access_key_id, id)) < 0 ||
        (rc = dup_or_null(&out->secret_access_key, secret)) < 0 ||
        (rc = dup_or_null(&out->session_token, token)) < 0)
        return rc;
    return 0;
}

/* Region: options, AWS_REGION, AWS_DEFAULT_REGION, the profile, then us-east-1. */
static int resolve_region(struct resolve *r)
{
    const char *region =
        r->opts->region && r->opts->region[0] ? r->opts->region : s3d_env("AWS_REGION");
    if (region == NULL)
        region = s3d_env("AWS_DEFAULT_REGION");
    if (region == NULL)
        region = r->conf.region;
    if (region == NULL)
        region = "us-east-1";
    if (strchr(region, '/') != NULL || strchr(region, ' ') != NULL)
        return s3d_fail(S3D_ECONFIG, "invalid region \"%.64s\"", region);
    return set_str(&r->out->region, region);
}

/* CA bundle: options, AWS_CA_BUNDLE, the profile, then cabundle.c's fallbacks; and the
 * no_verify_ssl switch (options only). */
static int resolve_tls(struct resolve *r)
{
    const struct s3d_client_options *opts = r->opts;
    const char *ca =
        opts->ca_bundle && opts->ca_bundle[0] ? opts->ca_bundle : s3d_env("AWS_CA_BUNDLE");
    int rc;
    if (ca == NULL)
        ca = r->conf.ca_bundle;
    ca = s3d_ca_bundle_choose(ca, s3d_env("SSL_CERT_FILE"), opts->default_ca_bundle,
                              s3d_ca_file_usable, &r->out->ca_bundle_source);
    if ((rc = dup_or_null(&r->out->ca_bundle, ca)) < 0)
        return rc;
    r->out->no_verify_ssl = opts->no_verify_ssl != 0;
    return 0;
}

/* Addressing: options, else the profile's s3 addressing_style. */
static int resolve_addressing(struct resolve *r)
{
    const char *style = r->conf.addressing;
    int addressing = r->opts->addressing;
    if (addressing == S3D_ADDRESSING_AUTO && style != NULL) {
        if (strcmp(style, "path") == 0)
            addressing = S3D_ADDRESSING_PATH;
        else if (strcmp(style, "virtual") == 0)
            addressing = S3D_ADDRESSING_VIRTUAL;
        else if (strcmp(style, "auto") != 0)
            return s3d_fail(S3D_ECONFIG,
                            "%s: profile \"%s\": s3 addressing_style \"%.40s\" is "
                            "not auto, path or virtual",
                            r->conf_path, r->profile, style);
    }
    r->out->addressing = addressing;
    return 0;
}

/* Endpoint, in config.h's order; the default names the region, so it comes after it. */
static int resolve_endpoint(struct resolve *r)
{
    const struct s3d_client_options *opts = r->opts;
    const char *endpoint = opts->endpoint_url && opts->endpoint_url[0]
                               ? opts->endpoint_url
                               : s3d_env("AWS_ENDPOINT_URL_S3");
    if (endpoint == NULL)
        endpoint = s3d_env("AWS_ENDPOINT_URL");
    if (endpoint == NULL)
        endpoint = r->svc.s3_endpoint;
    if (endpoint == NULL)
        endpoint = r->conf.s3_endpoint;
    if (endpoint == NULL)
        endpoint = r->conf.endpoint;
    if (endpoint == NULL) {
        size_t n = strlen(r->out->region) + 32;
        if ((r->default_ep = malloc(n)) == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory resolving the endpoint");
        snprintf(r->default_ep, n, "https://s3.%s.amazonaws.com", r->out->region);
        endpoint = r->default_ep;
    }
    {
        int rc = s3d_config_parse_endpoint(endpoint, r->out);
        r->out->endpoint_is_default = rc == 0 && endpoint == r->default_ep;
        return rc;
    }
}

/* Payload signing: options, the profile's s3 payload_signing_enabled, else unsigned over
 * https and AUTO over http (so it comes after the endpoint). */
static int resolve_payload_signing(struct resolve *r)
{
    const char *v = r->conf.payload_signing;
    int payload = r->opts->payload_signing;
    if (payload == S3D_PAYLOAD_AUTO && v != NULL) {
        int b;
        if (parse_bool(v, &b) < 0)
            return s3d_fail(S3D_ECONFIG,
                            "%s: profile \"%s\": s3 payload_signing_enabled "
                            "\"%.40s\" is not true or false",
                            r->conf_path, r->profile, v);
        payload = b ? S3D_PAYLOAD_SIGNED : S3D_PAYLOAD_UNSIGNED;
    }
    /* AUTO stays AUTO over plain http: signed until the server shows it checks the CRC-32C
     * that comes with each body (s3d_op_probe_body_crc). */
    if (payload == S3D_PAYLOAD_AUTO && r->out->https)
        payload = S3D_PAYLOAD_UNSIGNED;
    r->out->payload_signing = payload;
    return 0;
}

/* One size setting of the profile's s3 section: *out = the value (unchanged when v is NULL),
 * or S3D_ECONFIG naming the setting when it is not a size from 1 byte to max. */
static int profile_size(struct resolve *r, const char *name, const char *v, uint64_t max,
                        uint64_t *out)
{
    uint64_t x;
    if (v == NULL)
        return 0;
    if (s3d_config_parse_size(v, &x) < 0 || x == 0 || x > max) {
        char bound[32] = "";
        if (max != UINT64_MAX)
            snprintf(bound, sizeof(bound), " to %llu GiB", (unsigned long long)(max >> 30));
        return s3d_fail(S3D_ECONFIG,
                        "%s: profile \"%s\": s3 %s \"%.40s\" is not a size from 1 byte%s "
                        "(bytes, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB)",
                        r->conf_path, r->profile, name, v, bound);
    }
    *out = x;
    return 0;
}

/* The AWS CLI's transfer settings in the profile's "s3 =" sub-section (0 = not set; the
 * options and the library's defaults are applied by the client). */
static int resolve_transfer(struct resolve *r)
{
    const char *v = r->conf.max_requests;
    uint64_t x;
    if (v != NULL) {
        if (v[strspn(v, "0123456789")] != '\0' || s3d_config_parse_size(v, &x) < 0 || x == 0 ||
            x > S3D_MAX_CONCURRENCY)
            return s3d_fail(S3D_ECONFIG,
                            "%s: profile \"%s\": s3 max_concurrent_requests \"%.40s\" is not "
                            "a whole number from 1 to %u",
                            r->conf_path, r->profile, v, S3D_MAX_CONCURRENCY);
        r->out->max_concurrency = (uint32_t)x;
    }
    v = r->opts->target_throughput != NULL && r->opts->target_throughput[0] != '\0'
            ? r->opts->target_throughput
            : r->conf.target_bandwidth;
    if (v != NULL && s3d_config_parse_rate(v, &r->out->target_throughput) < 0) {
        if (v == r->opts->target_throughput)
            return s3d_fail(S3D_ECONFIG,
                            "options: target_throughput \"%.40s\" is not a rate (bytes per "
                            "second, or a number with B/s, KB/s, MB/s, GB/s or b/s, Kb/s, Mb/s, "
                            "Gb/s)",
                            v);
        return s3d_fail(S3D_ECONFIG,
                        "%s: profile \"%s\": s3 target_bandwidth \"%.40s\" is not a rate (bytes "
                        "per second, or a number with B/s, KB/s, MB/s, GB/s or b/s, Kb/s, Mb/s, "
                        "Gb/s)",
                        r->conf_path, r->profile, v);
    }
    if (profile_size(r, "multipart_chunksize", r->conf.chunksize, S3D_MAX_PART_SIZE,
                     &r->out->part_size) < 0 ||
        profile_size(r, "multipart_threshold", r->conf.threshold, UINT64_MAX,
                     &r->out->multipart_threshold) < 0)
        return S3D_ECONFIG;
    return 0;
}

/* Retries as the AWS CLI reads them: max_attempts (the tries, the first included) from
 * AWS_MAX_ATTEMPTS, else the profile's max_attempts; retry_mode from AWS_RETRY_MODE, else
 * the profile's: "legacy" (5 tries), "standard" or "adaptive" (3 tries, as botocore) when
 * max_attempts is not set. The options' max_attempts wins over all (the client applies it).
 * Throttles are retried past the tries in every mode (retry.h). */
static int resolve_retries(struct resolve *r)
{
    const char *v = s3d_env("AWS_MAX_ATTEMPTS");
    const char *from = "AWS_MAX_ATTEMPTS";
    uint64_t x;
    if (v == NULL || v[0] == '\0') {
        v = r->conf.max_attempts;
        from = "max_attempts";
    }
    if (v != NULL && v[0] != '\0') {
        if (v[strspn(v, "0123456789")] != '\0' || s3d_config_parse_size(v, &x) < 0 || x == 0 ||
            x > S3D_MAX_ATTEMPTS_LIMIT)
            return s3d_fail(S3D_ECONFIG, "%s \"%.40s\" is not a whole number from 1 to %u%s%s%s",
                            from, v, S3D_MAX_ATTEMPTS_LIMIT,
                            v == r->conf.max_attempts ? " (profile \"" : "",
                            v == r->conf.max_attempts ? r->profile : "",
                            v == r->conf.max_attempts ? "\")" : "");
        r->out->max_attempts = (uint32_t)x;
    }
    v = s3d_env("AWS_RETRY_MODE");
    from = "AWS_RETRY_MODE";
    if (v == NULL || v[0] == '\0') {
        v = r->conf.retry_mode;
        from = "retry_mode";
    }
    if (v != NULL && v[0] != '\0') {
        if (strcmp(v, "legacy") == 0)
            r->out->retry_mode = "legacy";
        else if (strcmp(v, "standard") == 0)
            r->out->retry_mode = "standard";
        else if (strcmp(v, "adaptive") == 0)
            r->out->retry_mode = "adaptive";
        else
            return s3d_fail(S3D_ECONFIG,
                            "%s \"%.40s\" is not a retry mode: legacy, standard or adaptive", from,
                            v);
        if (r->out->max_attempts == 0 && strcmp(v, "legacy") != 0)
            r->out->max_attempts = 3;
    }
    return 0;
}

static void resolve_cleanup(struct resolve *r)
{
    prof_free(&r->cred);
    prof_free(&r->conf);
    prof_free(&r->svc);
    free(r->cred_path);
    free(r->conf_path);
    if (r->cred_text != NULL)
        memset(r->cred_text, 0, r->cred_len);
    free(r->cred_text);
    if (r->conf_text != NULL)
        memset(r->conf_text, 0, r->conf_len);
    free(r->conf_text);
    free(r->default_ep);
}

int s3d_config_resolve(const struct s3d_client_options *opts, struct s3d_config *out)
{
    static const struct s3d_client_options zero_opts;
    static int (*const steps[])(struct resolve *) = {
        check_options,           resolve_profile,  load_shared_files,  resolve_credentials,
        resolve_region,          resolve_tls,      resolve_addressing, resolve_endpoint,
        resolve_payload_signing, resolve_transfer, resolve_retries};
    struct resolve r;
    size_t i;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    memset(&r, 0, sizeof(r));
    /* Only fields inside struct_size exist in an older caller's struct: the fields read here
     * are all in the first version, so struct_size needs no check yet. */
    r.opts = opts != NULL ? opts : &zero_opts;
    r.out = out;
    for (i = 0; rc == 0 && i < S3D_ARRAY_LEN(steps); i++)
        rc = steps[i](&r);
    if (rc < 0)
        s3d_config_free(out);
    resolve_cleanup(&r);
    return rc;
}
