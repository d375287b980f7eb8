/* A small JSON reader (RFC 8259) for the simulated driver's state file; see json.h.
 *
 * The state file is written by Python's json.dump, so only what that produces must be read well;
 * anything malformed makes json_parse return NULL rather than guess.
 */
#include "json.h"

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
    char *stop;
    double n = strtod(p->at, &stop);
    if (stop == p->at)
        return NULL;
    p->at = stop;
    struct json_node *node = new_node(p, JSON_NUMBER);
    if (node != NULL)
        node->number = n;
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
