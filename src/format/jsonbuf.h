/* jsonbuf.h - serializing jansson values into a capped buffer (shared by the header builder
 * and the index builder). */
#ifndef S3D_FORMAT_JSONBUF_H
#define S3D_FORMAT_JSONBUF_H

#include <jansson.h>

#include "common/dynbuf.h"
#include "common/compiler.h"

/* Appends the JSON text of root (jansson dump flags) to out. Returns 0, S3D_ETOOBIG when out's
 * cap is reached, or S3D_ENOMEM. Records no error: the caller names what was being built. */
S3D_NODISCARD int s3d_json_dump_to(const json_t *root, size_t flags, struct s3d_dynbuf *out);

#endif
