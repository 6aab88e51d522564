/* Hugging Face's tokenizer.json (byte-level BPE; sentencepiece-style files through tok_sp.c):
 * loading, added tokens, pre-tokenizers and encoding. */
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

/* ------------------------------------------------------------ tokenizer.json */

/* Hugging Face's tokenizer.json, for the byte-level BPE models (GPT-2's, minimind's and any
 * other with a BPE model, a ByteLevel pre-tokenizer and a ByteLevel decoder). Encoding
 * follows the `tokenizers` library with add_special_tokens=False: added tokens are cut out
 * of the raw text first (leftmost-longest match; lstrip/rstrip eat the whitespace beside
 * them), every other stretch is cut into pieces by an optional Digits or Split (Llama 3's
 * regex) pre-tokenizer, and each piece gets the optional prefix space, GPT-2's pre-tokenizer
 * regex (use_regex) and BPE in Hugging Face's merge order (bpe_word_hf). Sentencepiece-style
 * files (Llama 2's) take another path per stretch (sp_stretch, below). What skiplm cannot
 * reproduce exactly (normalizers but NFC, other pre-tokenizers, regexes or models, BPE dropout,
 * single_word) is refused by name. */

static int hf_refuse(const char *path, const char *what, const sk_json *v) {
    const sk_json *ty = v && v->type == SK_JSON_OBJ ? sk_json_get(v, "type") : NULL;
    return sk_error(SK_EFORMAT, "%s: %s%s%s is not supported (skiplm reads byte-level BPE tokenizers: a BPE model, "
                    "no normalizer or NFC, a ByteLevel pre-tokenizer (or Sequence[Digits or Split, ByteLevel]) and decoder)", path, what,
                    ty && ty->type == SK_JSON_STR ? " of type " : "", ty && ty->type == SK_JSON_STR ? ty->str : "");
}



/* A merge entry: "a b" (one space) or ["a", "b"]; the halves point into the JSON. */
static int hf_merge_halves(const sk_json *m, const char **a, size_t *la, const char **b, size_t *lb) {
    if (m->type == SK_JSON_ARR) {
        if (m->n != 2 || m->items[0].type != SK_JSON_STR || m->items[1].type != SK_JSON_STR) return 1;
        *a = m->items[0].str; *la = m->items[0].str_len;
        *b = m->items[1].str; *lb = m->items[1].str_len;
        return *la == 0 || *lb == 0;
    }
    if (m->type != SK_JSON_STR) return 1;
    const char *sp = memchr(m->str, ' ', m->str_len);
    if (!sp || memchr(sp + 1, ' ', m->str_len - (size_t)(sp - m->str) - 1)) return 1;
    *a = m->str; *la = (size_t)(sp - m->str);
    *b = sp + 1; *lb = m->str_len - *la - 1;
    return *la == 0 || *lb == 0;
}

/* A Split pre-tokenizer skiplm reproduces (split_next): Llama 3's regex (GPT-4's cl100k) or
 * Qwen2's, compared as strings, its matches cut out as pieces (Isolated). Sets *max_digits,
 * the longest numeral run of a piece: 3 or 1. */
static int hf_split(const sk_json *p, const char *path, int *max_digits) {
    static const char *const known[2] = {
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",                                          /* Llama 3 */
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};                                        /* Qwen2 */
    const sk_json *pat = sk_json_get(p, "pattern"), *beh = sk_json_get(p, "behavior"), *inv = sk_json_get(p, "invert");
    const sk_json *re = pat && pat->type == SK_JSON_OBJ ? sk_json_get(pat, "Regex") : NULL;
    char sh[64];
    *max_digits = 0;
    for (int k = 0; k < 2 && re && re->type == SK_JSON_STR; k++)
        if (re->str_len == strlen(known[k]) && memcmp(re->str, known[k], re->str_len) == 0) *max_digits = k == 0 ? 3 : 1;
    if (!*max_digits)
        return sk_error(SK_EFORMAT, "%s: pre_tokenizer: Split with the pattern %s is not supported (skiplm knows the Regex "
                        "of Llama 3 (GPT-4's) and of Qwen2 only)", path,
                        re && re->type == SK_JSON_STR ? tk_show(re->str, re->str_len, sh, sizeof sh) : "other than a Regex");
    if (!beh || beh->type != SK_JSON_STR || strcmp(beh->str, "Isolated") != 0)
        return sk_error(SK_EFORMAT, "%s: pre_tokenizer: Split with the behavior %s is not supported (only Isolated)", path,
                        beh && beh->type == SK_JSON_STR ? beh->str : "(none)");
    if (inv && !(inv->type == SK_JSON_BOOL && !inv->boolean))
        return sk_error(SK_EFORMAT, "%s: pre_tokenizer: Split with invert other than false is not supported", path);
    return SK_OK;
}

