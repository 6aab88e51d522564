/* A tokenizer from a vocabulary as GGUF files hold it (tokenizer.ggml.*: tokens, merges,
 * scores, token types, special ids), mapped onto skiplm's Hugging Face tokenizer: the
 * vocabulary is written as the tokenizer.json that Hugging Face's converters write for the
 * same tokenizer, and loaded by tok_hf.c (sk_tok_load_hf_text), so it encodes as that file
 * does and anything skiplm cannot reproduce is refused by the same checks.
 *   - "gpt2" (byte-level BPE): its merges in their order; the pre-tokenizer chosen by
 *     tokenizer.ggml.pre: GPT-2's regex (default, gpt-2), Llama 3's Split with ignore_merges
 *     (llama-bpe, llama3), Qwen2's Split with NFC (qwen2), individual digits before GPT-2's
 *     regex (smollm); others are refused by name.
 *   - "llama" (sentencepiece BPE): Llama 2's tokenizer.json chain (Prepend and Replace of ▁ as
 *     add_space_prefix says, ByteFallback decoding) with merges made from the scores as
 *     transformers' SentencePieceExtractor makes them: every split of a normal token into two
 *     tokens, ordered by the merged token's score (highest first), then by the merged token's
 *     id and the halves' ids.
 * Control and unknown tokens become special added tokens, user-defined ones added tokens. */
#include "skiplm_text.h"
#include "base/fileio.h"
#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct { char *b; size_t len, cap; int oom; } sbuf;

static void raw(sbuf *s, const char *t) {
    if (!s->oom && sk_json_write_raw(&s->b, &s->len, &s->cap, t, strlen(t))) s->oom = 1;
}
/* a JSON string; 2 for invalid UTF-8 */
static int str(sbuf *s, const char *t, size_t n) {
    if (s->oom) return 1;
    int r = sk_json_write_str(&s->b, &s->len, &s->cap, t, n);
    if (r == 1) s->oom = 1;
    return r;
}

/* ------------------------------------------------ vocabulary lookup */

typedef struct { const sk_tok_vocab *v; int32_t *slot; size_t mask; } vmap;

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}
static int vmap_init(vmap *m, const sk_tok_vocab *v) {
    m->v = v;
    size_t cap = 16;
    while (cap < 2 * v->n_tokens + 2) cap *= 2;
    m->mask = cap - 1;
    if (!(m->slot = malloc(cap * sizeof *m->slot))) return 1;
    memset(m->slot, 0xff, cap * sizeof *m->slot);
    for (size_t i = 0; i < v->n_tokens; i++) {
        size_t k = hash(v->tokens[i], v->token_lens[i]) & m->mask;
        while (m->slot[k] >= 0) k = (k + 1) & m->mask;
        m->slot[k] = (int32_t)i;              /* duplicates: the first id is found first */
    }
    return 0;
}
static int32_t vmap_find(const vmap *m, const char *s, size_t n) {
    for (size_t k = hash(s, n) & m->mask; m->slot[k] >= 0; k = (k + 1) & m->mask) {
        int32_t id = m->slot[k];
        if (m->v->token_lens[id] == n && !memcmp(m->v->tokens[id], s, n)) return id;
    }
    return -1;
}

/* ------------------------------------------ sentencepiece merges */

typedef struct { float score; int32_t merged, l, r; } merge;

static int cmp_merge(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->merged != y->merged) return x->merged < y->merged ? -1 : 1;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

static int type_of(const sk_tok_vocab *v, size_t i) { return v->types ? v->types[i] : 1; }

/* the merges of a sentencepiece vocabulary into *out (n of them); 0, or SK_ENOMEM */
static int sp_merges(const sk_tok_vocab *v, const vmap *vm, merge **out, size_t *n) {
    size_t cap = 0;
    *out = NULL; *n = 0;
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (type_of(v, i) != 1) continue;
        const char *t = v->tokens[i];
        const size_t len = v->token_lens[i];
        for (size_t k = 1; k < len; k++) {
            if (((uint8_t)t[k] & 0xc0) == 0x80) continue;          /* splits between characters only */
            int32_t l = vmap_find(vm, t, k), r = vmap_find(vm, t + k, len - k);
            if (l < 0 || r < 0 || type_of(v, (size_t)l) != 1 || type_of(v, (size_t)r) != 1) continue;
            if (sk_grow((void **)out, &cap, *n + 1, sizeof **out)) return SK_ENOMEM;
            (*out)[(*n)++] = (merge){v->scores[i], (int32_t)i, l, r};
        }
    }
    if (*n > 1) qsort(*out, *n, sizeof **out, cmp_merge);
    return SK_OK;
}

