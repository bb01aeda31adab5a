/* creds.c - the credential chain and the refreshing cache (see creds.h).
 *
 * The chain turns the configuration into a "source": a provider plus what it needs (a role
 * ARN, a command, a source for AssumeRole...). Fetching from the source gives a snapshot; the
 * cache keeps the current snapshot and the source, so refreshes ask the same provider.
 *
 * Locking: lock guards every field of struct s3d_credcache below it. A thread that finds the
 * credentials due sets refreshing, drops the lock, fetches, and retakes it to publish; the
 * others wait on cond while the credentials are expired (or missing), and go on with the
 * current ones while they are only due. The fetch runs unlocked so a slow STS call holds no
 * signer that still has valid credentials. */
#include "s3/creds.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "s3/creds_int.h"

enum src_kind {
    SRC_STATIC,
    SRC_PROCESS,
    SRC_WEB_IDENTITY,
    SRC_ASSUME_ROLE,
    SRC_SSO,
    SRC_CONTAINER,
    SRC_IMDS
};

struct credsrc {
    enum src_kind kind;
    const char *name;        /* botocore's method name */
    struct s3d_creds *fixed; /* SRC_STATIC */
    char *profile;           /* for messages */
    char *command;           /* SRC_PROCESS */
    char *role_arn, *session_name, *external_id, *token_file, *regional; /* STS */
    int duration_s;
    char *sso_key, *sso_region, *sso_account, *sso_role; /* SRC_SSO */
    struct credsrc *source; /* SRC_ASSUME_ROLE: where its credentials come from */
};

struct s3d_credcache {
    const struct s3d_config *cfg;
    const struct s3d_http_conf *http;
    char *opts_profile;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* Guarded by lock. */
    int resolved;          /* the chain ran */
    int refreshing;        /* a thread is fetching */
    int force;             /* the server said the current ones expired */
    struct credsrc *src;   /* NULL when the chain found nothing */
    struct s3d_creds *cur; /* NULL before the first fetch */
    int64_t obtained;      /* when cur was fetched */
    char first_key[128];   /* for s3d_credcache_describe */
    const char *first_provider;
};

int s3d_creds_refresh_due(int64_t now, int64_t obtained, int64_t expiration)
{
    int64_t margin = S3D_CREDS_REFRESH_MARGIN_S, life;
    if (expiration == 0)
        return 0;
    life = expiration - obtained;
    if (life / 2 < margin)
        margin = life > 0 ? life / 2 : 0;
    return now >= expiration - margin;
}

/* ---- sources ------------------------------------------------------------------------------ */

static void src_free(struct credsrc *s)
{
    if (s == NULL)
        return;
    s3d_creds_release(s->fixed);
    free(s->profile);
    free(s->command);
    free(s->role_arn);
    free(s->session_name);
    free(s->external_id);
    free(s->token_file);
    free(s->regional);
    free(s->sso_key);
    free(s->sso_region);
    free(s->sso_account);
    free(s->sso_role);
    src_free(s->source);
    free(s);
}

