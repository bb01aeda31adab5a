/* main.c - the s3direct command-line tool: finds the command and runs it.
 *
 * Exit status: 0 success, 1 the operation failed (one "s3direct: ..." line on stderr), 2 the
 * command line was wrong. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct cli_command *const commands[] = {
    &cli_cmd_cp,      &cli_cmd_mv,   &cli_cmd_sync,   &cli_cmd_ls,
    &cli_cmd_rm,      &cli_cmd_stat, &cli_cmd_mb,     &cli_cmd_rb,
    &cli_cmd_presign, &cli_cmd_info, &cli_cmd_verify, &cli_cmd_abort_uploads,
    &cli_cmd_s3api,
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void print_help(FILE *f)
{
    size_t i;

    fprintf(f, "usage: s3direct [OPTIONS] COMMAND [ARGS...] [OPTIONS]\n\n"
               "Moves bytes between S3-compatible object stores and local files with parallel\n"
               "ranged GETs and multipart uploads, and inspects safetensors checkpoints.\n\n"
               "Commands:\n");
    for (i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-13s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "\n%s", cli_common_help);
    fprintf(f,
            "  --version            print the version of the tool and of the library\n\n"
            "Examples:\n"
            "  s3direct cp model.safetensors s3://bucket/models/\n"
            "  s3direct cp s3://bucket/big.bin /dev/shm/big.bin --concurrency 16 --part-size 16M\n"
            "  s3direct ls s3://bucket/models/ --recursive --human-readable\n"
            "  s3direct info s3://bucket/models/model.safetensors\n\n"
            "\"s3direct COMMAND --help\" describes each command. Configuration (keys, region,\n"
            "endpoint) is read as the AWS CLI reads it: options, then AWS_* environment\n"
            "variables, then ~/.aws/credentials and ~/.aws/config.\n");
}

int main(int argc, char **argv)
{
    struct cli_opts o;
    const struct cli_command *cmd = NULL;
    int n, rc;
    size_t i;

    cli_opts_init(&o);
    n = cli_parse_common(argc - 1, argv + 1, &o);
    if (n < 0)
        return CLI_EXIT_USAGE;
    n += 1;
    if (n >= argc) {
        print_help(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[n], "--help") == 0 || strcmp(argv[n], "-h") == 0 ||
        strcmp(argv[n], "help") == 0) {
        if (strcmp(argv[n], "help") == 0 && n + 1 < argc) {
            for (i = 0; i < NCOMMANDS; i++)
                if (strcmp(argv[n + 1], commands[i]->name) == 0) {
                    cli_print_command_help(commands[i], stdout);
                    return CLI_EXIT_OK;
                }
        }
        print_help(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[n], "--version") == 0) {
        printf("s3direct %s (library %s)\n", S3D_VERSION_STRING, s3d_version_string());
        return CLI_EXIT_OK;
    }
    for (i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[n], commands[i]->name) == 0)
            cmd = commands[i];
    if (cmd == NULL) {
        fprintf(stderr, "s3direct: unknown command \"%s\" (see: s3direct --help)\n", argv[n]);
        return CLI_EXIT_USAGE;
    }
    rc = cli_parse(cmd, argc - n - 1, argv + n + 1, &o);
    if (rc < 0)
        return CLI_EXIT_OK; /* --help was printed */
    if (rc != 0)
        return rc;
    return cmd->run(&o);
}