/* ------------------------------------------------------ the json */

#define SPLIT_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define SPLIT_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

static int pre_is(const sk_tok_vocab *v, const char *name) { return v->pre && !strcmp(v->pre, name); }

int sk_tok_vocab_json(const sk_tok_vocab *v, char **json, size_t *json_len) {
    *json = NULL; *json_len = 0;
    const int bpe = v->model && !strcmp(v->model, "gpt2"), sp = v->model && !strcmp(v->model, "llama");
    if (!bpe && !sp)
        return sk_error(SK_EFORMAT, "tokenizer model '%s': skiplm reads GGUF's \"gpt2\" (byte-level BPE) and \"llama\" "
                        "(sentencepiece) vocabularies", v->model ? v->model : "(none)");
    if (v->n_tokens == 0 || v->n_tokens >= (1u << 24)) return sk_error(SK_EFORMAT, "tokenizer: %zu tokens", v->n_tokens);
    if (sp && !v->scores) return sk_error(SK_EFORMAT, "tokenizer: a \"llama\" vocabulary needs its scores (tokenizer.ggml.scores)");
    if (bpe && !v->merges) return sk_error(SK_EFORMAT, "tokenizer: a \"gpt2\" vocabulary needs its merges (tokenizer.ggml.merges)");
    const char *pre = NULL, *norm = "null";
    int ignore_merges = 0;
    if (bpe) {
        if (!v->pre || pre_is(v, "default") || pre_is(v, "gpt-2") || pre_is(v, "gpt2"))
            pre = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}";
        else if (pre_is(v, "llama-bpe") || pre_is(v, "llama3") || pre_is(v, "llama-v3")) {
            pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" SPLIT_LLAMA3 "\"},"
                  "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                  "\"trim_offsets\":true,\"use_regex\":false}]}";
            ignore_merges = 1;
        } else if (pre_is(v, "qwen2")) {
            pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" SPLIT_QWEN2 "\"},"
                  "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                  "\"trim_offsets\":false,\"use_regex\":false}]}";
            norm = "{\"type\":\"NFC\"}";
        } else if (pre_is(v, "smollm")) {
            pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                  "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}";
        } else
            return sk_error(SK_EFORMAT, "tokenizer.ggml.pre '%s': skiplm reproduces the pre-tokenizers default, gpt-2, llama-bpe, "
                            "qwen2 and smollm (load the model's Hugging Face tokenizer.json with --tokenizer instead)", v->pre);
    }
    sbuf s = {0};
    vmap vm = {0};
    merge *mg = NULL;
    size_t n_mg = 0;
    int rc = SK_OK;
    raw(&s, "{\"version\":\"1.0\",\"added_tokens\":[");
    int first = 1;
    for (size_t i = 0; i < v->n_tokens; i++) {
        const int ty = type_of(v, i);
        if (ty != 2 && ty != 3 && ty != 4) continue;
        char head[64];
        snprintf(head, sizeof head, "%s{\"id\":%zu,\"content\":", first ? "" : ",", i);
        raw(&s, head);
        if (str(&s, v->tokens[i], v->token_lens[i]) == 2) { rc = sk_error(SK_EFORMAT, "tokenizer: token %zu is not valid UTF-8", i); goto done; }
        raw(&s, ty == 4 ? ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false}"
                        : ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}");
        first = 0;
    }
    raw(&s, "],\"normalizer\":");
    if (sp) raw(&s, v->add_space_prefix ? "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
                                          "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]}"
                                        : "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}");
    else raw(&s, norm);
    raw(&s, ",\"pre_tokenizer\":");
    raw(&s, sp ? "null" : pre);
    raw(&s, ",\"post_processor\":null,\"decoder\":");
    raw(&s, sp ? "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
                 "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}"
               : "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}");
    int byte_fallback = 0;
    for (size_t i = 0; sp && v->types && i < v->n_tokens; i++) byte_fallback |= v->types[i] == 6;
    raw(&s, ",\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":");
    if (v->unk >= 0 && (size_t)v->unk < v->n_tokens) str(&s, v->tokens[v->unk], v->token_lens[v->unk]);
    else raw(&s, "null");
    raw(&s, ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null");
    raw(&s, sp ? ",\"fuse_unk\":true" : ",\"fuse_unk\":false");
    raw(&s, byte_fallback ? ",\"byte_fallback\":true" : ",\"byte_fallback\":false");
    raw(&s, ignore_merges ? ",\"ignore_merges\":true,\"vocab\":{" : ",\"ignore_merges\":false,\"vocab\":{");
    for (size_t i = 0; i < v->n_tokens; i++) {
        char id[32];
        if (i) raw(&s, ",");
        if (str(&s, v->tokens[i], v->token_lens[i]) == 2) { rc = sk_error(SK_EFORMAT, "tokenizer: token %zu is not valid UTF-8", i); goto done; }
        snprintf(id, sizeof id, ":%zu", i);
        raw(&s, id);
    }
    raw(&s, "},\"merges\":[");
    if (sp) {
        if (vmap_init(&vm, v) || sp_merges(v, &vm, &mg, &n_mg)) { rc = sk_error(SK_ENOMEM, "tokenizer: out of memory"); goto done; }
        for (size_t i = 0; i < n_mg; i++) {
            raw(&s, i ? ",[" : "[");
            str(&s, v->tokens[mg[i].l], v->token_lens[mg[i].l]);
            raw(&s, ",");
            str(&s, v->tokens[mg[i].r], v->token_lens[mg[i].r]);
            raw(&s, "]");
        }
    } else
        for (size_t i = 0; i < v->n_merges; i++) {
            if (i) raw(&s, ",");
            if (str(&s, v->merges[i], v->merge_lens[i]) == 2) { rc = sk_error(SK_EFORMAT, "tokenizer: merge %zu is not valid UTF-8", i); goto done; }
        }
    raw(&s, "]}}");
    if (s.oom) rc = sk_error(SK_ENOMEM, "tokenizer: out of memory");
done:
    free(vm.slot); free(mg);
    if (rc) { free(s.b); return rc; }
    *json = s.b; *json_len = s.len;
    return SK_OK;
}

int sk_tok_load_vocab(sk_tokenizer **tok, const sk_tok_vocab *v, const char *name) {
    char *json; size_t len;
    int rc = sk_tok_vocab_json(v, &json, &len);
    if (rc) return sk_error(rc, "%s: %s", name, sk_last_error());
    rc = sk_tok_load_hf_text(tok, json, len, name);
    free(json);
    return rc;
}

/* ------------------------------------------- a tokenizer's files -> vocabulary
 *
 * The other direction, for writing a GGUF file: GPT-2's two files (encoder.json + vocab.bpe,
 * or vocab.json + merges.txt) or a tokenizer.json, read into the arrays GGUF holds. */

typedef struct {
    char **tok; size_t *tok_len; size_t n;
    char **mrg; size_t *mrg_len; size_t n_mrg, mrg_cap;
    float *scores; int32_t *types;
    char *model, *pre;
} vocab_mem;

static void mem_free(vocab_mem *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) free(m->tok[i]);
    for (size_t i = 0; i < m->n_mrg; i++) free(m->mrg[i]);
    free(m->tok); free(m->tok_len); free(m->mrg); free(m->mrg_len); free(m->scores); free(m->types);
    free(m->model); free(m->pre); free(m);
}

