/* A small JSON reader and writer (RFC 8259) for the simulated driver's state file; see json.h.
 *
 * The state file is written by Python's json.dump or by json_* below, so only what those produce
 * must be read well; anything malformed makes json_parse return NULL rather than guess.
 */
#include "json.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_NODES 256
#define MAX_DEPTH 64

struct json_chunk {
    struct json_chunk *next;
    size_t used;
    struct json_node nodes[CHUNK_NODES];
};

struct parser {
    struct json_arena *arena;
    char *at;
    char *end;
    int depth;
};

static struct json_node *new_node(struct parser *p, enum json_type type)
{
    struct json_chunk *chunk = p->arena->chunks;
    if (chunk == NULL || chunk->used == CHUNK_NODES) {
        chunk = calloc(1, sizeof(*chunk));
        if (chunk == NULL)
            return NULL;
        chunk->next = p->arena->chunks;
        p->arena->chunks = chunk;
    }
    struct json_node *node = &chunk->nodes[chunk->used++];
    node->type = type;
    return node;
}

static void skip_space(struct parser *p)
{
    while (p->at < p->end && (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' || *p->at == '\r'))
        p->at++;
}

static int literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->at) < n || memcmp(p->at, word, n) != 0)
        return 0;
    p->at += n;
    return 1;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned value = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        value <<= 4;
        if (c >= '0' && c <= '9')
            value |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            value |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            value |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = value;
    return 1;
}

static char *put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        *out++ = (char)cp;
    } else if (cp < 0x800) {
        *out++ = (char)(0xC0 | cp >> 6);
        *out++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *out++ = (char)(0xE0 | cp >> 12);
        *out++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *out++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *out++ = (char)(0xF0 | cp >> 18);
        *out++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *out++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *out++ = (char)(0x80 | (cp & 0x3F));
    }
    return out;
}

/* Decodes the string at p->at (its opening quote) in place; the result is NUL-terminated. */
static const char *string_value(struct parser *p)
{
    char *out = ++p->at;
    const char *start = out;
    while (p->at < p->end && *p->at != '"') {
        unsigned char c = (unsigned char)*p->at;
        if (c < 0x20)
            return NULL;
        if (c != '\\') {
            *out++ = *p->at++;
            continue;
        }
        if (p->end - p->at < 2)
            return NULL;
        char e = p->at[1];
        p->at += 2;
        switch (e) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '/': *out++ = '/'; break;
        case 'b': *out++ = '\b'; break;
        case 'f': *out++ = '\f'; break;
        case 'n': *out++ = '\n'; break;
        case 'r': *out++ = '\r'; break;
        case 't': *out++ = '\t'; break;
        case 'u': {
            unsigned cp, low;
            if (p->end - p->at < 4 || !hex4(p->at, &cp))
                return NULL;
            p->at += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (p->end - p->at < 6 || p->at[0] != '\\' || p->at[1] != 'u' ||
                    !hex4(p->at + 2, &low) || low < 0xDC00 || low > 0xDFFF)
                    return NULL;
                p->at += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            /* \uXXXX takes 6 bytes, its UTF-8 at most 4: decoding in place never overtakes. */
            out = put_utf8(out, cp);
            break;
        }
        default:
            return NULL;
        }
    }
    if (p->at >= p->end)
        return NULL;
    p->at++;
    *out = '\0';
    return start;
}

static struct json_node *value(struct parser *p);

