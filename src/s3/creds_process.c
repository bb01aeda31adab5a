/* creds_process.c - credential_process: run the profile's command and read the JSON it prints.
 *
 * As botocore, the command line is split into words (single and double quotes, backslash
 * escapes) and run directly, without a shell. Its stdout must be the version 1 format:
 *   {"Version": 1, "AccessKeyId": ..., "SecretAccessKey": ..., "SessionToken": ...,
 *    "Expiration": "2026-12-03T07:00:00Z"}
 * (SessionToken and Expiration optional). Its stderr goes to ours, so the tool can talk to the
 * user. stdout is capped at S3D_CREDS_MAX_BODY; the process is killed after
 * S3D_CREDS_PROCESS_MS (or S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS milliseconds).
 *
 * The deadline covers both the end of its stdout and its exit: a process that closes stdout
 * and stays alive, or one that exits while a child of its own holds the pipe open, is waited
 * for no longer (each hung s3direct forever, or to the timeout and then left running). The
 * command runs in a process group of its own, and at the deadline the whole group is killed,
 * so no grandchild survives. Not when the caller is in the foreground of a terminal: there a
 * command of its own group would be stopped (SIGTTIN) as soon as it reads the terminal, as an
 * MFA prompt does, and Ctrl-C would no longer reach it; it stays in ours, and only it is
 * killed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/compiler.h"
#include "common/env.h"
#include "common/error.h"
#include "s3/creds_int.h"
#include "s3/retry.h"

extern char **environ;

#define MAX_ARGS 64

/* Splits cmd into argv (pointers into buf, which must hold strlen(cmd)+1 + MAX_ARGS bytes).
 * Returns the number of words or -1 for an unterminated quote / too many words. */
static int split_words(const char *cmd, char *buf, char **argv)
{
    int argc = 0, in_word = 0;
    char quote = 0;
    char *o = buf;
    for (const char *p = cmd;; p++) {
        char ch = *p;
        if (ch == '\0') {
            if (quote)
                return -1;
            if (in_word) {
                *o++ = '\0';
            }
            break;
        }
        if (quote) {
            if (ch == quote)
                quote = 0;
            else if (ch == '\\' && quote == '"' && (p[1] == '"' || p[1] == '\\'))
                *o++ = *++p;
            else
                *o++ = ch;
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\n') {
            if (in_word) {
                *o++ = '\0';
                in_word = 0;
            }
            continue;
        }
        if (!in_word) {
            if (argc == MAX_ARGS)
                return -1;
            argv[argc++] = o;
            in_word = 1;
        }
        if (ch == '\'' || ch == '"')
            quote = ch;
        else if (ch == '\\' && p[1] != '\0')
            *o++ = *++p;
        else
            *o++ = ch;
    }
    argv[argc] = NULL;
    return argc;
}

/* 1 when this process is in the foreground process group of its controlling terminal (an
 * interactive command line). */
static int in_terminal_foreground(void)
{
    int fd = open("/dev/tty", O_RDONLY | O_NOCTTY | O_CLOEXEC), fg = 0;
    if (fd < 0)
        return 0;
    fg = tcgetpgrp(fd) == getpgrp();
    close(fd);
    return fg;
}

/* Kills the command (its whole group when it has one) and reaps it unless already reaped. */
static void kill_and_reap(pid_t pid, int own_group, int reaped, int *status)
{
    if (own_group)
        kill(-pid, SIGKILL);
    if (!reaped) {
        kill(pid, SIGKILL);
        while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
        }
    }
}

/* The command running: its PID (-1 once reaped or never started), the read end of its
 * stdout, and what is known of it. */
struct child {
    pid_t pid;
    int fd;
    int own_group; /* it leads a process group of its own, killed whole */
    int eof;       /* its stdout is at its end */
    int exited;    /* it exited (a zombie until reaped: WNOWAIT) */
    int reaped;    /* the kernel reaped it (SIGCHLD ignored): nothing holds its id */
    int status;
};

/* Starts argv with its stdout on a pipe (ch->fd), in a process group of its own unless this
 * process is in a terminal's foreground (the command may prompt there). */
static int spawn_child(char **argv, const char *profile, struct child *ch)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int fds[2], rc;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return s3d_fail(S3D_ECREDS, "credential_process: pipe: %s", strerror(errno));
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawnattr_init(&attr);
    if (!in_terminal_foreground() && posix_spawnattr_setpgroup(&attr, 0) == 0 &&
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP) == 0)
        ch->own_group = 1;
    rc = posix_spawnp(&ch->pid, argv[0], &fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    ch->fd = fds[0];
    if (rc != 0) {
        ch->pid = -1;
        return s3d_fail(S3D_ECREDS, "profile \"%s\": credential_process: cannot run %s: %s",
                        profile, argv[0], strerror(rc));
    }
    return 0;
}

/* Notes whether the command has exited, without reaping it. WNOWAIT: an exited command stays
 * a zombie until it is reaped, so that its PID, the group's id, cannot be reused by an
 * unrelated process before the group is killed. ECHILD: SIGCHLD is ignored in this process
 * and the kernel reaped it; its exit status is lost (taken as 0, as a blocking waitpid left
 * it before), and with nothing holding the id the group is not signalled. */
