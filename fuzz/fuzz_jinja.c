/* libFuzzer harness for the Jinja chat-template renderer: the input is a template, optionally
 * followed by a NUL byte and a JSON context; parse it, render it (a fixed time), free. Every
 * error must come with a message; a successful render must be NUL-terminated at its length.
 *
 * Build and run (from the repository root): make FUZZ=1 build-fuzz/fuzz/fuzz_jinja &&
 *   build-fuzz/fuzz/fuzz_jinja -max_len=8192 fuzz/corpus/jinja
 */
#include "text/jinja.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    const char *nul = memchr(s, 0, size);
    size_t tn = nul ? (size_t)(nul - s) : size;
    sk_json ctx;
    int have_ctx = 0;
    char err[256];
    if (nul) {
        if (sk_json_parse(nul + 1, size - tn - 1, &ctx, err, sizeof err) != 0) return 0;
        have_ctx = 1;
    }
    sk_jinja *t = NULL;
    if (sk_jinja_parse(&t, s, tn, err, sizeof err) != 0) {
        if (!err[0]) abort();
    } else {
        char *out = NULL;
        size_t n = 0;
        err[0] = 0;
        if (sk_jinja_render(t, have_ctx ? &ctx : NULL, (time_t)1722000000, &out, &n, err, sizeof err) != 0) {
            if (out || !err[0]) abort();
        } else if (!out || out[n] != 0) abort();
        free(out);
        sk_jinja_free(t);
    }
    if (have_ctx) sk_json_free(&ctx);
    return 0;
}
