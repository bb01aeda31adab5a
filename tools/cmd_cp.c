/* cmd_cp.c - s3direct cp: local <-> S3, S3 -> S3, "-" for standard input/output, and
 * --recursive for folders and prefixes. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct cp SOURCE DEST [OPTIONS]\n\n"
    "Copies one object or file; with --recursive every object under a prefix or every file\n"
    "under a folder. At least one of SOURCE and DEST is an s3:// URI.\n"
    "  local -> s3://   parallel multipart upload (a single PUT below the part size)\n"
    "  s3:// -> local   parallel ranged GETs, written under a temporary name, then renamed\n"
    "  s3:// -> s3://   streamed through this machine (download and upload at once)\n"
    "  -                standard input (upload, streamed) or standard output (download)\n"
    "A DEST key ending in '/' (or an existing local folder) receives the source's base name.\n\n"
    "Options:\n"
    "  -r, --recursive       copy everything under the folder or prefix (a prefix is taken as\n"
    "                        a folder: s3://b/data means s3://b/data/...); symbolic links to\n"
    "                        files are followed, links to folders are not\n"
    "  --content-type TYPE   Content-Type of uploaded objects (default\n"
    "                        application/octet-stream)\n"
    "  --dryrun              print what would be copied, copy nothing\n\n"
    "Examples:\n"
    "  s3direct cp ./model.safetensors s3://bucket/models/\n"
    "  s3direct cp s3://bucket/models/model.safetensors /dev/shm/model.safetensors\n"
    "  tar c data | s3direct cp - s3://bucket/data.tar\n"
    "  s3direct cp s3://bucket/data.tar - | tar x\n"
    "  s3direct cp ./ckpt s3://bucket/ckpt --recursive --concurrency 16 --part-size 32M\n"
    "  s3direct cp s3://bucket/a.bin s3://other-bucket/a.bin\n";

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int ends_with_slash(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && s[n - 1] == '/';
}

/* "dir" + "/" + "name" into out (PATH_MAX); -1 when too long (error printed). */
static int join(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s%s%s", dir, (dir[0] && !ends_with_slash(dir)) ? "/" : "", name);
    if (n < 0 || (size_t)n >= cap) {
        cli_error("path too long: %s/%s", dir, name);
        return -1;
    }
    return 0;
}

/* Writing to a character device or a FIFO (/dev/null, a named pipe): the library writes files
 * under a temporary name and renames them, which must never happen to /dev/null. Such a target
 * becomes standard output instead. Returns the path to give the library. */
