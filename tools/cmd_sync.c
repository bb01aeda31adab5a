/* cmd_sync.c - s3direct sync: makes DEST hold what SRC holds, copying only what differs, as
 * "aws s3 sync" does (the comparison is in cp_recursive.c). */
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct sync SOURCE DEST [OPTIONS]\n\n"
    "Copies the files under SOURCE that DEST lacks or has in another version: local folder\n"
    "-> s3://BUCKET/PREFIX, s3:// -> local folder, or s3:// -> s3://. As \"aws s3 sync\"\n"
    "decides, a file is copied when DEST has no file of that path, when the sizes differ, or\n"
    "(unless --size-only) when the source is newer than DEST's copy; from S3 to a folder, a\n"
    "same-sized local file is replaced only when it is newer than the object (or, with\n"
    "--exact-timestamps, when the times differ at all). Downloaded files take the object's\n"
    "time. A PREFIX is taken as a folder (s3://b/data means s3://b/data/...). Progress, where\n"
    "a bar would be shown, is one line for what is to be copied, as aws s3 prints it:\n"
    "\"Completed 1.2 MiB/3.4 MiB (5.6 MiB/s) with 3 file(s) remaining\".\n\n"
    "Options:\n"
    "  --delete              also delete what DEST has and SOURCE does not (after the copies;\n"
    "                        paths excluded by the filters are kept)\n"
    "  --exact-timestamps    from S3 to a folder: replace same-sized files whose time differs\n"
    "  --size-only           compare sizes only\n"
    "  --exclude PATTERN     skip paths matching PATTERN (relative to SOURCE; * ? [..])\n"
    "  --include PATTERN     do not skip paths matching PATTERN; the last matching filter\n"
    "                        wins, as in the AWS CLI\n"
    "  --content-type TYPE   Content-Type of uploaded objects\n"
    "  --dryrun              print what would be copied and deleted, change nothing\n"
    "  --only-show-errors    print only errors and warnings: no progress bar, no line per\n"
    "                        file (--dryrun's lines are still printed), as aws s3\n"
    "  --no-follow-symlinks  leave local symbolic links out, in SOURCE and in DEST\n"
    "  --follow-symlinks     follow them (the default, as in the AWS CLI): the files of a\n"
    "                        linked folder are compared, copied and deleted under the link's\n"
    "                        name, on both sides; a link to a folder above it is skipped\n"
    "                        with a warning\n\n"
    "Examples:\n"
    "  s3direct sync ./ckpt s3://bucket/ckpt\n"
    "  s3direct sync s3://bucket/ckpt /data/ckpt --delete --exclude '*.tmp'\n";

static int run(const struct cli_opts *o)
{
    const char *src = o->args[0], *dst = o->args[1];
    struct cp_ctx x = {o, NULL, NULL, 0};
    int rc;

    if (!cli_is_s3(src) && !cli_is_s3(dst))
        return cli_usage_error("sync", "one of SOURCE and DEST must be an s3:// URI");
    if (strcmp(src, "-") == 0 || strcmp(dst, "-") == 0)
        return cli_usage_error("sync", "standard input and output cannot be synced");
    if (o->size_only && o->exact_timestamps)
        return cli_usage_error("sync", "--size-only and --exact-timestamps exclude each other");
    if (cli_client(o, &x.c) < 0)
        return CLI_EXIT_FAIL;
    cli_install_sigint();
    rc = cli_sync(&x, src, dst);
    s3d_client_free(x.c);
    return rc;
}

const struct cli_command cli_cmd_sync = {
    .name = "sync",
    .summary = "copy only what differs between a folder and a prefix (as aws s3 sync)",
    .usage = usage,
    .flags = CLI_F_SYNC | CLI_F_FILTER | CLI_F_DRYRUN | CLI_F_CONTENT_TYPE | CLI_F_SYMLINKS |
             CLI_F_ONLY_ERRORS,
    .min_args = 2,
    .max_args = 2,
    .run = run,
};
