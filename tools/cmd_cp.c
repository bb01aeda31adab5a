/* cmd_cp.c - s3direct cp: local <-> S3, S3 -> S3, "-" for standard input/output, and
 * --recursive for folders and prefixes (cp_recursive.c); --base in cp_base.c. */
#include <errno.h>
#include <fcntl.h>
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
    "                        a folder: s3://b/data means s3://b/data/...)\n"
    "  --content-type TYPE   Content-Type of uploaded objects (default\n"
    "                        application/octet-stream)\n"
    "  --exclude PATTERN     with --recursive: skip paths matching PATTERN (relative to\n"
    "                        SOURCE; * ? [..] as the AWS CLI reads them)\n"
    "  --include PATTERN     do not skip paths matching PATTERN; filters apply in order and\n"
    "                        the last one that matches wins, as in the AWS CLI\n"
    "  --dryrun              print what would be copied, copy nothing\n"
    "  --only-show-errors    print only errors and warnings: no progress bar, no line per\n"
    "                        file (--dryrun's lines are still printed), as aws s3\n"
    "  --no-follow-symlinks  leave local symbolic links out (files and folders)\n"
    "  --follow-symlinks     follow them (the default, as in the AWS CLI): a linked folder's\n"
    "                        files are copied under the link's name; a link to a folder\n"
    "                        above it is skipped with a warning\n"
    "  --base URI            write SOURCE, one safetensors file, as a checkpoint whose tensors\n"
    "                        unchanged in the earlier checkpoint URI are copied from it, not\n"
    "                        sent (see \"With --base\" below)\n"
    "With --recursive, everything is listed first, then up to 8 files are copied at once\n"
    "(started in path order, a line per file, and where a bar would be shown one line for the\n"
    "whole run, as aws s3 prints it: \"Completed 1.2 MiB/3.4 MiB (5.6 MiB/s) with 3 file(s)\n"
    "remaining\") and *.index.json files only after all others are done, so a\n"
    "Hugging Face index appears only after the shards it names. As aws s3 does, a file that\n"
    "fails does not stop the others (exit status 1), and a file that cannot be read (a\n"
    "dangling link, a FIFO) is skipped with a warning (exit status 2); an index is then not\n"
    "copied.\n\n"
    "With --base URI, SOURCE is one safetensors file or object (written by the safetensors\n"
    "library, Hugging Face, any tool) and DEST becomes a checkpoint holding the same tensors,\n"
    "in the same order, and the same __metadata__, under a header s3direct writes anew with a\n"
    "CRC-32C per tensor: DEST's bytes are not SOURCE's (a cp without --base copies bytes\n"
    "exactly). A tensor with the same name, dtype, shape and CRC-32C in URI is not sent: on S3\n"
    "it is copied server-side (UploadPartCopy, each part proved), in a folder with\n"
    "copy_file_range. The line printed says how many bytes were copied from URI and how many\n"
    "sent. URI is a checkpoint (or a sharded .safetensors.index.json) written by s3direct, on\n"
    "the same storage as DEST (both s3:// or both local; with --base SOURCE and DEST may both\n"
    "be local). A URI that is missing, elsewhere, or stores no CRC-32C (a file copied by a\n"
    "plain cp) gives a full upload, and the line says why: the first upload of a series is a\n"
    "cp --base too (DEST as its own URI updates it in place). A local SOURCE is mapped\n"
    "read-only; an s3:// SOURCE is first read whole into host memory (its tensors' size).\n"
    "Not with --recursive, --content-type, - (standard input or output), or a sharded SOURCE\n"
    "or DEST (copy each shard with --base, then the index without).\n\n"
    "Examples:\n"
    "  s3direct cp ./model.safetensors s3://bucket/models/\n"
    "  s3direct cp s3://bucket/models/model.safetensors /dev/shm/model.safetensors\n"
    "  tar c data | s3direct cp - s3://bucket/data.tar\n"
    "  s3direct cp s3://bucket/data.tar - | tar x\n"
    "  s3direct cp ./ckpt s3://bucket/ckpt --recursive --concurrency 16 --part-size 32M\n"
    "  s3direct cp s3://bucket/a.bin s3://other-bucket/a.bin\n"
    "  s3direct cp ./model.safetensors s3://bucket/ft/step2.safetensors \\\n"
    "      --base s3://bucket/ft/step1.safetensors\n"
    "  s3direct cp ./model.safetensors s3://bucket/model.safetensors \\\n"
    "      --base s3://bucket/model.safetensors\n";

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

static void say(const struct cli_opts *o, const char *what, const char *src, const char *dst)
{
    if (!cli_says(o))
        return;
    /* With "-" as DEST the data owns stdout: the report goes to stderr. */
    FILE *f = strcmp(dst, "-") == 0 ? stderr : stdout;

    cli_line_begin(); /* a total progress line makes room */
    flockfile(f);     /* one line, whole, when several files run at once */
    fprintf(f, "%s%s: ", o->dryrun ? "(dryrun) " : "", o->move ? "move" : what);
    cli_put_key(f, src);
    fputs(" to ", f);
    cli_put_key(f, dst);
    fputc('\n', f);
    fflush(f); /* before the progress line is drawn again on stderr */
    funlockfile(f);
    cli_line_end();
}