void sk_tok_vocab_free(sk_tok_vocab *v) {
    mem_free(v->owned_);
    memset(v, 0, sizeof *v);
}

static char *dupn(const char *s, size_t n) {
    char *o = malloc(n + 1);
    if (o) { memcpy(o, s, n); o[n] = 0; }
    return o;
}

static int add_merge(vocab_mem *m, const char *a, size_t la, const char *b, size_t lb) {
    if (sk_grow((void **)&m->mrg, &m->mrg_cap, m->n_mrg + 1, sizeof *m->mrg)) return SK_ENOMEM;
    char *s = malloc(la + lb + 2);
    if (!s) return SK_ENOMEM;
    memcpy(s, a, la); s[la] = ' '; memcpy(s + la + 1, b, lb); s[la + lb + 1] = 0;
    m->mrg[m->n_mrg] = s;
    size_t *nl = realloc(m->mrg_len, m->mrg_cap * sizeof *nl);
    if (!nl) { free(s); return SK_ENOMEM; }
    m->mrg_len = nl;
    m->mrg_len[m->n_mrg++] = la + lb + 1;
    return SK_OK;
}

/* tokens from a JSON object token -> id (ids 0..n-1 without holes, extra ids from added) */
static int set_token(vocab_mem *m, size_t id, const char *s, size_t n, const char *path) {
    if (id >= m->n) return sk_error(SK_EFORMAT, "%s: token id %zu out of range", path, id);
    if (m->tok[id]) {
        if (m->tok_len[id] == n && !memcmp(m->tok[id], s, n)) return SK_OK;
        return sk_error(SK_EFORMAT, "%s: id %zu is given to two tokens", path, id);
    }
    if (!(m->tok[id] = dupn(s, n))) return SK_ENOMEM;
    m->tok_len[id] = n;
    return SK_OK;
}