static int dup_opt(char **dst, const char *v)
{
    *dst = NULL;
    if (v == NULL)
        return 0;
    if ((*dst = strdup(v)) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory resolving credentials");
    return 0;
}

static int src_new(enum src_kind kind, const char *name, const char *profile, struct credsrc **out)
{
    struct credsrc *s = s3d_calloc(1, sizeof(*s));
    *out = NULL;
    if (s == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory resolving credentials");
    s->kind = kind;
    s->name = name;
    if (dup_opt(&s->profile, profile) < 0) {
        free(s);
        return S3D_ENOMEM;
    }
    *out = s;
    return 0;
}

static int src_static(const char *name, const char *profile, const char *id, const char *secret,
                      const char *token, struct credsrc **out)
{
    int rc = src_new(SRC_STATIC, name, profile, out);
    if (rc == 0 && (rc = s3d_creds_make(id, secret, token, 0, name, &(*out)->fixed)) < 0) {
        src_free(*out);
        *out = NULL;
    }
    return rc;
}

static int fetch(const struct s3d_credcache *c, const struct credsrc *s, struct s3d_creds **out);

static int fetch_sts(const struct s3d_credcache *c, const struct credsrc *s, struct s3d_creds **out)
{
    struct s3d_sts_args a;
    struct s3d_creds *src = NULL;
    int rc;
    memset(&a, 0, sizeof(a));
    a.region = c->cfg->region;
    a.regional = s->regional;
    a.role_arn = s->role_arn;
    a.session_name = s->session_name;
    a.external_id = s->external_id;
    a.duration_s = s->duration_s;
    a.profile = s->profile;
    if (s->kind == SRC_WEB_IDENTITY)
        return s3d_creds_web_identity(c->http, &a, s->token_file, out);
    if ((rc = fetch(c, s->source, &src)) < 0)
        return s3d_fail_prefix(rc, "assume-role (profile \"%s\"): source credentials",
                               s->profile ? s->profile : "");
    rc = s3d_creds_assume_role(c->http, &a, src, out);
    s3d_creds_release(src);
    return rc;
}

static int fetch(const struct s3d_credcache *c, const struct credsrc *s, struct s3d_creds **out)
{
    struct s3d_sso_args sa;
    int rc;
    *out = NULL;
    switch (s->kind) {
    case SRC_STATIC:
        atomic_fetch_add(&s->fixed->refs, 1);
        *out = s->fixed;
        return 0;
    case SRC_PROCESS:
        return s3d_creds_process(s->command, s->profile, out);
    case SRC_WEB_IDENTITY:
    case SRC_ASSUME_ROLE:
        return fetch_sts(c, s, out);
    case SRC_SSO:
        memset(&sa, 0, sizeof(sa));
        sa.cache_key = s->sso_key;
        sa.sso_region = s->sso_region;
        sa.account_id = s->sso_account;
        sa.role_name = s->sso_role;
        sa.profile = s->profile;
        return s3d_creds_sso(c->http, &sa, out);
    case SRC_CONTAINER:
        return s3d_creds_container(c->http, out);
    case SRC_IMDS:
        rc = s3d_creds_imds(c->http, out);
        if (rc == S3D_ENOCREDS) /* configured (credential_source) or found before: a failure */
            rc = s3d_fail_prefix(S3D_ECREDS, "iam-role: no credentials from instance metadata");
        return rc;
    }
    return s3d_fail(S3D_EINVAL, "unknown credential source");
}

/* ---- the chain ---------------------------------------------------------------------------- */

#define MAX_ROLE_CHAIN 8
/* duration_seconds of an assumed role: STS accepts 15 minutes to 12 hours. */
#define ROLE_DURATION_MIN 900
#define ROLE_DURATION_MAX 43200

static int resolve_profile(const char *name, int depth, int top, const char *region_unused,
                           struct credsrc **out);

/* credential_source = Environment | Ec2InstanceMetadata | EcsContainer. */
static int named_source(const char *profile, const char *name, struct credsrc **out)
{
    *out = NULL;
    if (strcmp(name, "Environment") == 0) {
        if (s3d_env("AWS_ACCESS_KEY_ID") == NULL || s3d_env("AWS_SECRET_ACCESS_KEY") == NULL)
            return s3d_fail(S3D_ECREDS,
                            "profile \"%s\": credential_source Environment, but "
                            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set",
                            profile);
        return src_static("env", profile, s3d_env("AWS_ACCESS_KEY_ID"),
                          s3d_env("AWS_SECRET_ACCESS_KEY"), s3d_env("AWS_SESSION_TOKEN"), out);
    }
    if (strcmp(name, "Ec2InstanceMetadata") == 0)
        return src_new(SRC_IMDS, "iam-role", profile, out);
    if (strcmp(name, "EcsContainer") == 0)
        return src_new(SRC_CONTAINER, "container-role", profile, out);
    return s3d_fail(S3D_ECONFIG,
                    "profile \"%s\": credential_source \"%.64s\" is not Environment, "
                    "Ec2InstanceMetadata or EcsContainer",
                    profile, name);
}

static int assume_role_src(const char *name, const struct s3d_profile *p, int depth,
                           struct credsrc **out)
{
    const char *sp = s3d_profile_get(p, "source_profile");
    const char *cs = s3d_profile_get(p, "credential_source");
    const char *dur = s3d_profile_get(p, "duration_seconds");
    struct credsrc *s = NULL;
    int rc;
    *out = NULL;
    if (s3d_profile_get(p, "mfa_serial") != NULL)
        return s3d_fail(S3D_ECONFIG,
                        "profile \"%s\": role_arn with mfa_serial needs an MFA code, which "
                        "s3direct cannot prompt for; run `aws sts assume-role` (or `aws "
                        "configure export-credentials --profile %s`) and pass the temporary "
                        "credentials instead",
                        name, name);
    if ((sp != NULL) == (cs != NULL))
        return s3d_fail(S3D_ECONFIG,
                        "profile \"%s\": role_arn needs exactly one of source_profile and "
                        "credential_source",
                        name);
    if (depth >= MAX_ROLE_CHAIN)
        return s3d_fail(S3D_ECONFIG, "profile \"%s\": source_profile chain longer than %d", name,
                        MAX_ROLE_CHAIN);
    if ((rc = src_new(SRC_ASSUME_ROLE, "assume-role", name, &s)) < 0)
        return rc;
    if ((rc = dup_opt(&s->role_arn, s3d_profile_get(p, "role_arn"))) < 0 ||
        (rc = dup_opt(&s->session_name, s3d_profile_get(p, "role_session_name"))) < 0 ||
        (rc = dup_opt(&s->external_id, s3d_profile_get(p, "external_id"))) < 0 ||
        (rc = dup_opt(&s->regional, s3d_profile_get(p, "sts_regional_endpoints"))) < 0)
        goto fail;
    if (dur != NULL) {
        char *end;
        long d = strtol(dur, &end, 10);
        if (*end != '\0' || d < ROLE_DURATION_MIN || d > ROLE_DURATION_MAX) {
            rc = s3d_fail(S3D_ECONFIG,
                          "profile \"%s\": duration_seconds \"%.32s\" is not a number of "
                          "seconds from %d to %d",
                          name, dur, ROLE_DURATION_MIN, ROLE_DURATION_MAX);
            goto fail;
        }
        s->duration_s = (int)d;
    }
    if (cs != NULL) {
        rc = named_source(name, cs, &s->source);
    } else if (strcmp(sp, name) == 0) {
        /* A profile may name itself to take its own static keys (botocore allows it). */
        const char *id = s3d_profile_get(p, "aws_access_key_id");
        const char *secret = s3d_profile_get(p, "aws_secret_access_key");
        if (id == NULL || secret == NULL)
            rc = s3d_fail(S3D_ECONFIG,
                          "profile \"%s\" is its own source_profile but has no static keys", name);
        else
            rc = src_static("shared-credentials-file", name, id, secret,
                            s3d_profile_get(p, "aws_session_token"), &s->source);
    } else {
        rc = resolve_profile(sp, depth + 1, 0, NULL, &s->source);
        if (rc == 0 && s->source == NULL)
            rc = s3d_fail(S3D_ECONFIG,
                          "the source profile \"%s\" (of \"%s\") must have credentials", sp, name);
    }
    if (rc < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    src_free(s);
    return rc;
}

static int web_identity_src(const char *profile, const char *role_arn, const char *token_file,
                            const char *session, const char *regional, struct credsrc **out)
{
    struct credsrc *s = NULL;
    int rc = src_new(SRC_WEB_IDENTITY, "assume-role-with-web-identity", profile, &s);
    if (rc == 0 && ((rc = dup_opt(&s->role_arn, role_arn)) < 0 ||
                    (rc = dup_opt(&s->token_file, token_file)) < 0 ||
                    (rc = dup_opt(&s->session_name, session)) < 0 ||
                    (rc = dup_opt(&s->regional, regional)) < 0)) {
        src_free(s);
        s = NULL;
    }
    *out = s;
    return rc;
}

static int sso_src(const char *name, const struct s3d_profile *p, struct credsrc **out)
{
    const char *session = s3d_profile_get(p, "sso_session");
    const char *start = s3d_profile_get(p, "sso_start_url");
    const char *region = s3d_profile_get(p, "sso_region");
    const char *account = s3d_profile_get(p, "sso_account_id");
    const char *role = s3d_profile_get(p, "sso_role_name");
    struct s3d_profile sp = {0};
    struct credsrc *s = NULL;
    int rc;
    *out = NULL;
    if (session != NULL) {
        if ((rc = s3d_profile_load("sso-session", session, &sp)) < 0)
            return rc;
        if (!sp.found) {
            rc = s3d_fail(S3D_ECONFIG,
                          "profile \"%s\": sso_session \"%s\" has no [sso-session %s] section",
                          name, session, session);
            goto out;
        }
        if (s3d_profile_get(&sp, "sso_region") != NULL)
            region = s3d_profile_get(&sp, "sso_region");
        if (s3d_profile_get(&sp, "sso_start_url") != NULL)
            start = s3d_profile_get(&sp, "sso_start_url");
    }
    if (start == NULL || region == NULL || account == NULL || role == NULL) {
        rc = s3d_fail(S3D_ECONFIG,
                      "profile \"%s\": SSO needs sso_start_url, sso_region, sso_account_id and "
                      "sso_role_name (in the profile or its sso-session)",
                      name);
        goto out;
    }
    if ((rc = src_new(SRC_SSO, "sso", name, &s)) < 0)
        goto out;
    if ((rc = dup_opt(&s->sso_key, session != NULL ? session : start)) < 0 ||
        (rc = dup_opt(&s->sso_region, region)) < 0 ||
        (rc = dup_opt(&s->sso_account, account)) < 0 || (rc = dup_opt(&s->sso_role, role)) < 0) {
        src_free(s);
        goto out;
    }
    *out = s;
out:
    s3d_profile_free(&sp);
    return rc;
}

/* The profile part of the chain (botocore's ProfileProviderBuilder plus assume-role): for the
 * top profile the static keys come from the resolved configuration (which knows which file
 * they came from); for a source profile from the merged section. */
static int resolve_profile(const char *name, int depth, int top, const char *unused,
                           struct credsrc **out)
{
    struct s3d_profile p;
    const char *role, *wif, *process, *id, *secret;
    int rc;
    (void)unused;
    *out = NULL;
    if ((rc = s3d_profile_load("profile", name, &p)) < 0)
        return rc;
    if (!top && !p.found) {
        rc = s3d_fail(S3D_ECONFIG, "source_profile \"%s\" does not exist", name);
        goto out;
    }
    role = s3d_profile_get(&p, "role_arn");
    wif = s3d_profile_get(&p, "web_identity_token_file");
    id = s3d_profile_get(&p, "aws_access_key_id");
    secret = s3d_profile_get(&p, "aws_secret_access_key");
    if (role != NULL && wif == NULL && (top || id == NULL)) {
        rc = assume_role_src(name, &p, depth, out);
        goto out;
    }
    if (top && s3d_env("AWS_WEB_IDENTITY_TOKEN_FILE") != NULL && s3d_env("AWS_ROLE_ARN") != NULL) {
        rc = web_identity_src(name, s3d_env("AWS_ROLE_ARN"), s3d_env("AWS_WEB_IDENTITY_TOKEN_FILE"),
                              s3d_env("AWS_ROLE_SESSION_NAME"),
                              s3d_profile_get(&p, "sts_regional_endpoints"), out);
        goto out;
    }
    if (role != NULL && wif != NULL) {
        rc = web_identity_src(name, role, wif, s3d_profile_get(&p, "role_session_name"),
                              s3d_profile_get(&p, "sts_regional_endpoints"), out);
        goto out;
    }
    if (s3d_profile_get(&p, "sso_session") != NULL ||
        s3d_profile_get(&p, "sso_start_url") != NULL ||
        s3d_profile_get(&p, "sso_account_id") != NULL) {
        rc = sso_src(name, &p, out);
        goto out;
    }
    process = s3d_profile_get(&p, "credential_process");
    if (!top) {
        if (id != NULL && secret != NULL)
            rc = src_static("shared-credentials-file", name, id, secret,
                            s3d_profile_get(&p, "aws_session_token"), out);
        else if (process != NULL && (rc = src_new(SRC_PROCESS, "custom-process", name, out)) == 0) {
            S3D_ASSERT(*out != NULL); /* src_new returns 0 only with *out set */
            if ((rc = dup_opt(&(*out)->command, process)) < 0) {
                src_free(*out);
                *out = NULL;
            }
        }
        goto out;
    }
    /* Top profile: static keys, the process, config-file keys are decided by the caller. */
    if (process != NULL && (rc = src_new(SRC_PROCESS, "custom-process", name, out)) == 0 &&
        (rc = dup_opt(&(*out)->command, process)) < 0) {
        src_free(*out);
        *out = NULL;
    }
out:
    s3d_profile_free(&p);
    return rc;
}

/* Runs the whole chain: *out NULL when nothing has credentials. */
static int resolve_chain(const struct s3d_credcache *c, struct credsrc **out)
{
    const struct s3d_config *cfg = c->cfg;
    const char *cs = cfg->credential_source ? cfg->credential_source : "none";
    struct credsrc *prof = NULL;
    int rc;
    *out = NULL;
    if (strcmp(cs, "options") == 0 || strcmp(cs, "env") == 0)
        return src_static(cs, cfg->profile, cfg->access_key_id, cfg->secret_access_key,
                          cfg->session_token, out);
    if ((rc = resolve_profile(cfg->profile ? cfg->profile : "default", 0, 1, NULL, &prof)) < 0)
        return rc;
    /* assume-role, web identity and SSO come before the credentials file's keys; the process
     * after them; the config file's keys after the process. */
    if (prof != NULL && prof->kind != SRC_PROCESS) {
        *out = prof;
        return 0;
    }
    if (strcmp(cs, "shared-credentials-file") == 0 ||
        (prof == NULL && strcmp(cs, "config-file") == 0)) {
        src_free(prof);
        return src_static(cs, cfg->profile, cfg->access_key_id, cfg->secret_access_key,
                          cfg->session_token, out);
    }
    if (prof != NULL) {
        *out = prof;
        return 0;
    }
    if (s3d_creds_container_configured())
        return src_new(SRC_CONTAINER, "container-role", cfg->profile, out);
    return src_new(SRC_IMDS, "iam-role", cfg->profile, out);
}

/* ---- the cache ---------------------------------------------------------------------------- */

int s3d_credcache_new(const struct s3d_config *cfg, const struct s3d_http_conf *http,
                      const char *opts_profile, struct s3d_credcache **out)
{
    struct s3d_credcache *c = s3d_calloc(1, sizeof(*c));
    *out = NULL;
    if (c == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory creating the credential cache");
    c->cfg = cfg;
    c->http = http;
    if (dup_opt(&c->opts_profile, opts_profile && opts_profile[0] ? opts_profile : NULL) < 0) {
        free(c);
        return S3D_ENOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->first_provider = "";
    *out = c;
    return 0;
}

void s3d_credcache_free(struct s3d_credcache *c)
{
    if (c == NULL)
        return;
    s3d_creds_release(c->cur);
    src_free(c->src);
    free(c->opts_profile);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

static int usable(const struct s3d_creds *cr, int64_t now)
{
    return cr != NULL && (cr->expiration == 0 || now < cr->expiration);
}

/* With lock held and refreshing set by this thread: runs the chain if needed and fetches,
 * unlocked. Publishes on success. */
static int refresh_locked(struct s3d_credcache *c)
{
    struct credsrc *src = c->src;
    struct s3d_creds *fresh = NULL;
    int rc = 0, first = !c->resolved, chain_failed = 0;
    pthread_mutex_unlock(&c->lock);
    if (first) {
        rc = resolve_chain(c, &src);
        chain_failed = rc < 0; /* a configuration error: reported again at the next get */
        if (rc == 0 && src == NULL)
            rc = s3d_fail(S3D_ENOCREDS, "no credentials found");
    }
    if (rc == 0) {
        /* IMDS found unreachable at the first try means "nothing found", not a failure. */
        if (first && src->kind == SRC_IMDS)
            rc = s3d_creds_imds(c->http, &fresh);
        else
            rc = fetch(c, src, &fresh);
        S3D_ASSERT(rc != 0 || fresh != NULL); /* every provider returns 0 only with *out set */
        if (rc == 0 && fresh->expiration != 0 && fresh->expiration <= (int64_t)time(NULL)) {
            /* Already expired when handed over (a credential_process printing a stale
             * Expiration): refused, as botocore refuses credentials still expired after a
             * refresh; signing with them would only earn ExpiredToken answers. */
            char when[32];
            time_t t = (time_t)fresh->expiration;
            struct tm tm;
            if (gmtime_r(&t, &tm) == NULL ||
                strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                snprintf(when, sizeof(when), "%lld", (long long)fresh->expiration);
            rc = s3d_fail(S3D_ECREDS,
                          "credentials from %s (key %s) expired at %s, %lld s ago: refused (the "
                          "AWS CLI refuses them too); the provider must hand out current ones",
                          src->name, fresh->access_key_id, when,
                          (long long)((int64_t)time(NULL) - fresh->expiration));
            s3d_creds_release(fresh);
            fresh = NULL;
        }
        if (first && rc == S3D_ENOCREDS && src->kind == SRC_IMDS) {
            s3d_fail(S3D_ENOCREDS,
                     "no credentials found: not in options, AWS_ACCESS_KEY_ID/"
                     "AWS_SECRET_ACCESS_KEY, the profile \"%s\" (keys, role_arn, "
                     "web_identity_token_file, sso, credential_process), "
                     "AWS_WEB_IDENTITY_TOKEN_FILE, container or instance metadata",
                     c->cfg->profile ? c->cfg->profile : "default");
        }
    }
    pthread_mutex_lock(&c->lock);
    if (first && !chain_failed) {
        c->resolved = 1;
        if (rc == 0 || (src != NULL && src->kind != SRC_IMDS))
            c->src = src; /* a failing configured provider is asked again next time */
        else
            src_free(src);
    }
    if (rc == 0) {
        S3D_ASSERT(fresh != NULL); /* every provider returns 0 only with *out set */
        s3d_creds_release(c->cur);
        c->cur = fresh;
        c->obtained = (int64_t)time(NULL);
        c->force = 0;
        if (c->first_provider[0] == '\0') {
            snprintf(c->first_key, sizeof(c->first_key), "%s", fresh->access_key_id);
            c->first_provider = fresh->provider;
        }
        S3D_INFO("credentials: %s supplied key %s (profile \"%s\")%s", c->src->name,
                 fresh->access_key_id, c->cfg->profile ? c->cfg->profile : "default",
                 fresh->expiration ? ", temporary" : "");
        if (fresh->expiration)
            S3D_DEBUG("credentials: expire in %lld s",
                      (long long)(fresh->expiration - c->obtained));
    }
    c->refreshing = 0;
    pthread_cond_broadcast(&c->cond);
    return rc;
}

int s3d_credcache_get(struct s3d_credcache *c, struct s3d_creds **out)
{
    int rc = 0;
    *out = NULL;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        int64_t now = (int64_t)time(NULL);
        int have = usable(c->cur, now);
        int due = !c->resolved || c->cur == NULL || c->force ||
                  s3d_creds_refresh_due(now, c->obtained, c->cur->expiration);
        if (c->resolved && c->src == NULL) {
            rc = s3d_fail(S3D_ENOCREDS,
                          "no credentials found: not in options, AWS_ACCESS_KEY_ID/"
                          "AWS_SECRET_ACCESS_KEY, the profile \"%s\" (keys, role_arn, "
                          "web_identity_token_file, sso, credential_process), "
                          "AWS_WEB_IDENTITY_TOKEN_FILE, container or instance metadata",
                          c->cfg->profile ? c->cfg->profile : "default");
            break;
        }
        if (!due)
            break;
        if (c->refreshing) {
            if (have && !c->force)
                break; /* only due: the refresher will publish; keep signing meanwhile */
            pthread_cond_wait(&c->cond, &c->lock);
            if (!c->refreshing && usable(c->cur, (int64_t)time(NULL)) && !c->force)
                break; /* published (even if already due again: use them) */
            continue;  /* still refreshing, or the refresher failed: look again */
        }
        c->refreshing = 1;
        rc = refresh_locked(c);
        /* Fresh credentials are used even if they are already due (a provider handing out
         * short-lived ones must not make this loop fetch forever). */
        if (rc < 0 && have && !c->force) {
            S3D_WARN("credentials: refresh from %s failed (%s); the current ones are valid "
                     "for %lld s more",
                     c->src ? c->src->name : "?", s3d_last_error_message(),
                     (long long)(c->cur->expiration - now));
            rc = 0;
        }
        break;
    }
    if (rc == 0 && c->cur != NULL) {
        atomic_fetch_add(&c->cur->refs, 1);
        *out = c->cur;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int s3d_credcache_expired(struct s3d_credcache *c, const struct s3d_creds *seen)
{
    int refreshable;
    pthread_mutex_lock(&c->lock);
    refreshable = c->src != NULL && c->src->kind != SRC_STATIC;
    if (refreshable && c->cur == seen)
        c->force = 1;
    pthread_mutex_unlock(&c->lock);
    return refreshable;
}

void s3d_credcache_describe(struct s3d_credcache *c, const char **provider,
                            const char **access_key_id)
{
    struct s3d_creds *cr = NULL;
    int resolved;
    pthread_mutex_lock(&c->lock);
    resolved = c->first_provider[0] != '\0';
    pthread_mutex_unlock(&c->lock);
    if (!resolved && s3d_credcache_get(c, &cr) < 0)
        s3d_clear_error();
    s3d_creds_release(cr);
    pthread_mutex_lock(&c->lock);
    *provider = c->first_provider;
    *access_key_id = c->first_key;
    pthread_mutex_unlock(&c->lock);
}
