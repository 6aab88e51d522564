/* libFuzzer harness for constrained decoding (src/text/json_schema.c, json_match.c). The input
 * is a schema, a NUL byte, then bytes for the matcher. The schema is compiled or refused with a
 * message (a third of them, by length, then wrapped in tags as sk_jg_wrap does); a compiled one is fed the bytes one by one (up to the first it refuses), and at
 * each step: a token allowed by the mask must be accepted when fed, a complete value must cost
 * 0, and from wherever the bytes stopped, taking the first allowed token with a budget of the
 * state's cost must reach a complete value in exactly that many tokens (the shortest completion
 * the budget relies on).
 *
 * Build and run (from the repository root): make FUZZ=1 build-fuzz/fuzz/fuzz_json_grammar &&
 *   build-fuzz/fuzz/fuzz_json_grammar -max_len=4096 fuzz/corpus/json_grammar
 */
#include "skiplm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static sk_jg_vocab *V;
static int NV;
static const char *const MULTI[] = {"{\"", "\":", "\",\"", "true", "null", "false", "12", "-3", ".5", "\"}", "}]", "[{", "  ",
                                    "\xc3\xa9", "\xc3", "\xa9", "\\u00", "\"a\"", "]}", "0,", NULL};

static void setup(void) {
    static char single[256];
    const char *bytes[300];
    size_t lens[300];
    NV = 0;
    for (int b = 0; b < 256; b++) { single[b] = (char)b; bytes[NV] = &single[b]; lens[NV++] = 1; }
    for (int i = 0; MULTI[i]; i++) { bytes[NV] = MULTI[i]; lens[NV++] = strlen(MULTI[i]); }
    if (sk_jg_vocab_new(&V, NV, bytes, lens, NULL)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!V) setup();
    const uint8_t *nul = memchr(data, 0, size);
    const size_t sl = nul ? (size_t)(nul - data) : size;
    sk_jg *g = NULL;
    if (sk_jg_compile(&g, (const char *)data, sl)) {
        if (g || !sk_last_error()[0]) abort();
        return 0;
    }
    if (sl % 3 == 0 && sk_jg_wrap(g, "<t>\n", "\n</t>")) abort();   /* a third of the schemas between tags, as tool calls */
    sk_jg_match *m = sk_jg_match_new(g, V);
    unsigned char *allow = malloc(NV);
    if (!m || !allow) abort();
    const uint8_t *b = nul ? nul + 1 : data + size;
    const size_t nb = nul ? size - sl - 1 : 0;
    for (size_t i = 0; i < nb && i < 64; i++) {
        if (sk_jg_match_complete(m) != (sk_jg_match_cost(m) == 0)) abort();
        if (sk_jg_match_mask(m, allow, -1) < 0) abort();
        const int t = b[i];                            /* token t is byte t: the mask and feeding agree */
        const int ok = sk_jg_match_feed(m, (const char *)&b[i], 1) == 0;
        if (ok != allow[t]) abort();
        if (!ok) break;
    }
    /* the shortest completion, one token at a time */
    size_t cost = sk_jg_match_cost(m);
    if (cost > 200) cost = 0;                          /* (a long one is not walked: time) */
    for (size_t left = cost; left > 0; left--) {
        if (sk_jg_match_mask(m, allow, (long)left) <= 0) abort();
        int t = 0;
        while (t < NV && !allow[t]) t++;
        if (sk_jg_match_feed_token(m, t)) abort();
        if (sk_jg_match_cost(m) > left - 1) abort();
    }
    if (cost && !sk_jg_match_complete(m)) abort();
    free(allow);
    sk_jg_match_free(m);
    sk_jg_free(g);
    return 0;
}
