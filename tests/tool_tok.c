/* Helper for tests/test_tokenizer_node.py and tests/test_hf_tokenizer.py (compare with the
 * reference JS encoders). TOK is anything sk_tok_load takes (a GPT-2 folder, a
 * tokenizer.json, a char vocabulary).
 *   tool_tok classes                 0x110000 bytes: class of each code point
 *                                    (0 other, 1 \p{L}, 2 \p{N}, 3 \s) as the C tokenizer sees it
 *   tool_tok encode TOK FILE...       for each file: uint32 count, then count int32 ids
 *                                    (little-endian) on stdout; timing on stderr
 *   tool_tok ids TOK FILE             the ids of one file, space-separated, on stdout
 *   tool_tok decode TOK FILE...       each file holds ids as encode writes them (one record);
 *                                    for each: uint32 byte count, then the decoded bytes
 *   tool_tok info TOK                 "kind vocab_size eot" */
#include "skiplm.h"
#include "text/tokenizer_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz) { fprintf(stderr, "%s: read failed\n", path); exit(2); }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static double now(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "classes") == 0) {
        static unsigned char cls[0x110000];
        for (uint32_t cp = 0; cp < 0x110000; cp++) cls[cp] = (unsigned char)sk_tok_unicode_class_(cp);
        fwrite(cls, 1, sizeof cls, stdout);
        fprintf(stderr, "unicode %s\n", sk_tok_unicode_version_());
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "info") == 0) {
        sk_tokenizer *tok;
        if (sk_tok_load(&tok, argv[2])) { fprintf(stderr, "error: %s\n", sk_last_error()); return 1; }
        printf("%s %d %d\n", sk_tok_kind(tok), sk_tok_vocab_size(tok), sk_tok_eot(tok));
        sk_tok_free(tok);
        return 0;
    }
    if (argc < 4 || (strcmp(argv[1], "encode") && strcmp(argv[1], "ids") && strcmp(argv[1], "decode"))) {
        fprintf(stderr, "usage: tool_tok classes | encode TOK FILE... | ids TOK FILE | decode TOK FILE... | info TOK\n");
        return 2;
    }
    double t0 = now();
    sk_tokenizer *tok;
    if (sk_tok_load(&tok, argv[2])) { fprintf(stderr, "error: %s\n", sk_last_error()); return 1; }
    if (argv[1][0] == 'd') {
        for (int i = 3; i < argc; i++) {
            size_t n;
            char *rec = slurp(argv[i], &n);
            uint32_t cnt = 0;
            if (n >= 4) memcpy(&cnt, rec, 4);
            if (n != 4 + 4 * (size_t)cnt) { fprintf(stderr, "%s: not one id record\n", argv[i]); return 2; }
            int32_t *ids = malloc(4 * (size_t)cnt + 4);
            memcpy(ids, rec + 4, 4 * (size_t)cnt);
            char *out; size_t len;
            if (sk_tok_decode(tok, ids, cnt, &out, &len)) { fprintf(stderr, "error: %s\n", sk_last_error()); return 1; }
            uint32_t l = (uint32_t)len;
            fwrite(&l, 4, 1, stdout);
            fwrite(out, 1, len, stdout);
            free(out); free(ids); free(rec);
        }
        sk_tok_free(tok);
        return 0;
    }
    double t_load = now() - t0, t_enc = 0;
    size_t bytes = 0, tokens = 0;
    for (int i = 3; i < argc; i++) {
        size_t n;
        char *text = slurp(argv[i], &n);
        int32_t *ids = NULL; size_t cnt = 0, cap = 0;
        double t1 = now();
        if (sk_tok_encode(tok, text, n, &ids, &cnt, &cap)) { fprintf(stderr, "error: %s\n", sk_last_error()); return 1; }
        t_enc += now() - t1;
        bytes += n; tokens += cnt;
        if (argv[1][0] == 'e') {
            uint32_t c = (uint32_t)cnt;
            fwrite(&c, 4, 1, stdout);
            if (cnt) fwrite(ids, 4, cnt, stdout);
        } else {
            for (size_t k = 0; k < cnt; k++) printf(k ? " %d" : "%d", ids[k]);
            printf("\n");
        }
        free(ids); free(text);
    }
    fprintf(stderr, "tool_tok: load %.3f s; encoded %zu bytes into %zu tokens in %.3f s (%.1f MB/s)\n",
            t_load, bytes, tokens, t_enc, bytes / 1e6 / (t_enc > 0 ? t_enc : 1e-9));
    sk_tok_free(tok);
    return 0;
}