/* The chain of a byte-level file: normalizer none or NFC, pre-tokenizer ByteLevel or
 * Sequence[Digits or Split, ByteLevel], decoder ByteLevel. */
static int hf_bytelevel_chain(const sk_json *norm, const sk_json **pre_io, const sk_json *dec, const char *path,
                              int *nfc, int *digits, int *split) {
    const sk_json *pre = *pre_io;
    /* NFC (Qwen2's) or none */
    *nfc = norm && tk_json_is(norm, "NFC");
    if (norm && norm->type != SK_JSON_NULL && !*nfc) return hf_refuse(path, "the normalizer", norm);
    if (pre && tk_json_is(pre, "Sequence")) {       /* [Digits or Split,] ByteLevel: SmolLM's, StarCoder's, Llama 3's */
        const sk_json *seq = sk_json_get(pre, "pretokenizers");
        if (!seq || seq->type != SK_JSON_ARR || seq->n < 1)
            return sk_error(SK_EFORMAT, "%s: pre_tokenizer: a Sequence needs a non-empty \"pretokenizers\" array", path);
        for (int i = 0; i < seq->n; i++) {
            const sk_json *p = &seq->items[i];
            if (tk_json_is(p, "Digits") && i == 0 && seq->n == 2) {
                const sk_json *ind = sk_json_get(p, "individual_digits");
                if (ind && ind->type != SK_JSON_BOOL)
                    return sk_error(SK_EFORMAT, "%s: pre_tokenizer: Digits' individual_digits must be true or false", path);
                *digits = ind && ind->boolean ? 1 : 2;
                continue;
            }
            if (tk_json_is(p, "Split") && i == 0 && seq->n == 2) {
                int rc = hf_split(p, path, split);
                if (rc) return rc;
                continue;
            }
            if (tk_json_is(p, "ByteLevel") && i == seq->n - 1) continue;
            if (tk_json_is(p, "Digits") || tk_json_is(p, "Split") || tk_json_is(p, "ByteLevel"))
                return sk_error(SK_EFORMAT, "%s: pre_tokenizer: a Sequence must be [Digits or Split,] ByteLevel (found %s at %d of %d)",
                                path, sk_json_get(p, "type")->str, i + 1, seq->n);
            return hf_refuse(path, "the pre-tokenizer in the Sequence", p);
        }
        pre = &seq->items[seq->n - 1];
    }
    if (!tk_json_is(pre, "ByteLevel")) return pre && pre->type != SK_JSON_NULL ? hf_refuse(path, "the pre-tokenizer", pre)
                                          : sk_error(SK_EFORMAT, "%s: no pre_tokenizer: skiplm reads byte-level BPE tokenizers (ByteLevel)", path);
    if (!tk_json_is(dec, "ByteLevel")) return dec && dec->type != SK_JSON_NULL ? hf_refuse(path, "the decoder", dec)
                                          : sk_error(SK_EFORMAT, "%s: no decoder: skiplm reads byte-level BPE tokenizers (ByteLevel)", path);
    *pre_io = pre;                               /* the ByteLevel, whose options load_hf reads */
    return SK_OK;
}

