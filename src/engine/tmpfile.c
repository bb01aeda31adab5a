/* tmpfile.c - temporary files beside their target (tmpfile.h). */
#include "engine/tmpfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"

#define TMP_TAG ".s3d-tmp-"
/* The longest name a file system takes (Linux's NAME_MAX for ext4, xfs, btrfs, NFS). */
#define TMP_NAME_MAX 255u
/* What follows the prefix: "PID-RAND", PID at most 10 digits, RAND 8 hex digits. */
#define TMP_SUFFIX_MAX (10u + 1u + 8u)
/* How much of a long base name a shortened prefix keeps, before its hash. */
#define TMP_KEEP 160u
/* A temporary file whose lock can be taken is removed only once it is this old: it covers
 * the instant between a writer's open and its flock, and writers that hold no lock (versions
 * before the lock) while they write. S3D_STALE_TMP_AGE (seconds) overrides, for tests. */
#define TMP_STALE_AGE_DEFAULT 60

/* FNV-1a, 64 bits: a short stable name for a long one (not a security boundary). */
static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The temporary-file prefix of base, into out (cap >= TMP_NAME_MAX + 1): ".BASE.s3d-tmp-", or,
 * when a name of that prefix and the longest suffix would pass TMP_NAME_MAX bytes (a legal
 * name of 237 bytes or more), ".HEAD~HASH.s3d-tmp-" with HEAD the first TMP_KEEP bytes of
 * base (cut at a UTF-8 character boundary) and HASH 16 hex digits of the whole base. */
static void tmp_prefix(const char *base, char *out, size_t cap)
{
    size_t bl = strlen(base), keep = TMP_KEEP;
    if (1 + bl + strlen(TMP_TAG) + TMP_SUFFIX_MAX <= TMP_NAME_MAX) {
        snprintf(out, cap, ".%s" TMP_TAG, base);
        return;
    }
    while (keep > 0 && ((unsigned char)base[keep] & 0xC0) == 0x80)
        keep--;
    snprintf(out, cap, ".%.*s~%016llx" TMP_TAG, (int)keep, base, (unsigned long long)fnv1a64(base));
}

/* Seconds a lockable temporary file must be old before a sweep removes it. */
static long stale_age(void)
{
    int64_t v;
    if (s3d_env_int("S3D_STALE_TMP_AGE", 0, INT32_MAX, &v) == 1)
        return (long)v;
    return TMP_STALE_AGE_DEFAULT;
}

/* Splits target into its folder ("." when none) and base name; both malloc'ed. */
static int split_path(const char *target, char **dir, char **base)
{
    const char *slash = strrchr(target, '/');
    *dir = *base = NULL;
    if (slash == NULL) {
        *dir = strdup(".");
        *base = strdup(target);
    } else {
        size_t dl = (size_t)(slash - target);
        *dir = dl == 0 ? strdup("/") : strndup(target, dl);
        *base = strdup(slash + 1);
    }
    if (*dir == NULL || *base == NULL) {
        free(*dir);
        free(*base);
        *dir = *base = NULL;
        return s3d_fail(S3D_ENOMEM, "out of memory for a temporary name beside %s", target);
    }
    return 0;
}

/* The PID in "PREFIX PID-RAND" when name is a temporary file of the prefix, else 0. */
static long tmp_owner(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    char *end;
    long pid;
    if (strncmp(name, prefix, pl) != 0)
        return 0;
    name += pl;
    if (*name < '0' || *name > '9')
        return 0;
    pid = strtol(name, &end, 10);
    if (*end != '-' || pid <= 0)
        return 0;
    return pid;
}

/* Whether a leftover is a dead writer's is decided by its lock, not its PID: a PID says
 * nothing about a process in another PID namespace (a container) or on another machine
 * sharing the folder over NFS, and this sweep removed the temporary files of live downloads
 * there. Every writer holds an flock on its file until commit or discard (s3d_tmpfile_create:
 * downloads, local saves, Python's s3direct.writer through s3d_file_stream); flock conflicts across
 * namespaces, and NFS clients carry it to the server as a lock of the whole file. So a file is
 * removed only when its lock can be taken here (and it is held while it is unlinked), and it is
 * older than stale_age(). A file whose lock cannot be tried (a file system without locks) is kept.
 * Returns 1 when name (a temporary file of process pid in d) was removed. */
