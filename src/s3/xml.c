/* xml.c - a small event-driven XML reader for S3 responses.
 *
 * s3d_xml_walk() tokenizes the body and calls on_start / on_end with the stack of open element
 * names, handing on_end the decoded text found directly inside the element since its last
 * child. The S3 documents are handlers over that stack (s3doc.c), so no tree is ever built:
 * memory is the text of one element plus the handler's result arrays. */
#include "s3/xml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/dynbuf.h"
#include "common/error.h"

static int name_char(unsigned char c)
{
    return c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == ':';
}

int s3d_xml_name_is(const struct s3d_xml_name *n, const char *s)
{
    size_t l = strlen(s);
    return n->len == l && memcmp(n->p, s, l) == 0;
}

static int perr(const char *doc, size_t off, const char *what)
{
    return s3d_fail(S3D_EPROTO, "malformed XML in %s response at byte %zu: %s", doc, off, what);
}

/* Appends the UTF-8 encoding of code point cp. */
static int put_utf8(struct s3d_dynbuf *b, unsigned long cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return s3d_dynbuf_append(b, u, n);
}

/* Decodes the entity at s[*i] ('&') into b. Returns 0; -1 for a malformed or unknown entity
 * (the caller reports it: dynbuf failures are S3D_ETOOBIG / S3D_ENOMEM, never -1); or the
 * dynbuf's code. */
static int decode_entity(const char *s, size_t len, size_t *i, struct s3d_dynbuf *b)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    size_t p = *i + 1, k;
    for (k = 0; k < S3D_ARRAY_LEN(named); k++) {
        size_t n = strlen(named[k].name);
        if (len - p >= n && memcmp(s + p, named[k].name, n) == 0) {
            *i = p + n;
            return s3d_dynbuf_append(b, &named[k].c, 1);
        }
    }
    if (p < len && s[p] == '#') {
        unsigned long cp = 0;
        int hex = 0, digits = 0;
        p++;
        if (p < len && s[p] == 'x') {
            hex = 1;
            p++;
        }
        for (; p < len && s[p] != ';'; p++, digits++) {
            char c = s[p];
            int v;
            if (c >= '0' && c <= '9')
                v = c - '0';
            else if (hex && c >= 'a' && c <= 'f')
                v = c - 'a' + 10;
            else if (hex && c >= 'A' && c <= 'F')
                v = c - 'A' + 10;
            else
                return -1;
            cp = cp * (hex ? 16 : 10) + (unsigned long)v;
            if (cp > 0x10FFFF)
                return -1;
        }
        /* &#0; would cut a C string short; surrogates are not characters. */
        if (p >= len || digits == 0 || cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
            return -1;
        *i = p + 1;
        return put_utf8(b, cp);
    }
    return -1;
}

static const char *find(const char *s, size_t len, size_t from, const char *needle)
{
    size_t n = strlen(needle);
    const char *p;
    if (from > len)
        return NULL;
    p = memmem(s + from, len - from, needle, n);
    return p;
}

/* The walk's state: the body, the read position, the open elements and the text gathered
 * directly inside the innermost one since its last child. */
struct walk {
    const char *doc; /* response name for messages */
    const char *s;
    size_t len;
    size_t i; /* next byte to read */
    size_t elements;
    int depth, seen_root;
    struct s3d_dynbuf text;
    const struct s3d_xml_handler *h;
    struct s3d_xml_name stack[S3D_XML_MAX_DEPTH];
};

static int text_fail(const struct walk *w, int rc)
{
    return s3d_fail(rc, "%s response: element text over the limit", w->doc);
}

/* The body as a whole: within the cap, no NUL byte; skips a UTF-8 byte order mark. */
static int walk_check_body(struct walk *w)
{
    const char *nul;
    if (w->len > S3D_XML_MAX_BODY)
        return s3d_fail(S3D_ETOOBIG, "%s response body is %zu bytes, over the limit of %u", w->doc,
                        w->len, S3D_XML_MAX_BODY);
    nul = memchr(w->s, '\0', w->len);
    if (nul != NULL)
        return perr(w->doc, (size_t)(nul - w->s), "NUL byte");
    if (w->len >= 3 && memcmp(w->s, "\xEF\xBB\xBF", 3) == 0)
        w->i = 3;
    return 0;
}

/* Character data at w->i (not '<'): one byte of whitespace outside the root, else an entity
 * or a run of plain text added to the element's text. */