int tk_load_hf(sk_tokenizer **out, const sk_json *j, const char *path) {
    const sk_json *model = sk_json_get(j, "model");
    if (!model || model->type != SK_JSON_OBJ) return sk_error(SK_EFORMAT, "%s: no \"model\" object: not a tokenizer.json", path);
    const sk_json *mt = sk_json_get(model, "type");
    if (mt && !tk_json_is(model, "BPE")) return hf_refuse(path, "the model", model);
    const sk_json *vocab = sk_json_get(model, "vocab"), *merges = sk_json_get(model, "merges");
    if (!vocab || vocab->type != SK_JSON_OBJ || vocab->n == 0)
        return sk_error(SK_EFORMAT, "%s: model.vocab must be a non-empty object mapping tokens to ids", path);
    if (!merges || merges->type != SK_JSON_ARR) return sk_error(SK_EFORMAT, "%s: model.merges must be an array", path);
    const sk_json *v;
    if ((v = sk_json_get(model, "dropout")) && v->type != SK_JSON_NULL && !(v->type == SK_JSON_NUM && v->num == 0))
        return sk_error(SK_EFORMAT, "%s: model.dropout (BPE dropout) is not supported: encoding would be random", path);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++)
        if ((v = sk_json_get(model, affix[i])) && v->type != SK_JSON_NULL && !(v->type == SK_JSON_STR && v->str_len == 0))
            return sk_error(SK_EFORMAT, "%s: model.%s is not supported (byte-level BPE has none)", path, affix[i]);
    const sk_json *norm = sk_json_get(j, "normalizer"), *pre = sk_json_get(j, "pre_tokenizer"), *dec = sk_json_get(j, "decoder");
    int no_pre = !pre || pre->type == SK_JSON_NULL;
    /* sentencepiece-style (Llama 2's): a Metaspace pre-tokenizer, or none after a Prepend or
     * Replace normalizer */
    int sp = tk_json_is(pre, "Metaspace") || (no_pre && (tk_json_is(norm, "Sequence") || tk_json_is(norm, "Prepend") || tk_json_is(norm, "Replace")));
    int sp_prepend = 0, sp_replace = 0, sp_meta = 0, sp_bytes = 0;
    int nfc = 0, digits = 0, split = 0;
    if (sp) {
        int rc;
        if ((rc = tk_sp_normalizer(norm, path, &sp_prepend, &sp_replace))) return rc;
        if (!no_pre && (rc = tk_sp_metaspace(pre, path, &sp_meta))) return rc;
        if ((rc = tk_sp_decoder(dec, path, &sp_bytes))) return rc;
        if (tk_json_flag(model, "ignore_merges", 0))
            return sk_error(SK_EFORMAT, "%s: model.ignore_merges with a sentencepiece-style tokenizer is not supported", path);
    } else {
        int rc = hf_bytelevel_chain(norm, &pre, dec, path, &nfc, &digits, &split);
        if (rc) return rc;
    }
    const sk_json *added = sk_json_get(j, "added_tokens");
    if (added && added->type != SK_JSON_ARR && added->type != SK_JSON_NULL)
        return sk_error(SK_EFORMAT, "%s: added_tokens must be an array", path);
    int n_added = added && added->type == SK_JSON_ARR ? added->n : 0;

    /* the id range covers the vocabulary and the added tokens, without holes */
    int V = 0, bos = -1, bos_s = -1;
    char sh[64], sh2[64];
    for (int i = 0; i < vocab->n; i++) {
        const sk_json *e = &vocab->items[i];
        if (e->type != SK_JSON_NUM || e->num != floor(e->num) || e->num < 0 || e->num >= 1 << 24)
            return sk_error(SK_EFORMAT, "%s: model.vocab \"%s\": id is not an integer in [0, 2^24)", path,
                            tk_show(vocab->keys[i], vocab->key_lens[i], sh, sizeof sh));
        if ((int)e->num + 1 > V) V = (int)e->num + 1;
    }
    for (int i = 0; i < n_added; i++) {
        const sk_json *a = &added->items[i], *id = a->type == SK_JSON_OBJ ? sk_json_get(a, "id") : NULL;
        const sk_json *c = a->type == SK_JSON_OBJ ? sk_json_get(a, "content") : NULL;
        if (!id || id->type != SK_JSON_NUM || id->num != floor(id->num) || id->num < 0 || id->num >= 1 << 24 ||
            !c || c->type != SK_JSON_STR || c->str_len == 0)
            return sk_error(SK_EFORMAT, "%s: added_tokens[%d] needs an integer \"id\" in [0, 2^24) and a non-empty \"content\"", path, i);
        if (tk_json_flag(a, "single_word", 0))
            return sk_error(SK_EFORMAT, "%s: added token \"%s\": single_word is not supported", path, tk_show(c->str, c->str_len, sh, sizeof sh));
        /* the library matches a normalized added token in the normalized text (its own text
         * normalized too: "▁<s>" after a Prepend; after NFC, "abc" is not in "abc\u0301"), which
         * skiplm does not reproduce: it matches every added token in the raw text */
        if ((sp_prepend || sp_replace || nfc) && tk_json_flag(a, "normalized", !tk_json_flag(a, "special", 0)))
            return sk_error(SK_EFORMAT, "%s: added token \"%s\": normalized (true, or not special) with a %s normalizer "
                            "is not supported", path, tk_show(c->str, c->str_len, sh, sizeof sh), nfc ? "NFC" : "Prepend/Replace");
        if ((int)id->num + 1 > V) V = (int)id->num + 1;
    }
    uint32_t enc[256]; int16_t dec_tab[324];
    tk_byte_alphabet(enc, dec_tab);
    sk_tokenizer *t = tk_new(KIND_HF, V);
    uint8_t *state = calloc((size_t)V, 1);            /* 1: from the vocabulary, 2: added */
    size_t buf_cap = 64;
    for (int i = 0; i < vocab->n; i++) if (vocab->key_lens[i] + 4 > buf_cap) buf_cap = vocab->key_lens[i] + 4;
    uint8_t *buf = malloc(2 * buf_cap + 8);
    int rc = SK_OK;
    if (!t || !state || !buf) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    t->prefix_space = tk_json_flag(pre, "add_prefix_space", 0);
    t->use_regex = tk_json_flag(pre, "use_regex", 1);
    t->digits = digits;
    t->split = split;
    t->nfc = nfc;
    t->ignore_merges = tk_json_flag(model, "ignore_merges", 0);
    t->sp = sp; t->sp_prepend = sp_prepend; t->sp_replace = sp_replace; t->sp_meta = sp_meta;
    t->vocab_mask = pow2_at_least((size_t)V * 2) - 1;
    t->vocab_tab = malloc((t->vocab_mask + 1) * sizeof *t->vocab_tab);
    if (!t->vocab_tab) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    memset(t->vocab_tab, 0xff, (t->vocab_mask + 1) * sizeof *t->vocab_tab);
    for (int i = 0; i < vocab->n; i++) {
        const char *key = vocab->keys[i]; size_t klen = vocab->key_lens[i];
        int id = (int)vocab->items[i].num;
        if (state[id]) { rc = sk_error(SK_EFORMAT, "%s: model.vocab \"%s\": duplicate id %d", path, tk_show(key, klen, sh, sizeof sh), id); goto done; }
        state[id] = 1;
        if (klen == 0) { rc = sk_error(SK_EFORMAT, "%s: model.vocab has an empty token (id %d)", path, id); goto done; }
        /* a token outside GPT-2's byte alphabet (a special token's literal text, say) is
         * never produced by BPE; it decodes to its own UTF-8, as Hugging Face's decoder does */
        size_t bl = sp ? klen : tk_undisplay(dec_tab, key, klen, buf);        /* sp: raw UTF-8 */
        int literal = sp || bl == (size_t)-1;
        if (tk_pool_set(t, id, literal ? (const uint8_t *)key : buf, literal ? klen : bl)) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        if ((sp || !literal) && tk_vocab_insert(t, id) >= 0) {
            rc = sk_error(SK_EFORMAT, "%s: model.vocab \"%s\" appears twice", path, tk_show(key, klen, sh, sizeof sh)); goto done;
        }
    }
    t->added = calloc((size_t)(n_added ? n_added : 1), sizeof *t->added);
    if (!t->added) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    for (int i = 0; i < n_added; i++) {
        const sk_json *a = &added->items[i], *c = sk_json_get(a, "content");
        int id = (int)sk_json_get(a, "id")->num;
        if (state[id] == 2) { rc = sk_error(SK_EFORMAT, "%s: added_tokens: id %d appears twice", path, id); goto done; }
        if (state[id] == 1 && (t->len[id] != c->str_len || memcmp(t->pool + t->off[id], c->str, c->str_len))) {
            rc = sk_error(SK_EFORMAT, "%s: added token \"%s\" has id %d, which the vocabulary gives to \"%s\"", path,
                          tk_show(c->str, c->str_len, sh, sizeof sh), id, tk_show(t->pool + t->off[id], t->len[id], sh2, sizeof sh2));
            goto done;
        }
        for (int k = 0; k < t->n_added; k++)
            if (t->len[t->added[k].id] == c->str_len && !memcmp(t->pool + t->off[t->added[k].id], c->str, c->str_len)) {
                rc = sk_error(SK_EFORMAT, "%s: added token \"%s\" appears twice (ids %d and %d)", path,
                              tk_show(c->str, c->str_len, sh, sizeof sh), t->added[k].id, id);
                goto done;
            }
        if (state[id] == 0 && tk_pool_set(t, id, c->str, c->str_len)) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        state[id] = 2;
        added_tok *at = &t->added[t->n_added++];
        at->id = id; at->lstrip = (uint8_t)tk_json_flag(a, "lstrip", 0); at->rstrip = (uint8_t)tk_json_flag(a, "rstrip", 0);
        if (tk_json_flag(a, "special", 0)) {
            if (!t->special && !(t->special = calloc((size_t)V, 1))) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
            t->special[id] = 1;
        }
        if (c->str_len == 13 && memcmp(c->str, "<|endoftext|>", 13) == 0) t->eot = id;
        if (c->str_len == 17 && memcmp(c->str, "<|begin_of_text|>", 17) == 0) bos = id;
        if (c->str_len == 3 && memcmp(c->str, "<s>", 3) == 0) bos_s = id;
    }
    for (int id = 0; id < V; id++)
        if (!state[id]) { rc = sk_error(SK_EFORMAT, "%s: no token has id %d (ids must run from 0 to %d without gaps)", path, id, V - 1); goto done; }
    /* the document delimiter: <|endoftext|>, else Llama 3's <|begin_of_text|> (its BOS, which
     * Llama 3 puts before every document) */
    if (t->eot < 0) t->eot = tk_vocab_find(t, (const uint8_t *)"<|endoftext|>", 13);
    if (t->eot < 0) t->eot = bos >= 0 ? bos : tk_vocab_find(t, (const uint8_t *)"<|begin_of_text|>", 17);
    /* sentencepiece-style: <s>, the BOS Llama 2 puts before every document */
    if (t->eot < 0 && sp) t->eot = bos_s >= 0 ? bos_s : tk_vocab_find(t, (const uint8_t *)"<s>", 3);
    /* added tokens bucketed by first byte, for matching */
    {
        added_tok *sorted = malloc((size_t)(t->n_added ? t->n_added : 1) * sizeof *sorted);
        if (!sorted) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        int k = 0;
        for (int b = 0; b < 256; b++) {
            t->added_from[b] = k;
            for (int i = 0; i < t->n_added; i++)
                if ((uint8_t)t->pool[t->off[t->added[i].id]] == b) sorted[k++] = t->added[i];
        }
        t->added_from[256] = k;
        free(t->added); t->added = sorted;
    }
    if (sp ? (rc = tk_sp_tokens(t, model, path, sp_bytes)) : (rc = tk_find_byte_ids(t, path, "model.vocab has "))) goto done;
    /* merges: rank = index, later duplicates win (as in tokenizers' HashMap) */
    t->pair_mask = pow2_at_least((size_t)merges->n * 3 + 3) - 1;
    t->pairs = malloc((t->pair_mask + 1) * sizeof *t->pairs);
    if (!t->pairs) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    for (size_t i = 0; i <= t->pair_mask; i++) t->pairs[i].rank = -1;
    for (int r = 0; r < merges->n; r++) {
        const char *a, *b; size_t la, lb;
        if (hf_merge_halves(&merges->items[r], &a, &la, &b, &lb)) {
            rc = sk_error(SK_EFORMAT, "%s: model.merges[%d] is neither \"a b\" (one space) nor [\"a\", \"b\"]", path, r);
            goto done;
        }
        if (la + lb + 4 > buf_cap) {
            free(buf); buf_cap = la + lb + 4; buf = malloc(2 * buf_cap + 8);
            if (!buf) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        }
        size_t ra, rb;
        if (sp) { memcpy(buf, a, la); memcpy(buf + la, b, lb); ra = la; rb = lb; }   /* raw UTF-8 */
        else {
            ra = tk_undisplay(dec_tab, a, la, buf);
            rb = ra == (size_t)-1 ? ra : tk_undisplay(dec_tab, b, lb, buf + ra);
        }
        int32_t x = ra == (size_t)-1 ? -1 : tk_vocab_find(t, buf, ra);
        int32_t y = rb == (size_t)-1 ? -1 : tk_vocab_find(t, buf + ra, rb);
        int32_t xy = x < 0 || y < 0 ? -1 : tk_vocab_find(t, buf, ra + rb);
        if (xy < 0) {
            if (x < 0 || y < 0)
                rc = sk_error(SK_EFORMAT, "%s: model.merges[%d] (\"%s\" \"%s\") refers to a token not in the vocabulary", path, r,
                              tk_show(a, la, sh, sizeof sh), tk_show(b, lb, sh2, sizeof sh2));
            else
                rc = sk_error(SK_EFORMAT, "%s: model.merges[%d] (\"%s\" \"%s\"): the merged token is not in the vocabulary", path, r,
                              tk_show(a, la, sh, sizeof sh), tk_show(b, lb, sh2, sizeof sh2));
            goto done;
        }
        tk_pair_put(t, x, y, r, xy);
    }