/* The progress of one transfer: its own bar, or its share of a recursive run's total. */
static void bar_init(struct cp_ctx *x, struct cli_progress *p, const char *label)
{
    cli_progress_init(p, x->o, label);
    x->fed = 0;
    if (x->total != NULL) {
        p->enabled = 0;
        p->total = x->total;
    }
}

int cli_upload(struct cp_ctx *x, const char *path, const char *bucket, const char *key)
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
    bar_init(x, &p, cli_base_name(key));
    cli_transfer_opts(x->o, &p, &t);
    rc = s3d_upload_from_file(x->c, bucket, key, path, &t);
    cli_progress_finish(&p, rc == 0);
    x->fed = p.fed;
    if (rc < 0)
        return cli_fail(rc);
    say(x->o, "upload", path, uri);
    return 0;
}

int cli_download(struct cp_ctx *x, const char *bucket, const char *key, const char *path)
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
    bar_init(x, &p, cli_base_name(key));
    cli_transfer_opts(x->o, &p, &t);
    rc = s3d_download_to_file(x->c, bucket, key, target, &t);
    cli_progress_finish(&p, rc == 0);
    x->fed = p.fed;
    if (rc < 0)
        return cli_fail(rc);
    if (strcmp(target, "-") == 0 && fflush(stdout) != 0)
        return cli_error("writing %s: %s", path, strerror(errno));
    if (strcmp(target, "-") != 0)
        say(x->o, "download", uri, path);
    return 0;
}

int cli_copy(struct cp_ctx *x, const char *sb, const char *sk, const char *db, const char *dk)
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
    bar_init(x, &p, cli_base_name(sk));
    cli_transfer_opts(x->o, &p, &t);
    rc = s3d_copy_object(x->c, sb, sk, db, dk, &t);
    cli_progress_finish(&p, rc == 0);
    x->fed = p.fed;
    if (rc < 0)
        return cli_fail(rc);
    say(x->o, "copy", src, dst);
    return 0;
}

/* ---- one object ----------------------------------------------------------------------- */

int cli_cp_one(struct cp_ctx *x, const char *src, const char *dst)
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
        /* The AWS CLI leaves such a link out without a word and exits 0; a warning and exit
         * status 2, as for a file it skips, tell that nothing was copied. */
        if (x->o->no_follow_symlinks && lstat(src, &st) == 0 && S_ISLNK(st.st_mode)) {
            fputs("warning: Skipping file ", stderr);
            cli_put_key(stderr, src);
            fputs(". File is a symbolic link (--no-follow-symlinks).\n", stderr);
            return CLI_EXIT_USAGE;
        }
        if (dk[0] == '\0' || cli_ends_with_slash(dk)) {
            if (strcmp(src, "-") == 0)
                return cli_usage_error("cp",
                                       "uploading standard input needs a full key, not "
                                       "%s",
                                       dst);
            n = snprintf(dk + strlen(dk), CLI_KEY_CAP - strlen(dk), "%s", cli_base_name(src));
            if (n < 0 || strlen(dk) + 1 >= CLI_KEY_CAP)
                return cli_error("key too long: %s%s", dst, cli_base_name(src));
        }
        return cli_upload(x, src, db, dk);
    }
    if (cli_split_uri(src, sb, sk) < 0)
        return CLI_EXIT_FAIL;
    if (sk[0] == '\0' || cli_ends_with_slash(sk))
        return cli_error("%s names a prefix, not an object (use --recursive)", src);
    if (cli_is_s3(dst)) {
        if (cli_split_uri(dst, db, dk) < 0)
            return CLI_EXIT_FAIL;
        if (dk[0] == '\0' || cli_ends_with_slash(dk)) {
            n = snprintf(dk + strlen(dk), CLI_KEY_CAP - strlen(dk), "%s", cli_base_name(sk));
            if (n < 0 || strlen(dk) + 1 >= CLI_KEY_CAP)
                return cli_error("key too long: %s%s", dst, cli_base_name(sk));
        }
        return cli_copy(x, sb, sk, db, dk);
    }
    if (strcmp(dst, "-") != 0 &&
        (cli_ends_with_slash(dst) || (stat(dst, &st) == 0 && S_ISDIR(st.st_mode)))) {
        if (cli_join(path, sizeof(path), dst, cli_base_name(sk)) != 0)
            return CLI_EXIT_FAIL;
        /* "DIR/" names a folder, created if missing, as the AWS CLI does. */
        if (!x->o->dryrun && cli_make_parents(path) != 0)
            return CLI_EXIT_FAIL;
        dst = path;
    }
    return cli_download(x, sb, sk, dst);
}

