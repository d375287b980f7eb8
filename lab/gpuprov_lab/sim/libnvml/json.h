/* A small JSON reader for the simulated driver's state file: a tree of nodes in one arena.
 *
 *   struct json_arena arena = {0};
 *   const struct json_node *root = json_parse(&arena, text, length);
 *   const struct json_node *gpus = json_get(root, "gpus");   // NULL when absent
 *   json_free(&arena);
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

#endif
