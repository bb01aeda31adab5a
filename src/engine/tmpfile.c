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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"

#define TMP_TAG ".s3d-tmp-"

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

/* The PID in ".BASE.s3d-tmp-PID-RAND" when name is a temporary file of base, else 0. */
static long tmp_owner(const char *name, const char *base)
{
    size_t bl = strlen(base), tl = strlen(TMP_TAG);
    char *end;
    long pid;
    if (name[0] != '.' || strncmp(name + 1, base, bl) != 0 ||
        strncmp(name + 1 + bl, TMP_TAG, tl) != 0)
        return 0;
    name += 1 + bl + tl;
    if (*name < '0' || *name > '9')
        return 0;
    pid = strtol(name, &end, 10);
    if (*end != '-' || pid <= 0)
        return 0;
    return pid;
}

int s3d_tmpfile_sweep(const char *target)
{
    char *dir = NULL, *base = NULL;
    struct dirent *e;
    DIR *d;
    int n = 0;

    if (split_path(target, &dir, &base) < 0) {
        s3d_clear_error();
        return 0;
    }
    d = opendir(dir);
    while (d != NULL && (e = readdir(d)) != NULL) {
        long pid = tmp_owner(e->d_name, base);
        /* kill(pid, 0): ESRCH means no such process here; EPERM means it lives. */
        if (pid == 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
            S3D_INFO("removed %s/%s, left by process %ld that no longer runs", dir, e->d_name, pid);
            n++;
        }
    }
    if (d != NULL)
        closedir(d);
    free(dir);
    free(base);
    return n;
}

int s3d_tmpfile_create(const char *target, int extra_flags, struct s3d_tmpfile *t)
{
    static _Atomic uint32_t counter;
    char *dir = NULL, *base = NULL;
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
    cap = strlen(dir) + strlen(base) + 64;
    t->path = malloc(cap);
    if (t->path == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory for a temporary name beside %s", target);
        goto out;
    }
    for (tries = 0; tries < 100; tries++) {
        uint32_t r = (uint32_t)time(NULL) * 2654435761u ^ (uint32_t)getpid() * 40503u ^
                     (uint32_t)(uintptr_t)t ^ ++counter * 2246822519u;
        snprintf(t->path, cap, "%s/.%s" TMP_TAG "%ld-%08x", dir, base, (long)getpid(), r);
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
