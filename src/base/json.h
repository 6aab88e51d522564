/* Small JSON reader (internal): enough for safetensors headers, encoder.json and configs.
 * Strings are decoded to UTF-8 (\uXXXX escapes and surrogate pairs included) and
 * NUL-terminated; str_len holds the byte length (a string may contain \u0000). */
#ifndef SK_JSON_H
#define SK_JSON_H
#include <stddef.h>

typedef enum { SK_JSON_NULL, SK_JSON_BOOL, SK_JSON_NUM, SK_JSON_STR, SK_JSON_ARR, SK_JSON_OBJ } sk_json_type;

typedef struct sk_json {
    sk_json_type type;
    int boolean;
    double num;
    char *str; size_t str_len;        /* SK_JSON_STR */
    int n;                            /* number of items (array) or members (object) */
    struct sk_json *items;            /* array items, or object values */
    char **keys; size_t *key_lens;    /* object keys (decoded, NUL-terminated) */
} sk_json;

/* Parse text[0..len). On error returns non-zero and writes a message with the byte
 * offset to err. Rejects trailing garbage, depth > 64, invalid escapes and invalid numbers. */
int sk_json_parse(const char *text, size_t len, sk_json *out, char *err, size_t errlen);
void sk_json_free(sk_json *j);
/* "null", "a boolean", "a number", "a string", "an array", "an object": for messages. */
const char *sk_json_type_name(sk_json_type t);
/* Object member by key (first match), or NULL. */
const sk_json *sk_json_get(const sk_json *obj, const char *key);
/* Append s (len bytes) to a growing buffer as a JSON string literal with quotes. */
int sk_json_write_str(char **buf, size_t *len, size_t *cap, const char *s, size_t slen);
/* Append s (slen bytes) as it is (JSON text already), NUL-terminated; 1 when out of memory. */
int sk_json_write_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t slen);
#endif
