/* test_tmpfile.c - temporary files beside a target (engine/tmpfile.h) and the local saves
 * that use them: a new file gets 0666 less the umask, an overwritten file keeps its mode (a
 * 0600 file is not widened), a temporary file is recognisable by its name, and the next save
 * to the same path removes those left by processes that no longer run (and only those). The
 * public file stream (s3d_file_stream_*, what the Python local writer uses) and the local
 * checkpoint save go through the same temporary file and commit. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/tmpfile.h"
#include "testutil.h"

static mode_t mode_of(const char *p)
{
    struct stat st;
    CHECK(stat(p, &st) == 0);
    return st.st_mode & 07777;
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void touch(const char *p)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, "x", 1) == 1);
    close(fd);
}

/* A PID that surely runs no process: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0)
        _exit(0);
    CHECK(waitpid(p, NULL, 0) == p);
    return p;
}

static size_t count_tmp(const char *dir)
{
    size_t n = 0;
    struct dirent *e;
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".s3d-tmp-") != NULL;
    closedir(d);
    return n;
}

static void save_one(struct s3d_client *c, const char *path)
{
    static const int64_t shape[1] = {4};
    static const float v[4] = {1, 2, 3, 4};
    struct s3d_tensor_src t = {.name = "w",
                               .dtype = S3D_DTYPE_F32,
                               .ndim = 1,
                               .shape = shape,
                               .ptr = v,
                               .device = -1,
                               .nbytes = sizeof(v)};
    CHECK_OK(s3d_checkpoint_write(c, path, &t, 1, NULL, 0, NULL));
}

int main(void)
{
    char dir[512], target[600], stale[700], live[700], other[700];
    struct s3d_tmpfile t;
    struct s3d_client_options o;
    struct s3d_client *c;
    pid_t dead = dead_pid();

    snprintf(dir, sizeof(dir), "%s/tmpf", t_tmpdir());
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(target, sizeof(target), "%s/out.bin", dir);

    /* The name says what it is and whose it is; a new file follows the umask. */
    umask(027);
    CHECK_OK(s3d_tmpfile_create(target, 0, &t));
    {
        char want[64];
        snprintf(want, sizeof(want), "/.out.bin.s3d-tmp-%ld-", (long)getpid());
        CHECK(strstr(t.path, want) != NULL);
    }
    CHECK(write(t.fd, "abc", 3) == 3);
    CHECK(count_tmp(dir) == 1);
    CHECK_OK(s3d_tmpfile_commit(&t, target));
    CHECK(t.path == NULL && t.fd == -1);
    CHECK(mode_of(target) == 0640);
    CHECK(count_tmp(dir) == 0);

    /* Overwriting keeps the mode, even one the umask would not give. */
    CHECK(chmod(target, 0600) == 0);
    CHECK_OK(s3d_tmpfile_create(target, 0, &t));
    CHECK_OK(s3d_tmpfile_commit(&t, target));
    CHECK(mode_of(target) == 0600);
    CHECK(chmod(target, 0664) == 0);
    CHECK_OK(s3d_tmpfile_create(target, 0, &t));
    CHECK_OK(s3d_tmpfile_commit(&t, target));
    CHECK(mode_of(target) == 0664);

    /* Discard removes it. */
    CHECK_OK(s3d_tmpfile_create(target, 0, &t));
    s3d_tmpfile_discard(&t);
    CHECK(count_tmp(dir) == 0);

    /* Leftovers: a dead PID's is removed; a live one's (our parent), another target's, and a
     * name that only looks similar stay. */
    snprintf(stale, sizeof(stale), "%s/.out.bin.s3d-tmp-%ld-0badf00d", dir, (long)dead);
    snprintf(live, sizeof(live), "%s/.out.bin.s3d-tmp-%ld-0badf00d", dir, (long)getppid());
    snprintf(other, sizeof(other), "%s/.other.bin.s3d-tmp-%ld-0badf00d", dir, (long)dead);
    touch(stale);
    touch(live);
    touch(other);
    CHECK(s3d_tmpfile_sweep(target) == 1);
    CHECK(!exists(stale) && exists(live) && exists(other));
    touch(stale);
    CHECK_OK(s3d_tmpfile_create(target, 0, &t));
    CHECK(!exists(stale));
    s3d_tmpfile_discard(&t);
    unlink(live);
    unlink(other);

    /* The public file stream (transfer.h) is the same temporary file and commit: the name,
     * the kept mode, leftovers removed, the target untouched until finish, nothing left by a
     * free without finish. */
    {
        struct s3d_file_stream *fs = NULL;
        char buf[8] = {0};
        int fd;
        CHECK(chmod(target, 0604) == 0);
        touch(stale);
        CHECK_OK(s3d_file_stream_new(target, &fs));
        CHECK(!exists(stale));
        CHECK(count_tmp(dir) == 1);
        fd = s3d_file_stream_fd(fs);
        CHECK(fd >= 0);
        CHECK(write(fd, "stream", 6) == 6);
        CHECK(pread(fd, buf, 6, 0) == 6 && memcmp(buf, "stream", 6) == 0);
        CHECK(mode_of(target) == 0604);
        {
            int rfd = open(target, O_RDONLY);
            CHECK(rfd >= 0 && read(rfd, buf, sizeof(buf)) == 0); /* the last commit's: empty */
            close(rfd);
        }
        CHECK_OK(s3d_file_stream_finish(fs));
        CHECK(s3d_file_stream_fd(fs) == -1);
        CHECK_ERR(s3d_file_stream_finish(fs), S3D_EINVAL);
        s3d_file_stream_free(fs);
        CHECK(mode_of(target) == 0604);
        CHECK(count_tmp(dir) == 0);
        {
            int rfd = open(target, O_RDONLY);
            CHECK(rfd >= 0 && read(rfd, buf, sizeof(buf)) == 6 && memcmp(buf, "stream", 6) == 0);
            close(rfd);
        }
        CHECK_OK(s3d_file_stream_new(target, &fs));
        CHECK(write(s3d_file_stream_fd(fs), "gone", 4) == 4);
        s3d_file_stream_free(fs);
        CHECK(count_tmp(dir) == 0);
        CHECK(exists(target));
        /* A folder that does not exist: S3D_ENOENT naming it, *out NULL. */
        snprintf(other, sizeof(other), "%s/no/such/f.bin", dir);
        fs = (struct s3d_file_stream *)1;
        CHECK_ERR(s3d_file_stream_new(other, &fs), S3D_ENOENT);
        CHECK_MSG_HAS("does not exist");
        CHECK(fs == NULL);
        CHECK_ERR(s3d_file_stream_new("", &fs), S3D_EINVAL);
        CHECK_ERR(s3d_file_stream_finish(NULL), S3D_EINVAL);
        CHECK(s3d_file_stream_fd(NULL) == -1);
        s3d_file_stream_free(NULL);
    }

    /* The local checkpoint save: umask, kept mode, stale files of a killed save removed. */
    memset(&o, 0, sizeof(o));
    o.device = -1;
    CHECK_OK(s3d_client_new(&o, &c));
    snprintf(target, sizeof(target), "%s/ck.safetensors", dir);
    umask(077);
    save_one(c, target);
    CHECK(mode_of(target) == 0600);
    umask(022);
    CHECK(chmod(target, 0640) == 0);
    save_one(c, target);
    CHECK(mode_of(target) == 0640);
    snprintf(stale, sizeof(stale), "%s/.ck.safetensors.s3d-tmp-%ld-12345678", dir, (long)dead);
    touch(stale);
    save_one(c, target);
    CHECK(!exists(stale));
    CHECK(count_tmp(dir) == 0);
    s3d_client_free(c);
    return 0;
}