static int sweep_one(DIR *d, const char *dir, const char *name, long pid, long age, time_t now)
{
    struct stat st;
    int removed = 0;
    int fd = openat(dirfd(d), name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime >= age &&
        flock(fd, LOCK_EX | LOCK_NB) == 0 && unlinkat(dirfd(d), name, 0) == 0) {
        S3D_INFO("removed %s/%s, left by a writer that is gone (process %ld, no lock held, "
                 "%lld s old)",
                 dir, name, pid, (long long)(now - st.st_mtime));
        removed = 1;
    }
    close(fd); /* drops the lock */
    return removed;
}

int s3d_tmpfile_sweep(const char *target)
{
    char *dir = NULL, *base = NULL, prefix[TMP_NAME_MAX + 1];
    struct dirent *e;
    DIR *d;
    int n = 0;
    long age = stale_age();
    time_t now = time(NULL);

    if (split_path(target, &dir, &base) < 0) {
        s3d_clear_error();
        return 0;
    }
    tmp_prefix(base, prefix, sizeof(prefix));
    d = opendir(dir);
    while (d != NULL && (e = readdir(d)) != NULL) {
        long pid = tmp_owner(e->d_name, prefix);
        if (pid != 0)
            n += sweep_one(d, dir, e->d_name, pid, age, now);
    }
    if (d != NULL)
        closedir(d);
    free(dir);
    free(base);
    return n;
}

/* Splits a temporary file's name ".BASE.s3d-tmp-PID-RAND" (the last TMP_TAG) into its PID
 * (returned; 0 when name is not of that form) and BASE, name[1, 1 + *len). *whole is 0 when
 * BASE has the shortened form "HEAD~HASH" (HEAD as tmp_prefix keeps it, 157 to TMP_KEEP
 * bytes): *len is then HEAD's. */
static long tmp_parse(const char *name, size_t *len, int *whole)
{
    const char *tag = NULL, *p = name;
    char prefix[TMP_NAME_MAX + 1];
    size_t bl, hl;
    long pid;
    if (name[0] != '.')
        return 0;
    while ((p = strstr(p + 1, TMP_TAG)) != NULL)
        tag = p;
    if (tag == NULL || tag == name + 1 || (size_t)(tag - name) + strlen(TMP_TAG) > TMP_NAME_MAX)
        return 0;
    memcpy(prefix, name, (size_t)(tag - name));
    strcpy(prefix + (tag - name), TMP_TAG);
    pid = tmp_owner(name, prefix);
    if (pid == 0)
        return 0;
    bl = (size_t)(tag - name) - 1;
    hl = bl >= 17 ? bl - 17 : 0;
    *whole = !(hl + 3 >= TMP_KEEP && hl <= TMP_KEEP && name[1 + hl] == '~' &&
               strspn(name + 2 + hl, "0123456789abcdef") >= 16);
    *len = *whole ? bl : hl;
    return pid;
}

int s3d_tmpfile_sweep_dir(const char *dir, s3d_tmpfile_match_fn match, void *user)
{
    struct dirent *e;
    DIR *d = opendir(dir);
    int n = 0;
    long age = stale_age();
    time_t now = time(NULL);

    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t len = 0;
        int whole = 1;
        long pid = tmp_parse(e->d_name, &len, &whole);
        if (pid != 0 && match(user, e->d_name + 1, len, whole))
            n += sweep_one(d, dir, e->d_name, pid, age, now);
    }
    if (d != NULL)
        closedir(d);
    return n;
}