static int run(const struct cli_opts *o)
{
    const char *src = o->args[0], *dst = o->args[1];
    struct cp_ctx x = {o, NULL, NULL, 0};
    int rc;

    if (o->nfilters > 0 && !o->recursive)
        return cli_usage_error("cp", "--exclude and --include need --recursive");
    if (o->base != NULL)
        return cli_cp_base(o); /* cp_base.c */
    if (!cli_is_s3(src) && !cli_is_s3(dst))
        return cli_usage_error("cp", "one of SOURCE and DEST must be an s3:// URI");
    if (cli_client(o, &x.c) < 0)
        return CLI_EXIT_FAIL;
    cli_install_sigint();
    rc = o->recursive ? cli_cp_recursive(&x, src, dst) : cli_cp_one(&x, src, dst);
    s3d_client_free(x.c);
    return rc;
}

const struct cli_command cli_cmd_cp = {
    .name = "cp",
    .summary = "copy files and objects: local <-> s3://, s3:// -> s3://, - for stdin/stdout",
    .usage = usage,
    .flags = CLI_F_RECURSIVE | CLI_F_CONTENT_TYPE | CLI_F_DRYRUN | CLI_F_FILTER | CLI_F_BASE |
             CLI_F_SYMLINKS | CLI_F_ONLY_ERRORS,
    .min_args = 2,
    .max_args = 2,
    .run = run,
};

/* ---- mv ------------------------------------------------------------------------------- */

static const char mv_usage[] =
    "usage: s3direct mv SOURCE DEST [OPTIONS]\n\n"
    "Moves one object or file (with --recursive everything under a folder or prefix): copies\n"
    "it as \"s3direct cp\" does, then deletes the source once the copy succeeded. A failed or\n"
    "interrupted copy leaves its source in place. At least one of SOURCE and DEST is an s3://\n"
    "URI; standard input and output cannot be moved.\n\n"
    "Options:\n"
    "  -r, --recursive       move everything under the folder or prefix\n"
    "  --exclude PATTERN     skip paths matching PATTERN (relative to SOURCE; * ? [..])\n"
    "  --include PATTERN     do not skip paths matching PATTERN; the last matching filter\n"
    "                        wins, as in the AWS CLI\n"
    "  --content-type TYPE   Content-Type of uploaded objects\n"
    "  --dryrun              print what would be moved, move nothing\n"
    "  --only-show-errors    print only errors and warnings: no progress bar, no line per\n"
    "                        file (--dryrun's lines are still printed), as aws s3\n"
    "  --no-follow-symlinks  leave local symbolic links out (default: follow them, as cp)\n"
    "  --follow-symlinks     follow them (the default)\n\n"
    "Examples:\n"
    "  s3direct mv ./model.safetensors s3://bucket/models/\n"
    "  s3direct mv s3://bucket/tmp/ckpt s3://bucket/ckpt --recursive\n";

/* Deletes the source of a finished move. */
int cli_delete_source(struct cp_ctx *x, const char *src)
{
    char sb[CLI_BUCKET_CAP], sk[CLI_KEY_CAP];
    int rc;

    if (x->o->dryrun)
        return 0;
    if (!cli_is_s3(src)) {
        if (unlink(src) != 0)
            return cli_error("moved, but cannot delete %s: %s", src, strerror(errno));
        return 0;
    }
    if (cli_split_uri(src, sb, sk) < 0)
        return CLI_EXIT_FAIL;
    rc = s3d_delete_object(x->c, sb, sk);
    return rc < 0 ? cli_fail(rc) : 0;
}

static int mv_run(const struct cli_opts *given)
{
    struct cli_opts mo = *given;
    const struct cli_opts *o = &mo;
    const char *src = o->args[0], *dst = o->args[1];
    struct cp_ctx x = {o, NULL, NULL, 0};
    int rc;

    mo.move = 1;
    if (!cli_is_s3(src) && !cli_is_s3(dst))
        return cli_usage_error("mv", "one of SOURCE and DEST must be an s3:// URI");
    if (strcmp(src, "-") == 0 || strcmp(dst, "-") == 0)
        return cli_usage_error("mv", "standard input and output cannot be moved (use cp)");
    if (strcmp(src, dst) == 0)
        return cli_usage_error("mv", "cannot move %s onto itself", src);
    if (o->nfilters > 0 && !o->recursive)
        return cli_usage_error("mv", "--exclude and --include need --recursive");
    if (cli_client(o, &x.c) < 0)
        return CLI_EXIT_FAIL;
    cli_install_sigint();
    if (o->recursive) {
        rc = cli_cp_recursive(&x, src, dst);
    } else {
        rc = cli_cp_one(&x, src, dst);
        if (rc == 0)
            rc = cli_delete_source(&x, src);
    }
    s3d_client_free(x.c);
    return rc;
}

const struct cli_command cli_cmd_mv = {
    .name = "mv",
    .summary = "move files and objects: copy, then delete the source",
    .usage = mv_usage,
    .flags = CLI_F_RECURSIVE | CLI_F_CONTENT_TYPE | CLI_F_DRYRUN | CLI_F_FILTER | CLI_F_SYMLINKS |
             CLI_F_ONLY_ERRORS,
    .min_args = 2,
    .max_args = 2,
    .run = mv_run,
};