static int walk_text(struct walk *w)
{
    const char *s = w->s;
    int rc;
    if (w->depth == 0) {
        if (!s3d_xml_is_ws(s[w->i]))
            return perr(w->doc, w->i, "text outside the root element");
        w->i++;
        return 0;
    }
    if (s[w->i] == '&') {
        size_t at = w->i;
        rc = decode_entity(s, w->len, &w->i, &w->text);
        if (rc == -1)
            return perr(w->doc, at, "unknown or malformed entity");
        return rc < 0 ? text_fail(w, rc) : 0;
    }
    {
        size_t run = w->i;
        while (run < w->len && s[run] != '<' && s[run] != '&')
            run++;
        if ((rc = s3d_dynbuf_append(&w->text, s + w->i, run - w->i)) < 0)
            return text_fail(w, rc);
        w->i = run;
    }
    return 0;
}

/* Skips markup opened at w->i (open_len bytes) up to and past `close`: a comment or a
 * processing instruction (the XML declaration among them). */
static int walk_skip(struct walk *w, size_t open_len, const char *close, const char *what)
{
    const char *e = find(w->s, w->len, w->i + open_len, close);
    if (e == NULL)
        return perr(w->doc, w->i, what);
    w->i = (size_t)(e - w->s) + strlen(close);
    return 0;
}

/* <![CDATA[...]]> at w->i: its bytes are element text, taken as they are. */
static int walk_cdata(struct walk *w)
{
    const char *s = w->s;
    const char *e = find(s, w->len, w->i + 9, "]]>");
    int rc;
    if (w->depth == 0 || e == NULL)
        return perr(w->doc, w->i, w->depth == 0 ? "CDATA outside the root" : "unterminated CDATA");
    if ((rc = s3d_dynbuf_append(&w->text, s + w->i + 9, (size_t)(e - (s + w->i + 9)))) < 0)
        return text_fail(w, rc);
    w->i = (size_t)(e - s) + 3;
    return 0;
}

/* </name> at w->i: must close the innermost open element; hands on_end its text. */
static int walk_end_tag(struct walk *w)
{
    const char *s = w->s;
    size_t n0 = w->i + 2, n1 = n0, i;
    const struct s3d_xml_name *top;
    int rc;
    while (n1 < w->len && name_char((unsigned char)s[n1]))
        n1++;
    i = n1;
    while (i < w->len && s3d_xml_is_ws(s[i]))
        i++;
    if (i >= w->len || s[i] != '>')
        return perr(w->doc, n0,
                    i >= w->len ? "document truncated in an end tag" : "malformed end tag");
    w->i = i + 1;
    if (w->depth == 0)
        return perr(w->doc, n0, "end tag without a start tag");
    top = &w->stack[w->depth - 1];
    if (top->raw_len != n1 - n0 || memcmp(top->raw, s + n0, n1 - n0) != 0)
        return perr(w->doc, n0, "end tag does not match the open element");
    if (w->h->on_end && (rc = w->h->on_end(w->h->ctx, w->stack, w->depth - 1,
                                           w->text.data ? w->text.data : "", w->text.len)) < 0)
        return rc;
    s3d_dynbuf_reset(&w->text);
    w->depth--;
    return 0;
}

/* The attributes of a start tag whose name began at n0, from w->i to past its '>' or "/>"
 * (*empty set for the latter): skipped, but their quoting must be sound. */
static int walk_attributes(struct walk *w, size_t n0, int *empty)
{
    const char *s = w->s;
    size_t len = w->len, i = w->i;
    for (;;) {
        while (i < len && s3d_xml_is_ws(s[i]))
            i++;
        if (i >= len)
            return perr(w->doc, n0, "document truncated in a start tag");
        if (s[i] == '>') {
            i++;
            break;
        }
        if (s[i] == '/' && i + 1 < len && s[i + 1] == '>') {
            i += 2;
            *empty = 1;
            break;
        }
        while (i < len && name_char((unsigned char)s[i]))
            i++;
        while (i < len && s3d_xml_is_ws(s[i]))
            i++;
        if (i >= len || s[i] != '=')
            return perr(w->doc, i,
                        i >= len ? "document truncated in a start tag" : "malformed attribute");
        i++;
        while (i < len && s3d_xml_is_ws(s[i]))
            i++;
        if (i >= len || (s[i] != '"' && s[i] != '\''))
            return perr(w->doc, i, "attribute value without quotes");
        {
            const char *q = memchr(s + i + 1, s[i], len - i - 1);
            if (q == NULL)
                return perr(w->doc, i, "unterminated attribute value");
            i = (size_t)(q - s) + 1;
        }
    }
    w->i = i;
    return 0;
}

/* Pushes the element named s[n0..n1) after the caps and the single-root rule, and calls
 * on_start. */