int s3d_tmpfile_create(const char *target, int extra_flags, struct s3d_tmpfile *t)
{
    static _Atomic uint32_t counter;
    char *dir = NULL, *base = NULL, prefix[TMP_NAME_MAX + 1];
    struct stat st;
    size_t cap;
    int keep_mode, rc, tries;

    t->path = NULL;
    t->fd = -1;
    (void)s3d_tmpfile_sweep(target);
    rc = split_path(target, &dir, &base);
    if (rc < 0)
        return rc;
    keep_mode = stat(target, &st) == 0 && S_ISREG(st.st_mode);
    tmp_prefix(base, prefix, sizeof(prefix));
    cap = strlen(dir) + 1 + strlen(prefix) + TMP_SUFFIX_MAX + 1;
    t->path = malloc(cap);
    if (t->path == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory for a temporary name beside %s", target);
        goto out;
    }
    for (tries = 0; tries < 100; tries++) {
        uint32_t r = (uint32_t)time(NULL) * 2654435761u ^ (uint32_t)getpid() * 40503u ^
                     (uint32_t)(uintptr_t)t ^ ++counter * 2246822519u;
        snprintf(t->path, cap, "%s/%s%ld-%08x", dir, prefix, (long)getpid(), r);
        /* 0666: the umask decides, as for any new file (mkstemp's 0600 does not). */
        t->fd = open(t->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | extra_flags, 0666);
        if (t->fd >= 0 || errno != EEXIST)
            break;
    }
    if (t->fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
        /* The common case deserves its own words (the folder is not created here, as neither
         * torch.save nor the AWS CLI creates it). */
        rc = s3d_fail(S3D_ENOENT, "write %s: folder %s does not exist", target, dir);
        free(t->path);
        t->path = NULL;
        goto out;
    }
    if (t->fd < 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "create a temporary file for %s (%s): %s", target,
                      t->path, strerror(errno));
        free(t->path);
        t->path = NULL;
        goto out;
    }
    /* Held until the file is renamed or removed: the sign that it is being written (see
     * s3d_tmpfile_sweep). A file system without locks leaves it to the age bound. */
    if (flock(t->fd, LOCK_EX | LOCK_NB) != 0)
        S3D_DEBUG("flock %s: %s; without the lock only its age protects it from other "
                  "writers' sweeps",
                  t->path, strerror(errno));
    /* Overwriting keeps the target's permissions: a 0600 file stays 0600. */
    if (keep_mode && fchmod(t->fd, st.st_mode & 07777) != 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "chmod %s: %s", t->path, strerror(errno));
        s3d_tmpfile_discard(t);
        goto out;
    }
    rc = 0;
out:
    free(dir);
    free(base);
    return rc;
}

int s3d_tmpfile_commit(struct s3d_tmpfile *t, const char *target)
{
    char *dir = NULL, *base = NULL;
    int rc = 0, dfd;

    if (t->fd < 0 || t->path == NULL)
        return s3d_fail(S3D_EINVAL, "commit %s: no temporary file", target);
    if (fsync(t->fd) != 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "fsync %s: %s", t->path, strerror(errno));
        goto fail;
    }
    if (close(t->fd) != 0) {
        t->fd = -1;
        rc = s3d_fail(s3d_err_from_errno(errno), "close %s: %s", t->path, strerror(errno));
        goto fail;
    }
    t->fd = -1;
    if (rename(t->path, target) != 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "rename %s to %s: %s", t->path, target,
                      strerror(errno));
        goto fail;
    }
    free(t->path);
    t->path = NULL;
    /* The rename is durable only once the folder is synced. A folder that cannot be opened
     * for it, or a file system that cannot sync folders (EINVAL), leaves it to the file
     * system, as every fsync-then-rename writer does. */
    rc = split_path(target, &dir, &base);
    if (rc == 0) {
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) != 0 && errno != EINVAL)
                rc = s3d_fail(s3d_err_from_errno(errno), "fsync folder of %s: %s", target,
                              strerror(errno));
            close(dfd);
        }
    }
    free(dir);
    free(base);
    return rc;
fail:
    s3d_tmpfile_discard(t);
    return rc;
}

void s3d_tmpfile_discard(struct s3d_tmpfile *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->path != NULL)
        unlink(t->path);
    free(t->path);
    t->path = NULL;
}
