/* GPT-2's own tokenizer files (encoder.json + vocab.bpe, or a folder of them) and encoding
 * with them (byte-level BPE: tok_bpe.c). */
#include "skiplm_text.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/utf8.h"
#include "text/nfc.h"
#include "text/tok_impl.h"
#include "text/tokenizer_internal.h"
#include "text/unicode_tables.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------- GPT-2 loading */

static int load_encoder(sk_tokenizer **out, const char *path, const int16_t dec[324]) {
    sk_json j;
    int rc = tk_read_json(path, &j);
    if (rc) return rc;
    if (j.type != SK_JSON_OBJ || j.n == 0) {
        sk_json_free(&j);
        return sk_error(SK_EFORMAT, "%s: expected a non-empty JSON object mapping tokens to ids", path);
    }
    int V = j.n;
    sk_tokenizer *t = tk_new(KIND_GPT2, V);
    uint8_t *seen = calloc((size_t)V, 1);
    uint8_t *buf = malloc(1024);
    size_t buf_cap = 1024;
    char sh[64];
    rc = SK_OK;
    if (!t || !seen || !buf) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    t->vocab_mask = pow2_at_least((size_t)V * 2) - 1;
    t->vocab_tab = malloc((t->vocab_mask + 1) * sizeof *t->vocab_tab);
    if (!t->vocab_tab) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    memset(t->vocab_tab, 0xff, (t->vocab_mask + 1) * sizeof *t->vocab_tab);
    for (int i = 0; i < V; i++) {
        const sk_json *v = &j.items[i];
        const char *key = j.keys[i]; size_t klen = j.key_lens[i];
        if (v->type != SK_JSON_NUM || v->num != floor(v->num)) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): id is not an integer", path, i,
                          tk_show(key, klen, sh, sizeof sh));
            goto done;
        }
        if (v->num < 0 || v->num >= V) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): id %.0f out of range [0, %d)", path, i,
                          tk_show(key, klen, sh, sizeof sh), v->num, V);
            goto done;
        }
        int id = (int)v->num;
        if (seen[id]) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): duplicate id %d", path, i,
                          tk_show(key, klen, sh, sizeof sh), id);
            goto done;
        }
        seen[id] = 1;
        if (klen > buf_cap) {
            free(buf); buf_cap = klen; buf = malloc(buf_cap);
            if (!buf) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        }
        size_t bl = klen ? tk_undisplay(dec, key, klen, buf) : 0;
        if (klen == 0 || bl == (size_t)-1) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): %s", path, i, tk_show(key, klen, sh, sizeof sh),
                          klen ? "character outside GPT-2's byte alphabet" : "empty token");
            goto done;
        }
        if (tk_pool_set(t, id, buf, bl)) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        int32_t dup = tk_vocab_insert(t, id);
        if (dup >= 0) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): same token as id %d", path, i,
                          tk_show(key, klen, sh, sizeof sh), dup);
            goto done;
        }
        if (klen == 13 && memcmp(key, "<|endoftext|>", 13) == 0) t->eot = id;
    }
    rc = tk_find_byte_ids(t, path, "");
