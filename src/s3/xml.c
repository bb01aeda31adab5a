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

int s3d_xml_walk(const char *doc, const char *s, size_t len, const struct s3d_xml_handler *h)
{
    struct s3d_xml_name stack[S3D_XML_MAX_DEPTH];
    struct s3d_dynbuf text;
    size_t i = 0, elements = 0;
    int depth = 0, seen_root = 0, rc = 0;

    s3d_dynbuf_init(&text, S3D_XML_MAX_BODY);
    if (len > S3D_XML_MAX_BODY) {
        rc = s3d_fail(S3D_ETOOBIG, "%s response body is %zu bytes, over the limit of %u", doc, len,
                      S3D_XML_MAX_BODY);
        goto out;
    }
    if (memchr(s, '\0', len) != NULL) {
        rc = perr(doc, (size_t)((const char *)memchr(s, '\0', len) - s), "NUL byte");
        goto out;
    }
    if (len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    while (i < len) {
        if (s[i] != '<') {
            /* Character data: only whitespace is allowed outside the root. */
            if (depth == 0) {
                if (!s3d_xml_is_ws(s[i])) {
                    rc = perr(doc, i, "text outside the root element");
                    goto out;
                }
                i++;
                continue;
            }
            if (s[i] == '&') {
                size_t at = i;
                rc = decode_entity(s, len, &i, &text);
                if (rc == -1) {
                    rc = perr(doc, at, "unknown or malformed entity");
                    goto out;
                }
                if (rc < 0) {
                    rc = s3d_fail(rc, "%s response: element text over the limit", doc);
                    goto out;
                }
            } else {
                size_t run = i;
                while (run < len && s[run] != '<' && s[run] != '&')
                    run++;
                if ((rc = s3d_dynbuf_append(&text, s + i, run - i)) < 0) {
                    rc = s3d_fail(rc, "%s response: element text over the limit", doc);
                    goto out;
                }
                i = run;
            }
            continue;
        }
        /* Markup. */
        if (len - i >= 4 && memcmp(s + i, "<!--", 4) == 0) {
            const char *e = find(s, len, i + 4, "-->");
            if (e == NULL) {
                rc = perr(doc, i, "unterminated comment");
                goto out;
            }
            i = (size_t)(e - s) + 3;
            continue;
        }
        if (len - i >= 2 && s[i + 1] == '?') {
            const char *e = find(s, len, i + 2, "?>");
            if (e == NULL) {
                rc = perr(doc, i, "unterminated processing instruction");
                goto out;
            }
            i = (size_t)(e - s) + 2;
            continue;
        }
        if (len - i >= 9 && memcmp(s + i, "<![CDATA[", 9) == 0) {
            const char *e = find(s, len, i + 9, "]]>");
            if (depth == 0 || e == NULL) {
                rc = perr(doc, i, depth == 0 ? "CDATA outside the root" : "unterminated CDATA");
                goto out;
            }
            if ((rc = s3d_dynbuf_append(&text, s + i + 9, (size_t)(e - (s + i + 9)))) < 0) {
                rc = s3d_fail(rc, "%s response: element text over the limit", doc);
                goto out;
            }
            i = (size_t)(e - s) + 3;
            continue;
        }
        if (len - i >= 2 && s[i + 1] == '!') {
            rc = perr(doc, i, "DTDs and declarations are not accepted");
            goto out;
        }
        if (len - i >= 2 && s[i + 1] == '/') {
            /* End tag. */
            size_t n0 = i + 2, n1 = n0;
            struct s3d_xml_name *top;
            while (n1 < len && name_char((unsigned char)s[n1]))
                n1++;
            i = n1;
            while (i < len && s3d_xml_is_ws(s[i]))
                i++;
            if (i >= len || s[i] != '>') {
                rc = perr(doc, n0,
                          i >= len ? "document truncated in an end tag" : "malformed end tag");
                goto out;
            }
            i++;
            if (depth == 0) {
                rc = perr(doc, n0, "end tag without a start tag");
                goto out;
            }
            top = &stack[depth - 1];
            if (top->raw_len != n1 - n0 || memcmp(top->raw, s + n0, n1 - n0) != 0) {
                rc = perr(doc, n0, "end tag does not match the open element");
                goto out;
            }
            if (h->on_end && (rc = h->on_end(h->ctx, stack, depth - 1, text.data ? text.data : "",
                                             text.len)) < 0)
                goto out;
            s3d_dynbuf_reset(&text);
            depth--;
            continue;
        }
        /* Start tag. */
        {
            size_t n0 = i + 1, n1 = n0;
            const char *colon;
            int empty = 0;
            while (n1 < len && name_char((unsigned char)s[n1]))
                n1++;
            if (n1 == n0) {
                rc = perr(doc, i, n1 >= len ? "document truncated" : "malformed tag");
                goto out;
            }
            i = n1;
            /* Attributes: skipped, but their quoting must be sound. */
            for (;;) {
                while (i < len && s3d_xml_is_ws(s[i]))
                    i++;
                if (i >= len) {
                    rc = perr(doc, n0, "document truncated in a start tag");
                    goto out;
                }
                if (s[i] == '>') {
                    i++;
                    break;
                }
                if (s[i] == '/' && i + 1 < len && s[i + 1] == '>') {
                    i += 2;
                    empty = 1;
                    break;
                }
                while (i < len && name_char((unsigned char)s[i]))
                    i++;
                while (i < len && s3d_xml_is_ws(s[i]))
                    i++;
                if (i >= len || s[i] != '=') {
                    rc = perr(doc, i,
                              i >= len ? "document truncated in a start tag"
                                       : "malformed attribute");
                    goto out;
                }
                i++;
                while (i < len && s3d_xml_is_ws(s[i]))
                    i++;
                if (i >= len || (s[i] != '"' && s[i] != '\'')) {
                    rc = perr(doc, i, "attribute value without quotes");
                    goto out;
                }
                {
                    const char *q = memchr(s + i + 1, s[i], len - i - 1);
                    if (q == NULL) {
                        rc = perr(doc, i, "unterminated attribute value");
                        goto out;
                    }
                    i = (size_t)(q - s) + 1;
                }
            }
            if (depth == 0 && seen_root) {
                rc = perr(doc, n0, "a second root element");
                goto out;
            }
            if (depth >= S3D_XML_MAX_DEPTH) {
                rc = perr(doc, n0, "elements nested too deep");
                goto out;
            }
            if (++elements > S3D_XML_MAX_ELEMENTS) {
                rc = perr(doc, n0, "too many elements");
                goto out;
            }
            seen_root = 1;
            stack[depth].raw = s + n0;
            stack[depth].raw_len = n1 - n0;
            colon = memchr(s + n0, ':', n1 - n0);
            stack[depth].p = colon ? colon + 1 : s + n0;
            stack[depth].len = n1 - (size_t)(stack[depth].p - s);
            s3d_dynbuf_reset(&text);
            if (h->on_start && (rc = h->on_start(h->ctx, stack, depth)) < 0)
                goto out;
            depth++;
            if (empty) {
                if (h->on_end && (rc = h->on_end(h->ctx, stack, depth - 1, "", 0)) < 0)
                    goto out;
                depth--;
            }
        }
    }
    if (depth > 0)
        rc = perr(doc, len, "document truncated (unclosed elements)");
    else if (!seen_root)
        rc = perr(doc, len, "no root element");
out:
    s3d_dynbuf_free(&text);
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
