/* xml.h - the event-driven XML reader under the S3 documents of s3doc.h (internal).
 *
 * A small hand-written reader (S3 responses use no DTDs, namespaces only as a default xmlns,
 * no mixed content that matters): elements, attributes (skipped), text, the five predefined
 * entities and numeric character references (decoded to UTF-8), comments, processing
 * instructions and the XML declaration (skipped), CDATA (taken as text). It refuses a body
 * over S3D_XML_MAX_BODY bytes, nesting deeper than S3D_XML_MAX_DEPTH and more than
 * S3D_XML_MAX_ELEMENTS elements, so a hostile server cannot make it use unbounded memory or
 * stack. Every structural problem (truncated document, mismatched tag, unknown entity, &#0;)
 * fails with S3D_EPROTO and a message that says what and at which byte offset. Element names
 * are matched without their namespace prefix. Thread-safe, no global state. */
#ifndef S3D_S3_XML_H
#define S3D_S3_XML_H

#include <stddef.h>
#include "common/compiler.h"

/* The one cap on an S3 XML body: the reader refuses more, and the HTTP layer caps a 2xx body
 * it buffers (s3d_http_req.body_max 0) at the same size. */
#define S3D_XML_MAX_BODY     (32u * 1024 * 1024)
#define S3D_XML_MAX_DEPTH    32
#define S3D_XML_MAX_ELEMENTS 1000000

/* One open element. */
struct s3d_xml_name {
    const char *p; /* local name (namespace prefix removed), not NUL-terminated */
    size_t len;
    const char *raw; /* full name as written, for matching the end tag */
    size_t raw_len;
};

/* What a document parser does with the elements: either hook may be NULL. */
struct s3d_xml_handler {
    /* depth: index of the new element in stack (0 = root). Return 0 or a negative code. */
    int (*on_start)(void *ctx, const struct s3d_xml_name *stack, int depth);
    int (*on_end)(void *ctx, const struct s3d_xml_name *stack, int depth, const char *text,
                  size_t len);
    void *ctx;
};

/* Reads s[0..len) and calls h's hooks in document order; doc names the response in error
 * messages. Returns 0, the first negative code a hook returned (the walk stops there), or
 * S3D_ETOOBIG / S3D_EPROTO / S3D_ENOMEM (recorded). */
S3D_NODISCARD int s3d_xml_walk(const char *doc, const char *s, size_t len,
                               const struct s3d_xml_handler *h);

/* 1 when n's local name is exactly the NUL-terminated s. */
int s3d_xml_name_is(const struct s3d_xml_name *n, const char *s);

/* 1 when the document's root element has the local name `name`, 0 otherwise (including
 * malformed or empty bodies). Cheap: skips the declaration, comments and processing
 * instructions and looks at the first element only. Records nothing. */
int s3d_xml_root_is(const char *body, size_t len, const char *name);

/* XML whitespace (space, tab, CR, LF). */
static inline int s3d_xml_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

#endif