static const char *redirect_special(const char *path, int *err)
{
    struct stat st;
    int fd;

    *err = 0;
    if (strcmp(path, "-") == 0 || stat(path, &st) != 0 ||
        !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
        return path;
    fflush(stdout);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) {
        *err = cli_error("cannot open %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    close(fd);
    return "-";
}

struct cp_ctx {
    const struct cli_opts *o;
    struct s3d_client *c;
};

static void say(const struct cli_opts *o, const char *what, const char *src, const char *dst)
{
    if (o->quiet)
        return;
    /* With "-" as DEST the data owns stdout: the report goes to stderr. */
    FILE *f = strcmp(dst, "-") == 0 ? stderr : stdout;

    fprintf(f, "%s%s: ", o->dryrun ? "(dryrun) " : "", what);
    cli_put_key(f, src);
    fputs(" to ", f);
    cli_put_key(f, dst);
    fputc('\n', f);
}

static int upload(struct cp_ctx *x, const char *path, const char *bucket, const char *key)
{
    struct s3d_transfer_options t;
    struct cli_progress p;
    char uri[CLI_BUCKET_CAP + CLI_KEY_CAP + 8];
    int rc;

    snprintf(uri, sizeof(uri), "s3://%s/%s", bucket, key);
    if (x->o->dryrun) {
        say(x->o, "upload", path, uri);
        return 0;
    }
    cli_progress_init(&p, x->o, base_name(key));
    cli_transfer_opts(x->o, &p, &t);
    rc = s3d_upload_from_file(x->c, bucket, key, path, &t);
    cli_progress_finish(&p, rc == 0);
    if (rc < 0)
        return cli_fail(rc);
    say(x->o, "upload", path, uri);
    return 0;
}

static int download(struct cp_ctx *x, const char *bucket, const char *key, const char *path)
{
    struct s3d_transfer_options t;
    struct cli_progress p;
    char uri[CLI_BUCKET_CAP + CLI_KEY_CAP + 8];
    const char *target;
    int rc, err;

    snprintf(uri, sizeof(uri), "s3://%s/%s", bucket, key);
    if (x->o->dryrun) {
        say(x->o, "download", uri, path);
        return 0;
    }
    target = redirect_special(path, &err);
    if (target == NULL)
        return err;
    cli_progress_init(&p, x->o, base_name(key));
    cli_transfer_opts(x->o, &p, &t);
    rc = s3d_download_to_file(x->c, bucket, key, target, &t);
    cli_progress_finish(&p, rc == 0);
    if (rc < 0)
        return cli_fail(rc);
    if (strcmp(target, "-") == 0 && fflush(stdout) != 0)
        return cli_error("writing %s: %s", path, strerror(errno));
    if (strcmp(target, "-") != 0)
        say(x->o, "download", uri, path);
    return 0;
}

static int copy(struct cp_ctx *x, const char *sb, const char *sk, const char *db, const char *dk)
{
    struct s3d_transfer_options t;
    struct cli_progress p;
    char src[CLI_BUCKET_CAP + CLI_KEY_CAP + 8], dst[CLI_BUCKET_CAP + CLI_KEY_CAP + 8];
    int rc;

    snprintf(src, sizeof(src), "s3://%s/%s", sb, sk);
    snprintf(dst, sizeof(dst), "s3://%s/%s", db, dk);
    if (x->o->dryrun) {
        say(x->o, "copy", src, dst);
        return 0;
    }
    cli_progress_init(&p, x->o, base_name(sk));
    cli_transfer_opts(x->o, &p, &t);
    rc = s3d_copy_object(x->c, sb, sk, db, dk, &t);
    cli_progress_finish(&p, rc == 0);
    if (rc < 0)
        return cli_fail(rc);
    say(x->o, "copy", src, dst);
    return 0;
}

/* mkdir -p of the folder that will hold path. */
static int make_parents(const char *path)
{
    char buf[PATH_MAX];
    char *s;

    snprintf(buf, sizeof(buf), "%s", path);
    for (s = buf + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return cli_error("cannot create folder %s: %s", buf, strerror(errno));
        *s = '/';
    }
    return 0;
}

/* A key under the listed prefix, made relative, must stay inside the destination folder. */
static int safe_relative(const char *rel)
{
    const char *s = rel;

    if (rel[0] == '\0' || rel[0] == '/')
        return 0;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if ((n == 2 && s[0] == '.' && s[1] == '.') || (n == 1 && s[0] == '.') || n == 0)
            return 0;
        s += n + (e ? 1 : 0);
    }
    return 1;
}

/* ---- recursive ------------------------------------------------------------------------ */

/* nftw has no user pointer: the walk's state lives here for its duration. */
static struct {
    struct cp_ctx *x;
    const char *root;
    size_t root_len;
    const char *bucket;
    const char *prefix;
    int failed;
    size_t files;
} walk;

static int walk_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    char key[CLI_KEY_CAP];
    const char *rel;
    int n;

    struct stat target;

    (void)st;
    (void)ftw;
    /* Links to files are followed; links to folders are not (no cycles to detect). Folders,
     * dangling links and unreadable entries are skipped. */
    if (type == FTW_SL && !(stat(path, &target) == 0 && S_ISREG(target.st_mode)))
        return 0;
    if (type != FTW_F && type != FTW_SL)
        return 0;
    rel = path + walk.root_len;
    while (*rel == '/')
        rel++;
    n = snprintf(key, sizeof(key), "%s%s", walk.prefix, rel);
    if (n < 0 || (size_t)n >= sizeof(key)) {
        walk.failed = cli_error("key too long for %s", path);
        return 1;
    }
    walk.files++;
    if (upload(walk.x, path, walk.bucket, key) != 0) {
        walk.failed = 1;
        return 1;
    }
    return cli_interrupted();
}