done:
    free(state); free(buf);
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}

/* Whitespace as JavaScript's trim() sees it (the \s class), for lstrip/rstrip. */
static size_t skip_space(const uint8_t *s, size_t i, size_t end) {
    size_t k;
    while (i < end && tk_class_at(s, end, i, &k) == CL_S) i = k;
    return i;
}
static size_t trim_space(const uint8_t *s, size_t i, size_t end) {
    size_t last = i, k;                                  /* end of the last non-space character */
    while (i < end) { int c = tk_class_at(s, end, i, &k); if (c != CL_S) last = k; i = k; }
    return last;
}

/* The longest added token at s[i], or -1. */
static int added_at(const sk_tokenizer *t, const uint8_t *s, size_t n, size_t i) {
    int best = -1; size_t best_len = 0;
    for (int k = t->added_from[s[i]]; k < t->added_from[s[i] + 1]; k++) {
        int32_t id = t->added[k].id;
        size_t l = t->len[id];
        if (l > best_len && l <= n - i && memcmp(t->pool + t->off[id], s + i, l) == 0) { best = k; best_len = l; }
    }
    return best;
}

/* One piece of the pre-tokenizer: the optional prefix space, then words. */
static int hf_piece(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    if (n == 0) return 0;
    uint8_t *tmp = NULL;
    if (t->prefix_space && s[0] != ' ') {
        if (!(tmp = malloc(n + 1))) return 1;
        tmp[0] = ' ';
        memcpy(tmp + 1, s, n);
        s = tmp; n++;
    }
    int rc = t->use_regex ? tk_encode_words(t, s, n, ids, cnt, cap) : tk_encode_word(t, s, n, ids, cnt, cap);
    free(tmp);
    return rc;
}