done:
    sk_json_free(&j);
    free(seen); free(buf);
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}
static int load_merges(sk_tokenizer *t, const char *path, const int16_t dec[324]) {
    uint8_t *text; size_t n;
    int rc = sk_read_file(path, &text, &n);
    if (rc) return rc;
    size_t n_lines = 1;
    for (size_t i = 0; i < n; i++) n_lines += text[i] == '\n';
    t->pair_mask = pow2_at_least(n_lines * 3) - 1;
    t->pairs = malloc((t->pair_mask + 1) * sizeof *t->pairs);
    uint8_t *key = malloc(2 * n + 8), *tmp = malloc(2 * n + 8);
    if (!t->pairs || !key || !tmp) { free(text); free(key); free(tmp); return sk_error(SK_ENOMEM, "%s: out of memory", path); }
    for (size_t i = 0; i <= t->pair_mask; i++) t->pairs[i].rank = -1;
    char sh[64], sh2[64];
    int rank = 0, line_no = 0;
    rc = SK_OK;
    for (size_t pos = 0; pos < n;) {
        size_t e = pos;
        while (e < n && text[e] != '\n') e++;
        const char *line = (const char *)text + pos;
        size_t ll = e - pos;
        line_no++;
        pos = e + 1;
        if (ll && line[ll - 1] == '\r') ll--;
        if (line_no == 1 && ll >= 8 && memcmp(line, "#version", 8) == 0) continue;
        const char *sp = memchr(line, ' ', ll);
        if (!sp || sp == line || sp == line + ll - 1 || memchr(sp + 1, ' ', (size_t)(line + ll - sp - 1))) {
            rc = sk_error(SK_EFORMAT, "%s:%d: malformed merge line \"%s\" (expected two tokens separated by one space)",
                          path, line_no, tk_show(line, ll, sh, sizeof sh));
            break;
        }
        size_t la = (size_t)(sp - line), lb = ll - la - 1;
        size_t ra = tk_undisplay(dec, line, la, key);
        size_t rb = ra == (size_t)-1 ? ra : tk_undisplay(dec, sp + 1, lb, key + ra + 1);
        if (ra == (size_t)-1 || rb == (size_t)-1) {
            rc = sk_error(SK_EFORMAT, "%s:%d: merge \"%s\": character outside GPT-2's byte alphabet",
                          path, line_no, tk_show(line, ll, sh, sizeof sh));
            break;
        }
        int32_t a = tk_vocab_find(t, key, ra), b = tk_vocab_find(t, key + ra + 1, rb);
        memcpy(tmp, key, ra); memcpy(tmp + ra, key + ra + 1, rb);
        int32_t m = tk_vocab_find(t, tmp, ra + rb);
        if (a < 0 || b < 0 || m < 0) {
            const char *which = a < 0 ? line : b < 0 ? sp + 1 : NULL;
            size_t wl = a < 0 ? la : lb;
            if (which)
                rc = sk_error(SK_EFORMAT, "%s:%d: merge \"%s\" refers to unknown token \"%s\"", path, line_no,
                              tk_show(line, ll, sh, sizeof sh), tk_show(which, wl, sh2, sizeof sh2));
            else
                rc = sk_error(SK_EFORMAT, "%s:%d: merge \"%s\": the merged token is not in the encoder",
                              path, line_no, tk_show(line, ll, sh, sizeof sh));
            break;
        }
        /* The JS key first + "," + second: every split of it at a comma into two known
         * tokens whose concatenation is known gets this rank (later lines overwrite). */
        key[ra] = ',';
        size_t kl = ra + 1 + rb;
        for (size_t p = 0; p < kl; p++) {
            if (key[p] != ',') continue;
            int32_t x = tk_vocab_find(t, key, p), y = tk_vocab_find(t, key + p + 1, kl - p - 1);
            if (x < 0 || y < 0) continue;
            memcpy(tmp, key, p); memcpy(tmp + p, key + p + 1, kl - p - 1);
            int32_t xy = tk_vocab_find(t, tmp, kl - 1);
            if (xy >= 0) tk_pair_put(t, x, y, rank, xy);
        }
        rank++;
    }
    free(text); free(key); free(tmp);
    if (!rc && rank == 0) rc = sk_error(SK_EFORMAT, "%s: no merges", path);
    return rc;
}
int sk_tok_load_gpt2(sk_tokenizer **out, const char *encoder_json, const char *vocab_bpe) {
    uint32_t enc[256]; int16_t dec[324];
    tk_byte_alphabet(enc, dec);
    sk_tokenizer *t = NULL;
    int rc = load_encoder(&t, encoder_json, dec);
    if (rc) return rc;
    rc = load_merges(t, vocab_bpe, dec);
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}
int sk_tok_load_gpt2_dir(sk_tokenizer **out, const char *dir) {
    size_t n = strlen(dir) + 32;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) { free(a); free(b); return sk_error(SK_ENOMEM, "out of memory"); }
    snprintf(a, n, "%s/encoder.json", dir);
    snprintf(b, n, "%s/vocab.bpe", dir);
    struct stat sb;
    if (stat(a, &sb) != 0) {
        /* Hugging Face's names for the same two files */
        snprintf(a, n, "%s/vocab.json", dir);
        snprintf(b, n, "%s/merges.txt", dir);
        if (stat(a, &sb) != 0 || stat(b, &sb) != 0) {
            free(a); free(b);
            return sk_error(SK_EIO, "%s: no GPT-2 tokenizer here (encoder.json + vocab.bpe, or vocab.json + merges.txt)", dir);
        }
    }
    int rc = sk_tok_load_gpt2(out, a, b);
    free(a); free(b);
    return rc;
}
int tk_gpt2_encode(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    if (tk_encode_words(t, s, n, ids, cnt, cap)) return sk_error(SK_ENOMEM, "tokenizer: out of memory");
    return SK_OK;
}