/* prefix with a trailing '/' (unless empty) into out. */
static int folder_prefix(const char *key, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s%s", key, (key[0] && !ends_with_slash(key)) ? "/" : "");
    if (n < 0 || (size_t)n >= cap)
        return cli_error("key too long: %s", key);
    return 0;
}

static int cp_recursive(struct cp_ctx *x, const char *src, const char *dst)
{
    char sb[CLI_BUCKET_CAP], sk[CLI_KEY_CAP], db[CLI_BUCKET_CAP], dk[CLI_KEY_CAP];
    char sprefix[CLI_KEY_CAP], dprefix[CLI_KEY_CAP], path[PATH_MAX], key[CLI_KEY_CAP];
    struct cli_keys keys;
    struct stat st;
    size_t i;
    int rc = 0;

    if (!cli_is_s3(src)) {
        if (strcmp(src, "-") == 0)
            return cli_usage_error("cp", "--recursive cannot read standard input");
        if (stat(src, &st) != 0)
            return cli_error("cannot read %s: %s", src, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return cli_error("%s is not a folder (--recursive copies folders)", src);
        if (cli_split_uri(dst, db, dk) < 0 || folder_prefix(dk, dprefix, sizeof(dprefix)))
            return CLI_EXIT_FAIL;
        walk.x = x;
        walk.root = src;
        walk.root_len = strlen(src);
        walk.bucket = db;
        walk.prefix = dprefix;
        walk.failed = 0;
        walk.files = 0;
        if (nftw(src, walk_cb, 32, FTW_PHYS) < 0)
            return cli_error("cannot read folder %s: %s", src, strerror(errno));
        if (cli_interrupted()) {
            if (!walk.failed)
                cli_error("interrupted");
            return cli_interrupted_exit();
        }
        return walk.failed ? CLI_EXIT_FAIL : 0;
    }

    if (cli_split_uri(src, sb, sk) < 0 || folder_prefix(sk, sprefix, sizeof(sprefix)))
        return CLI_EXIT_FAIL;
    if (cli_is_s3(dst) &&
        (cli_split_uri(dst, db, dk) < 0 || folder_prefix(dk, dprefix, sizeof(dprefix))))
        return CLI_EXIT_FAIL;
    if (!cli_is_s3(dst) && strcmp(dst, "-") == 0)
        return cli_usage_error("cp", "--recursive cannot write to standard output");
    if (cli_list_keys(x->c, sb, sprefix, &keys) < 0)
        return CLI_EXIT_FAIL;
    for (i = 0; i < keys.n && rc == 0; i++) {
        const char *rel = keys.keys[i] + strlen(sprefix);
        if (ends_with_slash(keys.keys[i]))
            continue; /* a folder marker: nothing to copy */
        if (!cli_is_s3(dst)) {
            if (!safe_relative(rel)) {
                rc = cli_error("refusing key s3://%s/%s: it would be written outside %s", sb,
                               keys.keys[i], dst);
                break;
            }
            if (join(path, sizeof(path), dst, rel) != 0) {
                rc = CLI_EXIT_FAIL;
                break;
            }
            if (!x->o->dryrun && (rc = make_parents(path)) != 0)
                break;
            rc = download(x, sb, keys.keys[i], path);
        } else {
            int n = snprintf(key, sizeof(key), "%s%s", dprefix, rel);
            if (n < 0 || (size_t)n >= sizeof(key)) {
                rc = cli_error("key too long: %s%s", dprefix, rel);
                break;
            }
            rc = copy(x, sb, keys.keys[i], db, key);
        }
        if (rc == 0 && cli_interrupted())
            rc = cli_error("interrupted");
    }
    cli_keys_free(&keys);
    return rc != 0 && cli_interrupted() ? cli_interrupted_exit() : rc;
}

/* ---- one object ----------------------------------------------------------------------- */

static int cp_one(struct cp_ctx *x, const char *src, const char *dst)
{
    char sb[CLI_BUCKET_CAP], sk[CLI_KEY_CAP], db[CLI_BUCKET_CAP], dk[CLI_KEY_CAP];
    char path[PATH_MAX];
    struct stat st;
    int n;

    if (!cli_is_s3(src)) { /* upload */
        if (cli_split_uri(dst, db, dk) < 0)
            return CLI_EXIT_FAIL;
        if (strcmp(src, "-") != 0 && stat(src, &st) == 0 && S_ISDIR(st.st_mode))
            return cli_error("%s is a folder (use --recursive)", src);
        if (dk[0] == '\0' || ends_with_slash(dk)) {
            if (strcmp(src, "-") == 0)
                return cli_usage_error("cp",
                                       "uploading standard input needs a full key, not "
                                       "%s",
                                       dst);
            n = snprintf(dk + strlen(dk), CLI_KEY_CAP - strlen(dk), "%s", base_name(src));
            if (n < 0 || strlen(dk) + 1 >= CLI_KEY_CAP)
                return cli_error("key too long: %s%s", dst, base_name(src));
        }
        return upload(x, src, db, dk);
    }
    if (cli_split_uri(src, sb, sk) < 0)
        return CLI_EXIT_FAIL;
    if (sk[0] == '\0' || ends_with_slash(sk))
        return cli_error("%s names a prefix, not an object (use --recursive)", src);
    if (cli_is_s3(dst)) {
        if (cli_split_uri(dst, db, dk) < 0)
            return CLI_EXIT_FAIL;
        if (dk[0] == '\0' || ends_with_slash(dk)) {
            n = snprintf(dk + strlen(dk), CLI_KEY_CAP - strlen(dk), "%s", base_name(sk));
            if (n < 0 || strlen(dk) + 1 >= CLI_KEY_CAP)
                return cli_error("key too long: %s%s", dst, base_name(sk));
        }
        return copy(x, sb, sk, db, dk);
    }
    if (strcmp(dst, "-") != 0 &&
        (ends_with_slash(dst) || (stat(dst, &st) == 0 && S_ISDIR(st.st_mode)))) {
        if (join(path, sizeof(path), dst, base_name(sk)) != 0)
            return CLI_EXIT_FAIL;
        /* "DIR/" names a folder, created if missing, as the AWS CLI does. */
        if (!x->o->dryrun && make_parents(path) != 0)
            return CLI_EXIT_FAIL;
        dst = path;
    }
    return download(x, sb, sk, dst);
}

static int run(const struct cli_opts *o)
{
    const char *src = o->args[0], *dst = o->args[1];
    struct cp_ctx x = {o, NULL};
    int rc;

    if (!cli_is_s3(src) && !cli_is_s3(dst))
        return cli_usage_error("cp", "one of SOURCE and DEST must be an s3:// URI");
    if (cli_client(o, &x.c) < 0)
        return CLI_EXIT_FAIL;
    cli_install_sigint();
    rc = o->recursive ? cp_recursive(&x, src, dst) : cp_one(&x, src, dst);
    s3d_client_free(x.c);
    return rc;
}

const struct cli_command cli_cmd_cp = {
    .name = "cp",
    .summary = "copy files and objects: local <-> s3://, s3:// -> s3://, - for stdin/stdout",
    .usage = usage,
    .flags = CLI_F_RECURSIVE | CLI_F_CONTENT_TYPE | CLI_F_DRYRUN,
    .min_args = 2,
    .max_args = 2,
    .run = run,
};