static void poll_exit(struct child *ch)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)ch->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0) {
        ch->exited = si.si_pid == ch->pid;
    } else if (errno == ECHILD) {
        ch->exited = ch->reaped = 1;
        ch->status = 0;
        ch->own_group = 0;
    }
}

/* Reads the command's stdout into out (cap bytes, the last kept for a NUL) until it is at its
 * end and the command has exited, or the deadline. After the end of stdout, its exit is
 * polled every 10 ms. 0; 1 past the deadline; 2 when it printed cap - 1 bytes or more. */
static int collect(struct child *ch, uint64_t deadline, char *out, size_t cap, size_t *got)
{
    while (!ch->eof || !ch->exited) {
        struct pollfd pfd = {ch->fd, POLLIN, 0};
        uint64_t now = s3d_now_ms();
        ssize_t n;
        int pr, wait_ms;
        if (!ch->exited) {
            poll_exit(ch);
            if (ch->exited && ch->eof)
                break;
        }
        if (now >= deadline)
            return 1;
        wait_ms = (int)S3D_MIN(deadline - now, ch->eof ? 10u : 1000u);
        if (ch->eof) {
            struct timespec ts = {0, (long)wait_ms * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        pr = poll(&pfd, 1, wait_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            continue;
        n = read(ch->fd, out + *got, cap - 1 - *got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ch->eof = 1;
            continue;
        }
        *got += (size_t)n;
        if (*got == cap - 1)
            return 2;
    }
    return 0;
}

/* The command's output (NUL-terminated at len) as credentials: a JSON object with
 * "Version": 1 and the keys the AWS CLI reads. */
static int parse_output(const char *profile, const char *text, size_t len, struct s3d_creds **out)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    int rc = 0;
    if (root == NULL || !json_is_object(root))
        rc = s3d_fail(S3D_ECREDS, "profile \"%s\": credential_process output is not a JSON object",
                      profile);
    else if (!json_is_integer(json_object_get(root, "Version")) ||
             json_integer_value(json_object_get(root, "Version")) != 1)
        rc = s3d_fail(S3D_ECREDS,
                      "profile \"%s\": credential_process output has no \"Version\": 1 (the only "
                      "version defined)",
                      profile);
    json_decref(root);
    if (rc < 0)
        return rc;
    return s3d_creds_from_json(text, len, "credential_process", "custom-process", "AccessKeyId",
                               "SecretAccessKey", "SessionToken", "Expiration", out);
}

int s3d_creds_process(const char *command, const char *profile, struct s3d_creds **out)
{
    char *buf = NULL, *argv[MAX_ARGS + 1];
    char outbuf[S3D_CREDS_MAX_BODY + 1];
    size_t got = 0;
    struct child ch = {.pid = -1, .fd = -1};
    long timeout_ms = S3D_CREDS_PROCESS_MS;
    int64_t t;
    int rc = 0, argc, late;

    *out = NULL;
    if (S3D_TEST_HOOK_INT("S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS", 1, INT32_MAX, &t) == 1)
        timeout_ms = (long)t;
    if ((buf = malloc(strlen(command) + 1 + MAX_ARGS)) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory running credential_process");
    argc = split_words(command, buf, argv);
    if (argc <= 0) {
        rc = s3d_fail(S3D_ECONFIG,
                      "profile \"%s\": credential_process \"%.200s\" is empty, has an "
                      "unterminated quote or more than %d words",
                      profile, command, MAX_ARGS);
        goto out;
    }
    rc = spawn_child(argv, profile, &ch);
    if (rc < 0)
        goto out;
    late = collect(&ch, s3d_now_ms() + (uint64_t)timeout_ms, outbuf, sizeof(outbuf), &got);
    if (late == 2) {
        rc = s3d_fail(S3D_ECREDS, "profile \"%s\": credential_process printed over %u bytes",
                      profile, S3D_CREDS_MAX_BODY);
        goto out;
    }
    if (late == 1) {
        rc = s3d_fail(S3D_ECREDS,
                      "profile \"%s\": credential_process %s did not finish within %ld ms%s",
                      profile, argv[0], timeout_ms,
                      ch.eof      ? " (it closed its stdout but did not exit); killed"
                      : ch.exited ? " (it exited, but a process it started kept its stdout "
                                    "open); killed"
                                  : "; killed");
        goto out;
    }
    while (!ch.reaped && waitpid(ch.pid, &ch.status, 0) < 0 && errno == EINTR) {
    }
    ch.pid = -1;
    if (!WIFEXITED(ch.status) || WEXITSTATUS(ch.status) != 0) {
        rc = s3d_fail(S3D_ECREDS, "profile \"%s\": credential_process %s failed (%s %d)", profile,
                      argv[0], WIFEXITED(ch.status) ? "exit status" : "signal",
                      WIFEXITED(ch.status) ? WEXITSTATUS(ch.status) : WTERMSIG(ch.status));
        goto out;
    }
    outbuf[got] = '\0';
    rc = parse_output(profile, outbuf, got, out);
out:
    if (ch.pid > 0)
        kill_and_reap(ch.pid, ch.own_group, ch.reaped, &ch.status);
    if (ch.fd >= 0)
        close(ch.fd);
    memset(outbuf, 0, got);
    free(buf);
    return rc;
}