/* A stretch of text between added tokens. With a Digits pre-tokenizer first, numerals (\p{N},
 * Rust's char::is_numeric) are cut out, each alone or in runs; with Llama 3's Split, the text
 * is cut at its regex's matches (Isolated: each match is a piece; the matches leave no text
 * between them). Every piece goes through ByteLevel on its own (its prefix space included),
 * as the `tokenizers` library does. */
static int hf_stretch(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    if (t->split) {
        for (size_t i = 0, e; i < n; i = e) {
            e = tk_split_next(s, n, i, t->split);
            if (hf_piece(t, s + i, e - i, ids, cnt, cap)) return 1;
        }
        return 0;
    }
    if (!t->digits) return hf_piece(t, s, n, ids, cnt, cap);
    size_t from = 0, i = 0, next;
    while (i < n) {
        if (tk_class_at(s, n, i, &next) != CL_N) { i = next; continue; }
        if (hf_piece(t, s + from, i - from, ids, cnt, cap)) return 1;
        size_t e = next;
        if (t->digits == 2)
            while (e < n && tk_class_at(s, n, e, &next) == CL_N) e = next;
        if (hf_piece(t, s + i, e - i, ids, cnt, cap)) return 1;
        from = i = e;
    }
    return hf_piece(t, s + from, n - from, ids, cnt, cap);
}