static int walk_push(struct walk *w, size_t n0, size_t n1)
{
    struct s3d_xml_name *n;
    const char *colon;
    if (w->depth == 0 && w->seen_root)
        return perr(w->doc, n0, "a second root element");
    if (w->depth >= S3D_XML_MAX_DEPTH)
        return perr(w->doc, n0, "elements nested too deep");
    if (++w->elements > S3D_XML_MAX_ELEMENTS)
        return perr(w->doc, n0, "too many elements");
    w->seen_root = 1;
    n = &w->stack[w->depth];
    n->raw = w->s + n0;
    n->raw_len = n1 - n0;
    colon = memchr(w->s + n0, ':', n1 - n0);
    n->p = colon ? colon + 1 : w->s + n0;
    n->len = n1 - (size_t)(n->p - w->s);
    s3d_dynbuf_reset(&w->text);
    return w->h->on_start ? w->h->on_start(w->h->ctx, w->stack, w->depth) : 0;
}

/* <name ...> or <name .../> at w->i: opens an element; an empty one is closed at once. */
static int walk_start_tag(struct walk *w)
{
    size_t n0 = w->i + 1, n1 = n0;
    int empty = 0, rc;
    while (n1 < w->len && name_char((unsigned char)w->s[n1]))
        n1++;
    if (n1 == n0)
        return perr(w->doc, w->i, n1 >= w->len ? "document truncated" : "malformed tag");
    w->i = n1;
    if ((rc = walk_attributes(w, n0, &empty)) < 0 || (rc = walk_push(w, n0, n1)) < 0)
        return rc;
    w->depth++;
    if (empty) {
        if (w->h->on_end && (rc = w->h->on_end(w->h->ctx, w->stack, w->depth - 1, "", 0)) < 0)
            return rc;
        w->depth--;
    }
    return 0;
}

/* Markup at w->i ('<'): a comment, a processing instruction, CDATA, an end tag or a start
 * tag; DTDs and other declarations are refused (so no entity expansion). */
static int walk_markup(struct walk *w)
{
    const char *at = w->s + w->i;
    size_t left = w->len - w->i;
    if (left >= 4 && memcmp(at, "<!--", 4) == 0)
        return walk_skip(w, 4, "-->", "unterminated comment");
    if (left >= 2 && at[1] == '?')
        return walk_skip(w, 2, "?>", "unterminated processing instruction");
    if (left >= 9 && memcmp(at, "<![CDATA[", 9) == 0)
        return walk_cdata(w);
    if (left >= 2 && at[1] == '!')
        return perr(w->doc, w->i, "DTDs and declarations are not accepted");
    if (left >= 2 && at[1] == '/')
        return walk_end_tag(w);
    return walk_start_tag(w);
}

int s3d_xml_walk(const char *doc, const char *s, size_t len, const struct s3d_xml_handler *h)
{
    struct walk w;
    int rc;

    w.doc = doc;
    w.s = s;
    w.len = len;
    w.i = 0;
    w.elements = 0;
    w.depth = 0;
    w.seen_root = 0;
    w.h = h;
    s3d_dynbuf_init(&w.text, S3D_XML_MAX_BODY);
    if ((rc = walk_check_body(&w)) < 0)
        goto out;
    while (w.i < len) {
        rc = s[w.i] == '<' ? walk_markup(&w) : walk_text(&w);
        if (rc < 0)
            goto out;
    }
    if (w.depth > 0)
        rc = perr(doc, len, "document truncated (unclosed elements)");
    else if (!w.seen_root)
        rc = perr(doc, len, "no root element");
out:
    s3d_dynbuf_free(&w.text);
    return rc;
}

int s3d_xml_root_is(const char *body, size_t len, const char *name)
{
    size_t nl = strlen(name);
    size_t i = 0;
    if (body == NULL)
        return 0;
    if (len >= 3 && memcmp(body, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    for (;;) {
        while (i < len && s3d_xml_is_ws(body[i]))
            i++;
        if (i + 1 >= len || body[i] != '<')
            return 0;
        if (body[i + 1] == '?' || (len - i >= 4 && memcmp(body + i, "<!--", 4) == 0)) {
            const char *e = find(body, len, i + 2, body[i + 1] == '?' ? "?>" : "-->");
            if (e == NULL)
                return 0;
            i = (size_t)(e - body) + (body[i + 1] == '?' ? 2 : 3);
            continue;
        }
        break;
    }
    {
        size_t n0 = i + 1, n1 = n0, start;
        while (n1 < len && name_char((unsigned char)body[n1]))
            n1++;
        start = n0;
        for (size_t k = n0; k < n1; k++)
            if (body[k] == ':')
                start = k + 1;
        return n1 - start == nl && memcmp(body + start, name, nl) == 0 && n1 < len &&
               (s3d_xml_is_ws(body[n1]) || body[n1] == '>' || body[n1] == '/');
    }
}