static struct json_node *container(struct parser *p, enum json_type type, char close)
{
    struct json_node *node = new_node(p, type);
    struct json_node **tail;
    if (node == NULL || ++p->depth > MAX_DEPTH)
        return NULL;
    tail = &node->child;
    p->at++;
    skip_space(p);
    if (p->at < p->end && *p->at == close) {
        p->at++;
        p->depth--;
        return node;
    }
    for (;;) {
        const char *key = NULL;
        skip_space(p);
        if (type == JSON_OBJECT) {
            if (p->at >= p->end || *p->at != '"' || (key = string_value(p)) == NULL)
                return NULL;
            skip_space(p);
            if (p->at >= p->end || *p->at != ':')
                return NULL;
            p->at++;
        }
        struct json_node *item = value(p);
        if (item == NULL)
            return NULL;
        item->key = key;
        *tail = item;
        tail = &item->next;
        skip_space(p);
        if (p->at < p->end && *p->at == ',') {
            p->at++;
            continue;
        }
        if (p->at < p->end && *p->at == close) {
            p->at++;
            p->depth--;
            return node;
        }
        return NULL;
    }
}

static struct json_node *number(struct parser *p)
{
    /* The copy is NUL-terminated, so strtod stops at the text's end at the latest. */
    char *stop, *start = p->at;
    double n = strtod(p->at, &stop);
    if (stop == p->at)
        return NULL;
    p->at = stop;
    struct json_node *node = new_node(p, JSON_NUMBER);
    if (node != NULL) {
        node->number = n;
        node->lexeme = start;
        node->lexeme_length = (size_t)(stop - start);
    }
    return node;
}

static struct json_node *value(struct parser *p)
{
    skip_space(p);
    if (p->at >= p->end)
        return NULL;
    switch (*p->at) {
    case '{':
        return container(p, JSON_OBJECT, '}');
    case '[':
        return container(p, JSON_ARRAY, ']');
    case '"': {
        const char *s = string_value(p);
        struct json_node *node = s ? new_node(p, JSON_STRING) : NULL;
        if (node != NULL)
            node->string = s;
        return node;
    }
    case 't':
        return literal(p, "true") ? new_node(p, JSON_TRUE) : NULL;
    case 'f':
        return literal(p, "false") ? new_node(p, JSON_FALSE) : NULL;
    case 'n':
        return literal(p, "null") ? new_node(p, JSON_NULL) : NULL;
    default:
        return (*p->at == '-' || (*p->at >= '0' && *p->at <= '9')) ? number(p) : NULL;
    }
}

const struct json_node *json_parse(struct json_arena *arena, const char *text, size_t length)
{
    arena->chunks = NULL;
    arena->text = malloc(length + 1);
    if (arena->text == NULL)
        return NULL;
    memcpy(arena->text, text, length);
    arena->text[length] = '\0';
    struct parser p = {arena, arena->text, arena->text + length, 0};
    struct json_node *root = value(&p);
    skip_space(&p);
    return root != NULL && p.at == p.end ? root : NULL;
}

const struct json_node *json_get(const struct json_node *object, const char *key)
{
    if (object == NULL || object->type != JSON_OBJECT)
        return NULL;
    for (const struct json_node *m = object->child; m != NULL; m = m->next)
        if (strcmp(m->key, key) == 0)
            return m;
    return NULL;
}

void json_free(struct json_arena *arena)
{
    while (arena->chunks != NULL) {
        struct json_chunk *next = arena->chunks->next;
        free(arena->chunks);
        arena->chunks = next;
    }
    free(arena->text);
    arena->text = NULL;
}

int json_count(const struct json_node *node, unsigned long long *out, int *saturated)
{
    unsigned long long value = 0;
    int over = 0;
    if (node == NULL || node->type != JSON_NUMBER || node->lexeme_length == 0 ||
        (node->lexeme_length > 1 && node->lexeme[0] == '0'))
        return 0;
    for (size_t i = 0; i < node->lexeme_length; i++) {
        unsigned digit = (unsigned)(node->lexeme[i] - '0');
        if (digit > 9)
            return 0;
        if (value > (ULLONG_MAX - digit) / 10)
            over = 1;
        value = over ? ULLONG_MAX : value * 10 + digit;
    }
    *out = value;
    if (saturated)
        *saturated = over;
    return 1;
}

/* -- the writer ------------------------------------------------------------------------------ */

