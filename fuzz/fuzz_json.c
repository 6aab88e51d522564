/* libFuzzer harness for the JSON reader: parse, and for every accepted document check
 * that strings re-encode with sk_json_write_str and parse back to the same bytes.
 *
 * Build and run (from the repository root):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc fuzz/fuzz_json.c \
 *       src/base/json.c -lm -o fuzz_json
 *   ./fuzz_json -max_len=4096 fuzz/corpus/json
 */
#include "base/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void roundtrip(const char *s, size_t n) {
    char *buf = NULL; size_t len = 0, cap = 0;
    if (sk_json_write_str(&buf, &len, &cap, s, n) != 0) abort();   /* parser output is valid UTF-8 */
    sk_json j; char err[128];
    if (sk_json_parse(buf, len, &j, err, sizeof err) != 0) abort();
    if (j.type != SK_JSON_STR || j.str_len != n || memcmp(j.str, s, n) != 0 || j.str[n]) abort();
    sk_json_free(&j);
    free(buf);
}

static void walk(const sk_json *v, int depth) {
    if (depth > 64) abort();
    switch (v->type) {
    case SK_JSON_STR: roundtrip(v->str, v->str_len); break;
    case SK_JSON_OBJ:
        for (int i = 0; i < v->n; i++) {
            roundtrip(v->keys[i], v->key_lens[i]);
            if (v->keys[i][v->key_lens[i]] != 0) abort();
        }
        /* fall through */
    case SK_JSON_ARR:
        for (int i = 0; i < v->n; i++) walk(&v->items[i], depth + 1);
        break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sk_json j; char err[128];
    if (sk_json_parse((const char *)data, size, &j, err, sizeof err) != 0) {
        if (strncmp(err, "offset ", 7) != 0) abort();                  /* every error has an offset */
        return 0;
    }
    walk(&j, 0);
    sk_json_free(&j);
    return 0;
}
