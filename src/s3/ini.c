/* ini.c - the AWS shared files (credentials and config): where they are, reading one with a
 * cap, and their INI syntax as the AWS CLI (Python configparser) reads it. */
#include "s3/ini.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/env.h"
#include "common/error.h"
#include "common/fdio.h"

/* ---- INI ------------------------------------------------------------------------------ */

/* Trims blanks at both ends of s[0..*len) in place; returns the new start. */
static char *trim(char *s, size_t *len)
{
    while (*len > 0 && s3d_ini_is_blank(*s)) {
        s++;
        (*len)--;
    }
    while (*len > 0 && (s3d_ini_is_blank(s[*len - 1]) || s[*len - 1] == '\r'))
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
        indented = llen > 0 && s3d_ini_is_blank(line[0]);
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
int s3d_ini_read_file(const char *path, char **out, size_t *out_len)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    uint64_t n;
    int fd, rc = 0, e;
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
    /* Read to EOF with the cap, not trusting st_size (the file may grow meanwhile): a byte past
     * the cap means too large. */
    if ((e = s3d_read_full(fd, buf, S3D_CONFIG_MAX_FILE + 1, &n)) < 0) {
        rc = s3d_fail(S3D_ECONFIG, "cannot read %s: %s", path, strerror(-e));
        goto out;
    }
    got = (size_t)n;
    if (got > S3D_CONFIG_MAX_FILE) {
        rc = s3d_fail(S3D_ECONFIG, "%s is over the limit of %d bytes", path, S3D_CONFIG_MAX_FILE);
        goto out;
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

/* Path of a shared file: the environment variable (with "~/" expanded) or ~/.aws/NAME.
 * Returns 0 with *out NULL when there is no HOME to look in. */
int s3d_ini_file_path(const char *envname, const char *basename, char **out)
{
    const char *p = s3d_env(envname), *home = s3d_env("HOME");
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