static void put(struct json_writer *w, const char *text, size_t n)
{
    if (w->failed)
        return;
    if (w->length + n + 1 > w->capacity) {
        size_t capacity = w->capacity ? w->capacity : 4096;
        while (w->length + n + 1 > capacity)
            capacity *= 2;
        char *grown = realloc(w->text, capacity);
        if (grown == NULL) {
            w->failed = 1;
            return;
        }
        w->text = grown;
        w->capacity = capacity;
    }
    memcpy(w->text + w->length, text, n);
    w->length += n;
    w->text[w->length] = '\0';
}

static void newline(struct json_writer *w)
{
    put(w, "\n", 1);
    for (int i = 0; i < w->depth; i++)
        put(w, "  ", 2);
}

/* Before a member or element: the separator and the indentation json.dump(indent=2) writes. */
static void next(struct json_writer *w)
{
    if (w->depth <= 0)
        return;
    if (!w->empty[w->depth - 1])
        put(w, ",", 1);
    w->empty[w->depth - 1] = 0;
    newline(w);
}

void json_begin(struct json_writer *w, char open)
{
    put(w, &open, 1);
    if (w->depth == (int)(sizeof(w->empty) / sizeof(w->empty[0]))) {
        w->failed = 1;
        return;
    }
    w->empty[w->depth++] = 1;
}

void json_end(struct json_writer *w, char close)
{
    if (w->depth <= 0) {
        w->failed = 1;
        return;
    }
    int empty = w->empty[--w->depth];
    if (!empty)
        newline(w);
    put(w, &close, 1);
}

void json_key(struct json_writer *w, const char *key)
{
    next(w);
    json_string(w, key);
    put(w, ": ", 2);
}

void json_item(struct json_writer *w) { next(w); }

/* The next code point of UTF-8 text, or -1 when it is not well-formed UTF-8 (RFC 3629). */
static long utf8_next(const unsigned char **at)
{
    const unsigned char *s = *at;
    long cp;
    int extra;
    if (s[0] < 0x80) {
        *at = s + 1;
        return s[0];
    }
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        cp = s[0] & 0x1F;
        extra = 1;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        cp = s[0] & 0x0F;
        extra = 2;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        cp = s[0] & 0x07;
        extra = 3;
    } else {
        return -1;
    }
    for (int i = 1; i <= extra; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *at = s + 1 + extra;
    return cp;
}

void json_string(struct json_writer *w, const char *text)
{
    const unsigned char *at = (const unsigned char *)text;
    char escaped[32];
    put(w, "\"", 1);
    while (*at) {
        long cp = utf8_next(&at);
        if (cp < 0) {
            w->failed = 1;
            return;
        }
        if (cp == '"' || cp == '\\') {
            escaped[0] = '\\';
            escaped[1] = (char)cp;
            put(w, escaped, 2);
        } else if (cp == '\n') {
            put(w, "\\n", 2);
        } else if (cp == '\r') {
            put(w, "\\r", 2);
        } else if (cp == '\t') {
            put(w, "\\t", 2);
        } else if (cp >= 0x20 && cp < 0x7F) {
            escaped[0] = (char)cp;
            put(w, escaped, 1);
        } else if (cp < 0x10000) {
            snprintf(escaped, sizeof(escaped), "\\u%04lx", cp);
            put(w, escaped, 6);
        } else {
            long v = cp - 0x10000;
            snprintf(escaped, sizeof(escaped), "\\u%04lx\\u%04lx", 0xD800 + (v >> 10),
                     0xDC00 + (v & 0x3FF));
            put(w, escaped, 12);
        }
    }
    put(w, "\"", 1);
}

void json_u64(struct json_writer *w, unsigned long long value)
{
    char digits[24];
    int n = snprintf(digits, sizeof(digits), "%llu", value);
    put(w, digits, (size_t)n);
}

void json_bool(struct json_writer *w, int value)
{
    put(w, value ? "true" : "false", value ? 4 : 5);
}

void json_null(struct json_writer *w) { put(w, "null", 4); }

void json_raw(struct json_writer *w, const char *text) { put(w, text, strlen(text)); }
