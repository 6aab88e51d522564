/* The compiled form of a JSON Schema (internal to src/text/json_schema.c, which builds it,
 * and src/text/json_match.c, which matches bytes against it). A schema becomes a graph of
 * nodes; a $ref is an edge, so recursive schemas are finite graphs. Every node knows the
 * length in bytes of its shortest value (minlen), which the matcher uses to keep a value
 * completable within a token budget. */
#ifndef SK_TEXT_JSON_GRAMMAR_H
#define SK_TEXT_JSON_GRAMMAR_H
#include <stdint.h>

#define JG_INF ((uint64_t)1 << 40)     /* "no finite value": larger than any real length */
#define JG_MAX_PROPS 64                /* declared properties of one object (a bit mask of those seen) */
#define JG_MAX_DEPTH 32                /* nesting of one value, its root included */
#define JG_MAX_STACKS 16               /* readings of the bytes so far held at once (anyOf) */
#define JG_MAX_FRAMES 256              /* frames of all readings together */
#define JG_MAX_WS 12                   /* whitespace bytes (space, newline, tab) between two tokens of JSON */

enum { JG_ALT, JG_OBJ, JG_MAP, JG_ARR, JG_STR, JG_NUM, JG_ENUM };
/* nodes every grammar has: any value, a string, a number, false/null/true, any object, any array */
enum { JG_N_ANY, JG_N_STR, JG_N_NUM, JG_N_LIT, JG_N_OBJ, JG_N_ARR, JG_N_BUILTIN };

typedef struct {
    char *key;                 /* the name as JSON text, quotes included: "\"name\"" */
    uint32_t len;
    int32_t node;
    int required;
} jg_prop;

typedef struct {
    int kind;
    uint64_t minlen;           /* bytes of its shortest value, JG_INF when it has none */
    /* JG_OBJ: the declared properties, sorted by key bytes (no others are written) */
    int n_props;
    jg_prop *props;
    uint64_t req;              /* bit i: props[i] is required */
    /* JG_MAP: keys are any strings, every value is this node */
    int32_t value;
    /* JG_ARR: item i is prefix[i], then items (-1: none past the prefix) */
    int n_prefix;
    int32_t *prefix;
    int32_t items;
    uint32_t min_items, max_items;
    /* JG_STR: code points */
    uint32_t min_len, max_len;
    /* JG_NUM: at most int_cap digits before the point and frac digits after it (0: an
     * integer); bounded: the value times 10^frac lies in [lo, hi] */
    int int_cap, frac, bounded;
    int64_t lo, hi;
    /* JG_ENUM: the values as compact JSON texts, sorted by bytes (a prefix first) */
    int n_cand;
    char **cand;
    uint32_t *cand_len;
    /* JG_ALT: the alternatives (after compilation, none is itself a JG_ALT) */
    int n_alt;
    int32_t *alt;
} jg_node;

struct sk_jg {
    jg_node *nodes;
    int n, cap;
    int32_t root;
    char *pre, *suf;           /* sk_jg_wrap: bytes before and after the value */
    uint32_t pre_len, suf_len;
};

/* the number rules (json_match.c): bytes still needed by a number whose state is given, 0 when
 * it is a value in range, JG_INF when no value in range can follow */
uint64_t jg_num_rest(const jg_node *nd, int phase, int neg, uint64_t p, uint32_t n_int, int64_t f, uint32_t k);
enum { JG_NUM_START, JG_NUM_MINUS, JG_NUM_INT, JG_NUM_DOT, JG_NUM_FRAC };
#endif
