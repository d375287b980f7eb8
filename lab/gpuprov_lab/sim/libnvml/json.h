/* A small JSON reader and writer for the simulated driver's state file.
 *
 * Reading gives a tree of nodes in one arena:
 *
 *   struct json_arena arena = {0};
 *   const struct json_node *root = json_parse(&arena, text, length);
 *   const struct json_node *gpus = json_get(root, "gpus");   // NULL when absent
 *   json_free(&arena);
 *
 * Writing appends to a growing buffer, indented as Python's json.dump(indent=2) writes:
 *
 *   struct json_writer w = {0};
 *   json_begin(&w, '{'); json_key(&w, "loaded"); json_bool(&w, 1); json_end(&w, '}');
 *   if (!w.failed) use(w.text, w.length);
 *   free(w.text);
 */
#ifndef GPUPROV_JSON_H
#define GPUPROV_JSON_H

#include <stddef.h>

enum json_type { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json_node {
    enum json_type type;
    const char *key;          /* member name inside an object, else NULL */
    const char *string;       /* JSON_STRING: decoded UTF-8, NUL-terminated */
    double number;            /* JSON_NUMBER */
    const char *lexeme;       /* JSON_NUMBER: the number as written (not NUL-terminated) */
    size_t lexeme_length;
    struct json_node *child;  /* first element or member */
    struct json_node *next;   /* next sibling */
};

struct json_chunk;

struct json_arena {
    struct json_chunk *chunks;
    char *text;               /* a private copy; strings are decoded into it in place */
};

/* The root node of ``text``, or NULL when it is not one complete JSON value. */
const struct json_node *json_parse(struct json_arena *arena, const char *text, size_t length);

/* The member ``key`` of object ``object``, or NULL. */
const struct json_node *json_get(const struct json_node *object, const char *key);

void json_free(struct json_arena *arena);

/* A JSON_NUMBER that is a non-negative integer as written (digits only, no sign, fraction or
 * exponent): 1 with its value in *out, saturated at ULLONG_MAX when larger (*saturated set);
 * 0 for anything else. Integers are read from the digits, not through a double, so 2**53 + 1
 * and 2**64 - 1 read exactly. */
int json_count(const struct json_node *node, unsigned long long *out, int *saturated);

struct json_writer {
    char *text;               /* malloc'd, NUL-terminated; the caller frees it */
    size_t length, capacity;
    int failed;               /* out of memory, or a string that is not UTF-8 */
    int depth;
    int empty[64];            /* per open container: nothing written in it yet */
};

void json_begin(struct json_writer *w, char open);        /* '{' or '[' */
void json_end(struct json_writer *w, char close);         /* '}' or ']' */
void json_key(struct json_writer *w, const char *key);    /* the next member of an object */
void json_item(struct json_writer *w);                    /* the next element of an array */
/* Non-ASCII characters are written as \uXXXX (as json.dump does by default), so the file is
 * ASCII; text that is not UTF-8 fails the writer instead of making a file Python cannot read. */
void json_string(struct json_writer *w, const char *text);
void json_u64(struct json_writer *w, unsigned long long value);
void json_bool(struct json_writer *w, int value);
void json_null(struct json_writer *w);
void json_raw(struct json_writer *w, const char *text);   /* e.g. an integer's exact digits */

#endif
