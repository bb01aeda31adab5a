/* tmpfile.h - the temporary file beside a target that a download or a local save writes, then
 * renames over the target when complete.
 *
 * Name: ".NAME.s3d-tmp-PID-RAND" in the target's folder (same file system, so the rename is
 * atomic; hidden; says who made it). A NAME of 237 bytes or more would make that longer than
 * the 255 bytes a file name may have: then ".HEAD~HASH.s3d-tmp-PID-RAND", HEAD the first 160
 * bytes of NAME (whole UTF-8 characters) and HASH 16 hex digits of FNV-1a-64 over NAME.
 * Mode: an existing target's permission bits are kept; a new file gets 0666 less the umask,
 * as any program's new file does. Lock: the writer holds an flock on it until commit or
 * discard. Leftovers: a process killed mid-write (SIGKILL, power loss) leaves its temporary
 * file; the next save or download to the same target removes those whose lock can be taken
 * and that are at least 60 s old (S3D_STALE_TMP_AGE seconds), and a sharded save, whose
 * shard names are new each time, those of its index's shards (s3d_tmpfile_sweep_dir). Not by PID: a
 * live writer in another PID namespace or on another NFS client has a PID that means nothing here,
 * but its lock is seen.
 *
 * Not thread-safe per object; distinct objects are independent. */
#ifndef S3D_ENGINE_TMPFILE_H
#define S3D_ENGINE_TMPFILE_H

#include <stdint.h>
#include <sys/types.h>
#include "common/compiler.h"

struct s3d_tmpfile {
    char *path; /* malloc'ed; NULL when none */
    int fd;     /* -1 when closed */
};

/* Removes stale temporary files of target (no lock held, old enough), then creates a new
 * one, flock'ed, open for
 * reading and writing, with the mode described above. extra_flags are added to
 * O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC. Returns 0 or an S3D_E* code (recorded); on failure
 * t->path is NULL and t->fd -1. */
S3D_NODISCARD int s3d_tmpfile_create(const char *target, int extra_flags, struct s3d_tmpfile *t);

/* fsync, close, rename over target, fsync of the folder (a file system that cannot sync a
 * folder, EINVAL, is not an error). The one commit of every file the library writes whole:
 * downloads, local checkpoint saves (fileio.h) and s3d_file_stream (transfer.h). On a failure
 * before the rename the temporary file is removed and target untouched; a failure of the
 * folder's fsync comes after the rename (target is the new file, maybe not yet durable).
 * t is emptied either way. */
S3D_NODISCARD int s3d_tmpfile_commit(struct s3d_tmpfile *t, const char *target);

/* Closes and removes the temporary file (if any). Idempotent. */
void s3d_tmpfile_discard(struct s3d_tmpfile *t);

/* The number of stale temporary files of target removed (tests; also called by create). */
int s3d_tmpfile_sweep(const char *target);

/* Whether a temporary file in a folder is one a sweep may look at: name[0..len) is the base
 * name of its target when whole is 1, or, for a shortened name (see the top), the HEAD it
 * keeps (the first 157 to 160 bytes of the target's name) when whole is 0. */
typedef int (*s3d_tmpfile_match_fn)(void *user, const char *name, size_t len, int whole);

/* As s3d_tmpfile_sweep for every temporary file in folder dir whose target match accepts,
 * whatever the target: the hidden files of writers that are gone (no lock held, at least
 * S3D_STALE_TMP_AGE old) of targets no later writer writes again, such as the shards of a
 * killed sharded save (each save's shard names are its own). Returns the number removed. */
int s3d_tmpfile_sweep_dir(const char *dir, s3d_tmpfile_match_fn match, void *user);

#endif
