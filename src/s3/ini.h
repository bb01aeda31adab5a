/* ini.h - the AWS shared files (internal): where they are, reading one with a cap, and their
 * INI syntax. The syntax rules (sections, the nested "s3 =" form, comments, case) are written
 * in config.h, which resolves the settings read here. */
#ifndef S3D_S3_INI_H
#define S3D_S3_INI_H

#include <stddef.h>
#include "common/compiler.h"

#define S3D_CONFIG_MAX_LINE 4096
#define S3D_CONFIG_MAX_FILE (1024 * 1024)

/* A blank inside an INI line: space or tab. */
static inline int s3d_ini_is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Reads a shared file (at most S3D_CONFIG_MAX_FILE bytes) into *out (malloc'ed,
 * NUL-terminated). Returns 0, 1 when the file does not exist, or S3D_ECONFIG / S3D_ENOMEM. */
S3D_NODISCARD int s3d_ini_read_file(const char *path, char **out, size_t *out_len);

/* Path of a shared file: the variable envname (with "~/" expanded from HOME) or
 * ~/.aws/basename; *out malloc'ed, or NULL when there is no HOME to look in. Returns 0 or
 * S3D_ENOMEM. */
S3D_NODISCARD int s3d_ini_file_path(const char *envname, const char *basename, char **out);

/* ---- INI parsing (also run by the fuzz target) ---------------------------------------- */

/* Called for each "key = value" line: section is the section header's text with blanks
 * trimmed ("default", "profile dev"), sub is the nested sub-section key ("s3") or NULL, key
 * and value are trimmed (value may be ""). All NUL-terminated and valid only during the call.
 * Return 0 to go on, or a negative S3D_E* code (after s3d_fail) to stop. */
typedef int (*s3d_ini_fn)(void *user, const char *section, const char *sub, const char *key,
                          const char *value, int line);

/* Parses an INI text of len bytes (it need not be NUL-terminated). name is used in error
 * messages ("NAME:LINE: ..."). Returns 0, S3D_ECONFIG for a malformed line (a line that is
 * neither a section header, a key = value pair, a comment nor blank; a key before any section;
 * an unterminated "[" header; a line over S3D_CONFIG_MAX_LINE), or the callback's code. */
S3D_NODISCARD int s3d_ini_parse(const char *text, size_t len, const char *name, s3d_ini_fn fn,
                                void *user);

#endif