static int read_json_file(const char *path, sk_json *j) {
    uint8_t *text; size_t n;
    char err[200];
    int rc = sk_read_file(path, &text, &n);
    if (rc) return rc;
    rc = sk_json_parse((const char *)text, n, j, err, sizeof err) ? sk_error(SK_EFORMAT, "%s: invalid JSON: %s", path, err) : SK_OK;
    free(text);
    if (!rc && j->type != SK_JSON_OBJ) { sk_json_free(j); rc = sk_error(SK_EFORMAT, "%s: not a JSON object", path); }
    return rc;
}

static int alloc_tokens(vocab_mem *m, size_t n) {
    m->n = n;
    m->tok = calloc(n ? n : 1, sizeof *m->tok);
    m->tok_len = calloc(n ? n : 1, sizeof *m->tok_len);
    m->types = malloc((n ? n : 1) * sizeof *m->types);
    if (!m->tok || !m->tok_len || !m->types) return SK_ENOMEM;
    for (size_t i = 0; i < n; i++) m->types[i] = 1;
    return SK_OK;
}

static const sk_json *jget(const sk_json *o, const char *k) { return o && o->type == SK_JSON_OBJ ? sk_json_get(o, k) : NULL; }
static int jis(const sk_json *o, const char *type) {
    const sk_json *t = jget(o, "type");
    return t && t->type == SK_JSON_STR && !strcmp(t->str, type);
}

static int from_gpt2_files(vocab_mem *m, const char *enc_path, const char *bpe_path) {
    sk_json j;
    int rc = read_json_file(enc_path, &j);
    if (rc) return rc;
    if ((rc = alloc_tokens(m, (size_t)j.n))) goto done;
    for (int i = 0; !rc && i < j.n; i++) {
        const sk_json *v = &j.items[i];
        if (v->type != SK_JSON_NUM || v->num < 0 || v->num != (double)(size_t)v->num) { rc = sk_error(SK_EFORMAT, "%s: ids must be whole numbers", enc_path); break; }
        rc = set_token(m, (size_t)v->num, j.keys[i], j.key_lens[i], enc_path);
        if (!rc && j.key_lens[i] == 13 && !memcmp(j.keys[i], "<|endoftext|>", 13)) m->types[(size_t)v->num] = 3;
    }
    for (size_t i = 0; !rc && i < m->n; i++)
        if (!m->tok[i]) rc = sk_error(SK_EFORMAT, "%s: no token has id %zu", enc_path, i);
    if (rc) goto done;
    uint8_t *text; size_t n;
    if ((rc = sk_read_file(bpe_path, &text, &n))) goto done;
    const char *p = (const char *)text, *end = p + n;
    for (int line = 0; p < end && !rc; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        size_t len = (size_t)(e - p);
        if (len && p[len - 1] == '\r') len--;
        const char *sp = len ? memchr(p, ' ', len) : NULL;
        if (len && !(line == 0 && p[0] == '#')) {
            if (!sp) rc = sk_error(SK_EFORMAT, "%s: line %d is not a merge \"a b\"", bpe_path, line + 1);
            else rc = add_merge(m, p, (size_t)(sp - p), sp + 1, len - (size_t)(sp - p) - 1);
        }
        p = nl ? nl + 1 : end;
    }
    free(text);
    if (!rc && !((m->model = dupn("gpt2", 4)) && (m->pre = dupn("gpt-2", 5)))) rc = SK_ENOMEM;
done:
    sk_json_free(&j);
    return rc == SK_ENOMEM ? sk_error(SK_ENOMEM, "out of memory") : rc;
}

