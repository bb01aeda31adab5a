/* test_tmpfile.c - temporary files beside a target (engine/tmpfile.h) and the local saves
 * that use them: a new file gets 0666 less the umask, an overwritten file keeps its mode (a
 * 0600 file is not widened), a temporary file is recognisable by its name, the next save to
 * the same path removes those no writer holds (their lock free, older than the age bound)
 * and only those, whatever PID their name carries, and legal names up to 255 bytes work. The
 * public file stream (s3d_file_stream_*, what the Python local writer uses) and the local
 * checkpoint save go through the same temporary file and commit. A folder's sweep by target
 * name (s3d_tmpfile_sweep_dir) decodes both name forms and keeps what a writer holds. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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

/* Sets p's mtime seconds_ago in the past. */
static void age(const char *p, long seconds_ago)
{
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= seconds_ago;
    ts[1] = ts[0];
    CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
}

/* A child that holds an flock on p until it is killed: a live writer in another PID
 * namespace, or on another NFS client, whose PID means nothing here. */
static pid_t hold_lock(const char *p)
{
    int ready[2];
    char b;
    pid_t kid;
    CHECK(pipe(ready) == 0);
    kid = fork();
    CHECK(kid >= 0);
    if (kid == 0) {
        int fd = open(p, O_RDWR);
        if (fd < 0 || flock(fd, LOCK_EX) != 0)
            _exit(1);
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    close(ready[1]);
    CHECK(read(ready[0], &b, 1) == 1);
    close(ready[0]);
    return kid;
}

static void stop(pid_t kid)
{
    kill(kid, SIGKILL);
    CHECK(waitpid(kid, NULL, 0) == kid);
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

/* What s3d_tmpfile_sweep_dir offered: targets "shard-*" are taken, heads of shortened names
 * only with accept_heads. */
struct sweep_seen {
    int whole, heads, accept_heads;
    size_t head_len;
};

static int record_shard(void *user, const char *name, size_t len, int whole)
{
    struct sweep_seen *s = user;
    if (!whole) {
        s->heads++;
        s->head_len = len;
        return s->accept_heads && len > 0 && name[0] == 'a';
    }
    s->whole++;
    return len == strlen("shard-1.st") && strncmp(name, "shard-", 6) == 0;
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
    char dir[512], target[600], stale[700], live[700], other[700], young[700];
    pid_t holder;
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

    /* Leftovers: one whose lock is free and older than the age bound (60 s) is removed,
     * whatever its PID; one held by a live writer stays, even with a PID that runs nothing
     * here (before, the PID alone decided and it was removed); a young one stays (between a
     * writer's open and its flock); another target's and a look-alike stay. */
    snprintf(stale, sizeof(stale), "%s/.out.bin.s3d-tmp-%ld-0badf00d", dir, (long)getppid());
    snprintf(live, sizeof(live), "%s/.out.bin.s3d-tmp-%ld-1badf00d", dir, (long)dead);
    snprintf(other, sizeof(other), "%s/.other.bin.s3d-tmp-%ld-0badf00d", dir, (long)dead);
    snprintf(young, sizeof(young), "%s/.out.bin.s3d-tmp-%ld-2badf00d", dir, (long)dead);
    touch(stale);
    touch(live);
    touch(other);
    touch(young);
    age(stale, 120);
    age(live, 3600);
    age(other, 120);
    holder = hold_lock(live);
    CHECK(s3d_tmpfile_sweep(target) == 1);
    CHECK(!exists(stale) && exists(live) && exists(other) && exists(young));
    /* A live writer of this process, idle for minutes, keeps its file too. */
    CHECK_OK(s3d_tmpfile_create(target, 0, &t));
    age(t.path, 600);
    CHECK(s3d_tmpfile_sweep(target) == 0);
    CHECK(exists(t.path));
    s3d_tmpfile_discard(&t);
    /* Once the holder is gone, its file goes with the next create. */
    stop(holder);
    touch(stale);
    age(stale, 120);
    CHECK_OK(s3d_tmpfile_create(target, 0, &t));
    CHECK(!exists(stale) && !exists(live) && exists(young));
    s3d_tmpfile_discard(&t);
    /* S3D_STALE_TMP_AGE=0: no age bound. */
    setenv("S3D_STALE_TMP_AGE", "0", 1);
    CHECK(s3d_tmpfile_sweep(target) == 1);
    CHECK(!exists(young));
    unsetenv("S3D_STALE_TMP_AGE");
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
        age(stale, 120);
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

    /* Names of 230 to 255 bytes, legal everywhere, as targets: the temporary name is
     * shortened (first bytes of the name and a hash of it); before, it passed 255 bytes and
     * the create failed with "File name too long". The sweep finds the shortened names. */
    for (size_t len = 230; len <= 255; len += 5) {
        char name[300], longt[900];
        size_t n = len;
        memset(name, 'a', n);
        memcpy(name + 151, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 12);
        name[n] = '\0';
        snprintf(longt, sizeof(longt), "%s/%s", dir, name);
        CHECK_OK(s3d_tmpfile_create(longt, 0, &t));
        CHECK(strlen(strrchr(t.path, '/') + 1) <= 255);
        {
            /* Cut before a whole UTF-8 character (the 160-byte cut fell inside one). */
            const char *tilde = strrchr(t.path, '~');
            CHECK(tilde != NULL && (unsigned char)tilde[-1] == 0xa9);
        }
        CHECK(write(t.fd, "abc", 3) == 3);
        CHECK_OK(s3d_tmpfile_commit(&t, longt));
        CHECK(exists(longt));
        /* A killed writer's leftover of that name: found and removed. */
        CHECK_OK(s3d_tmpfile_create(longt, 0, &t));
        {
            char *p = strdup(t.path);
            close(t.fd);
            t.fd = -1;
            free(t.path);
            t.path = NULL;
            age(p, 120);
            CHECK(s3d_tmpfile_sweep(longt) == 1);
            CHECK(!exists(p));
            free(p);
        }
        CHECK(unlink(longt) == 0);
    }
    CHECK(count_tmp(dir) == 0);

    /* A folder's sweep by target (s3d_tmpfile_sweep_dir): the targets of leftovers no later
     * writer writes again (a killed sharded save's shards). The callback gets the target's
     * base name, or the head of a shortened one; only what it accepts and no writer holds is
     * removed. */
    {
        char longt[900], name[300], kept[900], loose[900], held[900];
        struct sweep_seen seen = {0};
        pid_t kid;
        memset(name, 'a', 240);
        name[240] = '\0';
        snprintf(longt, sizeof(longt), "%s/%s", dir, name);
        CHECK_OK(s3d_tmpfile_create(longt, 0, &t)); /* a shortened name */
        snprintf(kept, sizeof(kept), "%s", t.path);
        close(t.fd);
        t.fd = -1;
        free(t.path);
        t.path = NULL;
        snprintf(loose, sizeof(loose), "%s/.shard-1.st.s3d-tmp-%ld-0badf00d", dir, (long)dead);
        snprintf(held, sizeof(held), "%s/.shard-2.st.s3d-tmp-%ld-0badf00d", dir, (long)dead);
        touch(loose);
        touch(held);
        age(kept, 120);
        age(loose, 120);
        age(held, 120);
        kid = hold_lock(held);
        CHECK(s3d_tmpfile_sweep_dir(dir, record_shard, &seen) == 1); /* loose */
        CHECK(!exists(loose) && exists(held) && exists(kept));
        CHECK(seen.whole == 2 && seen.heads == 1);
        CHECK(seen.head_len >= 157 && seen.head_len <= 160);
        stop(kid);
        seen.accept_heads = 1;
        CHECK(s3d_tmpfile_sweep_dir(dir, record_shard, &seen) == 2);
        CHECK(!exists(held) && !exists(kept));
    }
    CHECK(count_tmp(dir) == 0);

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
    age(stale, 120);
    save_one(c, target);
    CHECK(!exists(stale));
    CHECK(count_tmp(dir) == 0);
    s3d_client_free(c);
    return 0;
}
