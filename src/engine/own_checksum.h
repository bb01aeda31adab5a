/* own_checksum.h - the full-object CRC-32C s3direct stores with every object it uploads, and
 * checks whole-object downloads against (docs/internals/engine.md, "Checksums of objects
 * s3direct wrote"). Write side: a single PUT sends it as user metadata (xfer.c's feed_single);
 * a multipart upload combines its parts' CRC-32Cs into it, checks them against a copy's
 * source first, and tags the completed object with it (s3d_own_tag). Read side: which
 * checksum a download is checked against (s3d_own_object_checksum), and the check
 * (s3d_own_verify). The S3 requests themselves (user metadata, tags) are in s3/ops.h.
 *
 * Threads: any thread; nothing here keeps state between calls. */
#ifndef S3D_ENGINE_OWN_CHECKSUM_H
#define S3D_ENGINE_OWN_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "s3/ops.h"
#include "s3direct/client.h"
#include "s3direct/object.h"

/* ---- write side: multipart uploads --------------------------------------------------------- */

/* The object's CRC32C: the accepted parts' parts[0..n) (sorted by number) combined. */
uint32_t s3d_own_parts_crc(const struct s3d_op_part *parts, size_t n);

/* 0 when parts[0..n) (sorted) combine to the CRC32C the caller expects (expect_crc32c, base64),
 * or none is expected (NULL, "" or not a CRC32C); else S3D_ECHECKSUM (recorded), naming
 * s3://bucket/key. */
S3D_NODISCARD int s3d_own_check_expected(const char *bucket, const char *key,
                                         const struct s3d_op_part *parts, size_t n,
                                         const char *expect_crc32c);

/* After a multipart upload of parts[0..n) (sorted) completed with etag (Complete's; "" when
 * the server sent none): stores the object's CRC-32C as its S3D_OP_CRC_TAG tag: the parts'
 * combined (object_crc32c NULL), or object_crc32c (base64: a server-side copy's source's; ""
 * = not known, no tag). Never fails: the object is in place, and one the tag cannot be stored
 * on is left without it (logged at debug level). */
void s3d_own_tag(struct s3d_client *c, const char *bucket, const char *key,
                 const struct s3d_op_part *parts, size_t n, const char *etag,
                 const char *object_crc32c);

/* ---- read side: whole-object downloads ------------------------------------------------------ */

/* The CRC32C a download is checked against, and where it came from, for the debug log. */
struct s3d_want_crc {
    char b64[S3D_CRC32C_B64_LEN]; /* "" when there is none to check */
    const char *source;
};

/* The full-object CRC32C a whole-object download of s3://bucket/key is checked against, into
 * w ("" when there is none): first is what the download's first response told of the object,
 * sums its checksum fields (s3d_op_sums), first_was_whole 1 when that response carried the
 * whole object. May send a HEAD (which must see first's ETag, else S3D_ECHANGED) and a
 * GetObjectTagging; returns 0 or their error. The order of the sources: own_checksum.c. */
S3D_NODISCARD int s3d_own_object_checksum(struct s3d_client *c, const char *bucket, const char *key,
                                          const struct s3d_object_info *first,
                                          const struct s3d_op_sums *sums, int first_was_whole,
                                          struct s3d_want_crc *w);

/* 0 when w has no checksum to check or got (the CRC32C of the bytes received) matches it,
 * else S3D_ECHECKSUM (recorded), naming s3://bucket/key. */
S3D_NODISCARD int s3d_own_verify(const char *bucket, const char *key, const struct s3d_want_crc *w,
                                 uint32_t got);

#endif