/* merges by rank, for a sentencepiece-style vocabulary's scores */
static int sp_scores(vocab_mem *m, const sk_json *merges) {
    m->scores = malloc((m->n ? m->n : 1) * sizeof *m->scores);
    if (!m->scores) return SK_ENOMEM;
    for (size_t i = 0; i < m->n; i++) m->scores[i] = -1e9f;
    sk_tok_vocab v = {.tokens = (const char *const *)m->tok, .token_lens = m->tok_len, .n_tokens = m->n};
    vmap vm;
    if (vmap_init(&vm, &v)) return SK_ENOMEM;
    char *buf = NULL;
    size_t cap = 0;
    for (int r = 0; r < merges->n; r++) {
        const sk_json *e = &merges->items[r];
        const char *a, *b; size_t la, lb;
        if (e->type == SK_JSON_ARR && e->n == 2 && e->items[0].type == SK_JSON_STR && e->items[1].type == SK_JSON_STR) {
            a = e->items[0].str; la = e->items[0].str_len; b = e->items[1].str; lb = e->items[1].str_len;
        } else if (e->type == SK_JSON_STR && memchr(e->str, ' ', e->str_len)) {
            const char *sp = memchr(e->str, ' ', e->str_len);
            a = e->str; la = (size_t)(sp - e->str); b = sp + 1; lb = e->str_len - la - 1;
        } else continue;
        if (sk_grow((void **)&buf, &cap, la + lb + 1, 1)) { free(vm.slot); free(buf); return SK_ENOMEM; }
        memcpy(buf, a, la); memcpy(buf + la, b, lb);
        int32_t id = vmap_find(&vm, buf, la + lb);
        if (id >= 0 && m->scores[id] == -1e9f) m->scores[id] = (float)-r;     /* its first merge: earlier is higher */
    }
    free(vm.slot); free(buf);
    for (size_t i = 0; i < m->n; i++)
        if (m->scores[i] == -1e9f) m->scores[i] = -(float)merges->n - (float)i;   /* characters, bytes, specials */
    return SK_OK;
}