/* A stretch between added tokens through the normalizer (NFC, src/text/nfc.c), then hf_stretch:
 * the `tokenizers` library normalizes each such stretch on its own, after cutting the added
 * tokens out of the raw text (those with normalized: false, as all of Qwen2's). Or, for a
 * sentencepiece-style file, sp_stretch; first: the stretch starts the input. */
static int hf_norm_stretch(sk_tokenizer *t, const uint8_t *s, size_t n, int first, int32_t **ids, size_t *cnt, size_t *cap) {
    if (t->sp) return n ? tk_sp_stretch(t, s, n, first, ids, cnt, cap) : 0;
    if (!t->nfc || !n) return hf_stretch(t, s, n, ids, cnt, cap);
    uint8_t *o;
    size_t on;
    if (sk_nfc(s, n, &o, &on)) return 1;
    int rc = hf_stretch(t, o, on, ids, cnt, cap);
    free(o);
    return rc;
}

int tk_hf_encode(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    size_t from = 0;
    int rstrip = 0;
    for (size_t i = 0; i < n;) {
        int k = t->added_from[s[i]] < t->added_from[s[i] + 1] ? added_at(t, s, n, i) : -1;
        if (k < 0) { i++; continue; }
        const added_tok *a = &t->added[k];
        size_t b = rstrip ? skip_space(s, from, i) : from;
        size_t e = a->lstrip ? trim_space(s, b, i) : i;
        if (hf_norm_stretch(t, s + b, e - b, from == 0, ids, cnt, cap) || tk_out_push(ids, cnt, cap, &a->id, 1))
            return sk_error(SK_ENOMEM, "tokenizer: out of memory");
        i += t->len[a->id];
        from = i;
        rstrip = a->rstrip;
    }
    size_t b = rstrip ? skip_space(s, from, n) : from;
    if (hf_norm_stretch(t, s + b, n - b, from == 0, ids, cnt, cap)) return sk_error(SK_ENOMEM, "tokenizer: out of memory");
    return SK_OK;
}

int sk_tok_load_hf(sk_tokenizer **out, const char *path) {
    sk_json j;
    int rc = tk_read_json(path, &j);
    if (rc) return rc;
    rc = j.type == SK_JSON_OBJ ? tk_load_hf(out, &j, path) : sk_error(SK_EFORMAT, "%s: not a tokenizer.json (expected an object)", path);
    sk_json_free(&j);
    return rc;
}

int sk_tok_load_hf_text(sk_tokenizer **out, const char *text, size_t len, const char *name) {
    sk_json j;
    char err[160];
    if (sk_json_parse(text, len, &j, err, sizeof err)) return sk_error(SK_EFORMAT, "%s: %s", name, err);
    int rc = j.type == SK_JSON_OBJ ? tk_load_hf(out, &j, name) : sk_error(SK_EFORMAT, "%s: not a tokenizer.json (expected an object)", name);
    sk_json_free(&j);
    return rc;
}