static int from_tokenizer_json(vocab_mem *m, const char *path) {
    sk_json j;
    int rc = read_json_file(path, &j);
    if (rc) return rc;
    const sk_json *model = jget(&j, "model"), *vocab = jget(model, "vocab"), *merges = jget(model, "merges");
    const sk_json *added = jget(&j, "added_tokens"), *pre = jget(&j, "pre_tokenizer"), *norm = jget(&j, "normalizer");
    if (!model || !jis(model, "BPE") || !vocab || vocab->type != SK_JSON_OBJ || !merges || merges->type != SK_JSON_ARR) {
        rc = sk_error(SK_EFORMAT, "%s: not a BPE tokenizer.json (model.type BPE with vocab and merges)", path);
        goto done;
    }
    size_t n = 0;
    for (int i = 0; i < vocab->n; i++)
        if (vocab->items[i].type == SK_JSON_NUM && vocab->items[i].num + 1 > (double)n) n = (size_t)vocab->items[i].num + 1;
    for (int i = 0; added && added->type == SK_JSON_ARR && i < added->n; i++) {
        const sk_json *id = jget(&added->items[i], "id");
        if (id && id->type == SK_JSON_NUM && id->num + 1 > (double)n) n = (size_t)id->num + 1;
    }
    if (n > (1u << 24)) { rc = sk_error(SK_EFORMAT, "%s: ids past 2^24", path); goto done; }
    if ((rc = alloc_tokens(m, n))) goto done;
    for (int i = 0; !rc && i < vocab->n; i++) {
        const sk_json *v = &vocab->items[i];
        if (v->type != SK_JSON_NUM || v->num < 0 || v->num != (double)(size_t)v->num) { rc = sk_error(SK_EFORMAT, "%s: vocab ids must be whole numbers", path); break; }
        rc = set_token(m, (size_t)v->num, vocab->keys[i], vocab->key_lens[i], path);
    }
    for (int i = 0; !rc && added && added->type == SK_JSON_ARR && i < added->n; i++) {
        const sk_json *a = &added->items[i], *id = jget(a, "id"), *c = jget(a, "content"), *sp = jget(a, "special");
        if (!id || id->type != SK_JSON_NUM || id->num < 0 || !c || c->type != SK_JSON_STR) { rc = sk_error(SK_EFORMAT, "%s: added_tokens[%d] needs an id and a content", path, i); break; }
        rc = set_token(m, (size_t)id->num, c->str, c->str_len, path);
        m->types[(size_t)id->num] = sp && sp->type == SK_JSON_BOOL && sp->boolean ? 3 : 4;
    }
    for (size_t i = 0; !rc && i < n; i++)
        if (!m->tok[i]) rc = sk_error(SK_EFORMAT, "%s: no token has id %zu", path, i);
    if (rc) goto done;
    const int sp = jis(pre, "Metaspace") || jis(norm, "Sequence") || jis(norm, "Prepend") || jis(norm, "Replace");
    if (sp) {
        const sk_json *unk = jget(model, "unk_token");
        for (size_t i = 0; i < n; i++) {
            const char *t = m->tok[i];
            if (m->tok_len[i] == 6 && !memcmp(t, "<0x", 3) && t[5] == '>') m->types[i] = 6;
            if (unk && unk->type == SK_JSON_STR && m->tok_len[i] == unk->str_len && !memcmp(t, unk->str, unk->str_len)) m->types[i] = 2;
        }
        if ((rc = sp_scores(m, merges))) goto done;
        if (!(m->model = dupn("llama", 5))) rc = SK_ENOMEM;
        goto done;
    }
    for (int r = 0; !rc && r < merges->n; r++) {
        const sk_json *e = &merges->items[r];
        if (e->type == SK_JSON_ARR && e->n == 2 && e->items[0].type == SK_JSON_STR && e->items[1].type == SK_JSON_STR)
            rc = add_merge(m, e->items[0].str, e->items[0].str_len, e->items[1].str, e->items[1].str_len);
        else if (e->type == SK_JSON_STR) {
            const char *s = memchr(e->str, ' ', e->str_len);
            rc = s ? add_merge(m, e->str, (size_t)(s - e->str), s + 1, e->str_len - (size_t)(s - e->str) - 1)
                   : sk_error(SK_EFORMAT, "%s: merges[%d] is not \"a b\"", path, r);
        } else rc = sk_error(SK_EFORMAT, "%s: merges[%d] is neither \"a b\" nor [a, b]", path, r);
    }
    if (rc) goto done;
    /* the pre-tokenizer's name in llama.cpp */
    const char *name = "gpt-2";
    const sk_json *seq = jis(pre, "Sequence") ? jget(pre, "pretokenizers") : NULL;
    const sk_json *p0 = seq && seq->type == SK_JSON_ARR && seq->n > 0 ? &seq->items[0] : NULL;
    if (p0 && jis(p0, "Digits")) name = "smollm";
    else if (p0 && jis(p0, "Split")) {
        const sk_json *re = jget(jget(p0, "pattern"), "Regex");
        name = re && re->type == SK_JSON_STR && strstr(re->str, "\\p{N}{1,3}") ? "llama-bpe" : "qwen2";
    }
    if (!((m->model = dupn("gpt2", 4)) && (m->pre = dupn(name, strlen(name))))) rc = SK_ENOMEM;
done:
    sk_json_free(&j);
    return rc == SK_ENOMEM ? sk_error(SK_ENOMEM, "out of memory") : rc;
}

int sk_tok_vocab_read(sk_tok_vocab *v, const char *path) {
    memset(v, 0, sizeof *v);
    vocab_mem *m = calloc(1, sizeof *m);
    if (!m) return sk_error(SK_ENOMEM, "out of memory");
    struct stat sb;
    int rc;
    char a[4200], b[4200];
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(a, sizeof a, "%s/encoder.json", path);
        if (stat(a, &sb) == 0) {
            snprintf(b, sizeof b, "%s/vocab.bpe", path);
            rc = from_gpt2_files(m, a, b);
        } else {
            snprintf(a, sizeof a, "%s/tokenizer.json", path);
            if (stat(a, &sb) == 0) rc = from_tokenizer_json(m, a);
            else {
                snprintf(a, sizeof a, "%s/vocab.json", path);
                snprintf(b, sizeof b, "%s/merges.txt", path);
                rc = from_gpt2_files(m, a, b);
            }
        }
    } else rc = from_tokenizer_json(m, path);
    if (rc) { mem_free(m); return rc; }
    v->owned_ = m;
    v->model = m->model; v->pre = m->pre;
    v->tokens = (const char *const *)m->tok; v->token_lens = m->tok_len; v->n_tokens = m->n;
    v->scores = m->scores; v->types = m->types;
    v->merges = (const char *const *)m->mrg; v->merge_lens = m->mrg_len; v->n_merges = m->n_mrg;
    v->unk = -1;
    for (size_t i = 0; i < m->n; i++) if (m->types[i] == 2) { v->unk = (int)i; break; }
    v->add_space_prefix = 1;
    return SK_OK;
}
