/* Tokenizers: GPT-2 byte-level BPE, Hugging Face tokenizer.json (byte-level BPE) and a
 * character-level tokenizer (docs/data.md).
 *
 * Sections: UTF-8 and character classes | hash tables | the tokenizer object |
 * GPT-2 loading | GPT-2 pre-tokenization and BPE | tokenizer.json | character tokenizer |
 * common API.
 *
 * The GPT-2 encoder reproduces npm gpt-3-encoder's encode() id for id, quirks included:
 *  - pre-tokenization is its regex with the `u` flag, so \s, \p{L} and \p{N} are
 *    JavaScript's classes (src/text/unicode_tables.h, generated from Node);
 *  - a pair's merge rank is looked up under the string key first + "," + second (a JS
 *    object keyed by an array), so a pair such as ("\",", "\"") shares the rank of the
 *    merge ("\"", ",\""). Eleven such pairs exist in GPT-2's vocab.bpe;
 *  - among pairs of equal rank the last one in the word is merged (all its occurrences,
 *    left to right). */
#include "skiplm_text.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/utf8.h"
#include "text/nfc.h"
#include "text/tokenizer_internal.h"
#include "text/unicode_tables.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------- UTF-8 and character classes */

enum { CL_O = 0, CL_L = 1, CL_N = 2, CL_S = 3 };   /* other, letter, number, JS \s */
#define CP_INVALID SK_UTF8_INVALID

/* The character at s[0..n) (n >= 1): its byte length and code point; an ill-formed or truncated
 * sequence is a character of one byte, CP_INVALID. */
static inline size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    size_t len = sk_utf8_decode(s, n, cp);
    return len ? len : 1;
}

static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int cp_class(uint32_t cp) {
    if (cp < 128) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CL_L;
        if (cp >= '0' && cp <= '9') return CL_N;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return CL_S;
        return CL_O;
    }
    if (cp == CP_INVALID) return CL_O;     /* an invalid byte behaves like punctuation */
    if (in_ranges(sk_uni_letter, SK_UNI_N_LETTER, cp)) return CL_L;
    if (in_ranges(sk_uni_number, SK_UNI_N_NUMBER, cp)) return CL_N;
    if (in_ranges(sk_uni_space, SK_UNI_N_SPACE, cp)) return CL_S;
    return CL_O;
}

/* Class of the character at s[i] (i < n); its end goes to *next. */
static int class_at(const uint8_t *s, size_t n, size_t i, size_t *next) {
    if (s[i] < 128) { *next = i + 1; return cp_class(s[i]); }
    uint32_t cp;
    *next = i + utf8_decode(s + i, n - i, &cp);
    return cp_class(cp);
}

/* For tests/tool_tok.c (text/tokenizer_internal.h) */
int sk_tok_unicode_class_(uint32_t cp) { return cp_class(cp); }
const char *sk_tok_unicode_version_(void) { return SK_UNICODE_VERSION; }

/* ------------------------------------------------------------- hash tables */

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;               /* FNV-1a, then a finalizer */
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ULL; }
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33;
    return h;
}
static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}
static size_t pow2_at_least(size_t n) { size_t p = 16; while (p < n) p <<= 1; return p; }

typedef struct { uint64_t key; int32_t rank, merged; } pair_slot;   /* key = a<<32 | b */

/* BPE cache entry: a word's bytes live in cache_bytes, its ids in cache_ids. */
typedef struct { uint64_t h; uint32_t w_off, w_len, i_off, i_n; } cache_slot;
#define CACHE_MAX_WORD 64
#define CACHE_MAX_ENTRIES (1u << 20)

/* ------------------------------------------------------- the tokenizer object */

enum { KIND_GPT2 = 1, KIND_CHAR = 2, KIND_HF = 3 };
enum { SP_ALWAYS = 1, SP_FIRST = 2, SP_NEVER = 3 };   /* Metaspace's prepend_scheme */

/* A tokenizer.json added token: matched in the raw text before pre-tokenization. */
typedef struct { int32_t id; uint8_t lstrip, rstrip; } added_tok;

struct sk_tokenizer {
    int kind;
    int vocab_size;
    int eot;
    /* token bytes, for decoding: token i is pool[off[i] .. off[i]+len[i]) + NUL */
    char *pool; size_t pool_len, pool_cap;
    uint32_t *off, *len;
    /* GPT-2 */
    int32_t *vocab_tab; size_t vocab_mask;     /* open addressing over ids, -1 empty */
    pair_slot *pairs; size_t pair_mask;        /* rank -1: empty */
    int32_t byte_id[256];
    cache_slot *cache; size_t cache_mask, cache_count;
    uint8_t *cache_bytes; size_t cb_len, cb_cap;
    int32_t *cache_ids; size_t ci_len, ci_cap;
    /* char: code points by id, and (cp, id) sorted by cp for lookup */
    uint32_t *cps;
    uint32_t (*sorted)[2];
    int32_t ascii_id[128];
    /* tokenizer.json (KIND_HF; BPE as GPT-2 above, in Hugging Face's merge order) */
    int prefix_space, use_regex, ignore_merges;
    int digits;                                /* Digits pre-tokenizer: 0 none, 1 each numeral alone, 2 runs */
    int split;                                 /* Split (Llama 3's regex): 0 none, else its longest numeral run */
    int nfc;                                   /* the NFC normalizer (Qwen2's) */
    /* sentencepiece-style files (Llama 2's, Mistral's): each stretch is one BPE word of
     * characters, spaces as U+2581; see the section "sentencepiece-style BPE" below */
    int sp;                                    /* 1 for such a file */
    int sp_prepend, sp_replace;                /* normalizer: Prepend("\u2581"), Replace(" " -> "\u2581") */
    int sp_meta;                               /* Metaspace pre-tokenizer: 0 none, SP_ALWAYS, SP_FIRST, SP_NEVER */
    int byte_fallback, fuse_unk;
    int32_t unk;                               /* unk_token's id, or -1 */
    /* decoded text of each token where it differs from the pool (sp: U+2581 as a space,
     * <0xXX> as its byte); NULL: the pool is the decoded text */
    char *dpool; size_t dpool_len, dpool_cap;
    uint32_t *doff, *dlen;
    added_tok *added; int n_added;             /* sorted by first byte; bytes in the pool */
    uint8_t *special;                          /* tokenizer.json: 1 for an added token with "special": true (NULL: none) */
    int added_from[257];                       /* added[added_from[b] .. added_from[b+1]) start with byte b */
};

static sk_tokenizer *tok_new(int kind, int vocab_size) {
    sk_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind; t->vocab_size = vocab_size; t->eot = -1;
    t->off = calloc((size_t)vocab_size + 1, sizeof *t->off);
    t->len = calloc((size_t)vocab_size + 1, sizeof *t->len);
    if (!t->off || !t->len) { sk_tok_free(t); return NULL; }
    return t;
}

static int pool_set(sk_tokenizer *t, int id, const void *bytes, size_t n) {
    if (sk_grow((void **)&t->pool, &t->pool_cap, t->pool_len + n + 1, 1)) return 1;
    memcpy(t->pool + t->pool_len, bytes, n);
    t->pool[t->pool_len + n] = 0;
    t->off[id] = (uint32_t)t->pool_len; t->len[id] = (uint32_t)n;
    t->pool_len += n + 1;
    return 0;
}

void sk_tok_free(sk_tokenizer *t) {
    if (!t) return;
    free(t->pool); free(t->off); free(t->len); free(t->vocab_tab); free(t->pairs);
    free(t->cache); free(t->cache_bytes); free(t->cache_ids); free(t->cps); free(t->sorted);
    free(t->added); free(t->dpool); free(t->doff); free(t->dlen); free(t->special);
    free(t);
}

/* ------------------------------------------------------------- GPT-2 loading */

/* GPT-2 shows each byte as a printable character: bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves, the other 68 map to U+0100.. in byte order. */
static void byte_alphabet(uint32_t enc[256], int16_t dec[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        enc[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
        dec[enc[b]] = (int16_t)b;
    }
}

/* Map a GPT-2 display string (UTF-8) to raw bytes in out (capacity >= slen). Returns the
 * length, or (size_t)-1 if it holds a character outside the byte alphabet. */
static size_t undisplay(const int16_t dec[324], const char *s, size_t slen, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < slen;) {
        uint32_t cp;
        i += utf8_decode((const uint8_t *)s + i, slen - i, &cp);
        if (cp >= 324 || dec[cp] < 0) return (size_t)-1;
        out[o++] = (uint8_t)dec[cp];
    }
    return o;
}

static int32_t vocab_find(const sk_tokenizer *t, const uint8_t *s, size_t n) {
    size_t i = (size_t)hash_bytes(s, n) & t->vocab_mask;
    for (;;) {
        int32_t id = t->vocab_tab[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->pool + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->vocab_mask;
    }
}
/* Insert id (its bytes already in the pool); returns the existing id on a duplicate. */
static int32_t vocab_insert(sk_tokenizer *t, int32_t id) {
    const uint8_t *s = (const uint8_t *)t->pool + t->off[id];
    size_t n = t->len[id];
    size_t i = (size_t)hash_bytes(s, n) & t->vocab_mask;
    for (;;) {
        int32_t e = t->vocab_tab[i];
        if (e < 0) { t->vocab_tab[i] = id; return -1; }
        if (t->len[e] == n && memcmp(t->pool + t->off[e], s, n) == 0) return e;
        i = (i + 1) & t->vocab_mask;
    }
}

static pair_slot *pair_find(const sk_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = (size_t)hash_u64(key) & t->pair_mask;
    for (;;) {
        pair_slot *p = &t->pairs[i];
        if (p->rank < 0 || p->key == key) return p;
        i = (i + 1) & t->pair_mask;
    }
}

/* Print-safe copy of a token for error messages (control bytes as \xNN, cut at 40). */
static const char *show(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o > 40) { memcpy(buf + o, "...", 3); o += 3; break; }
        if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else if (c == '"' || c == '\\') { buf[o++] = '\\'; buf[o++] = (char)c; }
        else buf[o++] = (char)c;
    }
    buf[o] = 0;
    return buf;
}

/* Read and parse a JSON file; errors name the file (and the byte offset). */
static int read_json(const char *path, sk_json *j) {
    uint8_t *text; size_t n;
    int rc = sk_read_file(path, &text, &n);
    if (rc) return rc;                     /* "<path>: cannot open: ..." */
    char err[256];
    rc = sk_json_parse((const char *)text, n, j, err, sizeof err);
    free(text);
    return rc ? sk_error(SK_EFORMAT, "%s: invalid JSON: %s", path, err) : SK_OK;
}

/* Every single byte must be a token (byte-level BPE starts from them): fill t->byte_id, or
 * fail naming the first missing byte and how GPT-2 shows it. */
static int find_byte_ids(sk_tokenizer *t, const char *path, const char *where) {
    uint32_t enc[256]; int16_t dec[324];
    byte_alphabet(enc, dec);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b, shown[4];
        t->byte_id[b] = vocab_find(t, &c, 1);
        if (t->byte_id[b] < 0) {
            char sh[16];
            return sk_error(SK_EFORMAT, "%s: %sno token for byte 0x%02x (\"%s\"; byte-level BPE needs all 256 single bytes)",
                            path, where, b, show((const char *)shown, sk_utf8_encode(enc[b], shown), sh, sizeof sh));
        }
    }
    return SK_OK;
}

static int load_encoder(sk_tokenizer **out, const char *path, const int16_t dec[324]) {
    sk_json j;
    int rc = read_json(path, &j);
    if (rc) return rc;
    if (j.type != SK_JSON_OBJ || j.n == 0) {
        sk_json_free(&j);
        return sk_error(SK_EFORMAT, "%s: expected a non-empty JSON object mapping tokens to ids", path);
    }
    int V = j.n;
    sk_tokenizer *t = tok_new(KIND_GPT2, V);
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
                          show(key, klen, sh, sizeof sh));
            goto done;
        }
        if (v->num < 0 || v->num >= V) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): id %.0f out of range [0, %d)", path, i,
                          show(key, klen, sh, sizeof sh), v->num, V);
            goto done;
        }
        int id = (int)v->num;
        if (seen[id]) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): duplicate id %d", path, i,
                          show(key, klen, sh, sizeof sh), id);
            goto done;
        }
        seen[id] = 1;
        if (klen > buf_cap) {
            free(buf); buf_cap = klen; buf = malloc(buf_cap);
            if (!buf) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        }
        size_t bl = klen ? undisplay(dec, key, klen, buf) : 0;
        if (klen == 0 || bl == (size_t)-1) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): %s", path, i, show(key, klen, sh, sizeof sh),
                          klen ? "character outside GPT-2's byte alphabet" : "empty token");
            goto done;
        }
        if (pool_set(t, id, buf, bl)) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        int32_t dup = vocab_insert(t, id);
        if (dup >= 0) {
            rc = sk_error(SK_EFORMAT, "%s: entry %d (\"%s\"): same token as id %d", path, i,
                          show(key, klen, sh, sizeof sh), dup);
            goto done;
        }
        if (klen == 13 && memcmp(key, "<|endoftext|>", 13) == 0) t->eot = id;
    }
    rc = find_byte_ids(t, path, "");
done:
    sk_json_free(&j);
    free(seen); free(buf);
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}

static int pair_put(sk_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    pair_slot *p = pair_find(t, a, b);
    p->key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    p->rank = rank; p->merged = merged;
    return 0;
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
                          path, line_no, show(line, ll, sh, sizeof sh));
            break;
        }
        size_t la = (size_t)(sp - line), lb = ll - la - 1;
        size_t ra = undisplay(dec, line, la, key);
        size_t rb = ra == (size_t)-1 ? ra : undisplay(dec, sp + 1, lb, key + ra + 1);
        if (ra == (size_t)-1 || rb == (size_t)-1) {
            rc = sk_error(SK_EFORMAT, "%s:%d: merge \"%s\": character outside GPT-2's byte alphabet",
                          path, line_no, show(line, ll, sh, sizeof sh));
            break;
        }
        int32_t a = vocab_find(t, key, ra), b = vocab_find(t, key + ra + 1, rb);
        memcpy(tmp, key, ra); memcpy(tmp + ra, key + ra + 1, rb);
        int32_t m = vocab_find(t, tmp, ra + rb);
        if (a < 0 || b < 0 || m < 0) {
            const char *which = a < 0 ? line : b < 0 ? sp + 1 : NULL;
            size_t wl = a < 0 ? la : lb;
            if (which)
                rc = sk_error(SK_EFORMAT, "%s:%d: merge \"%s\" refers to unknown token \"%s\"", path, line_no,
                              show(line, ll, sh, sizeof sh), show(which, wl, sh2, sizeof sh2));
            else
                rc = sk_error(SK_EFORMAT, "%s:%d: merge \"%s\": the merged token is not in the encoder",
                              path, line_no, show(line, ll, sh, sizeof sh));
            break;
        }
        /* The JS key first + "," + second: every split of it at a comma into two known
         * tokens whose concatenation is known gets this rank (later lines overwrite). */
        key[ra] = ',';
        size_t kl = ra + 1 + rb;
        for (size_t p = 0; p < kl; p++) {
            if (key[p] != ',') continue;
            int32_t x = vocab_find(t, key, p), y = vocab_find(t, key + p + 1, kl - p - 1);
            if (x < 0 || y < 0) continue;
            memcpy(tmp, key, p); memcpy(tmp + p, key + p + 1, kl - p - 1);
            int32_t xy = vocab_find(t, tmp, kl - 1);
            if (xy >= 0) pair_put(t, x, y, rank, xy);
        }
        rank++;
    }
    free(text); free(key); free(tmp);
    if (!rc && rank == 0) rc = sk_error(SK_EFORMAT, "%s: no merges", path);
    return rc;
}

int sk_tok_load_gpt2(sk_tokenizer **out, const char *encoder_json, const char *vocab_bpe) {
    uint32_t enc[256]; int16_t dec[324];
    byte_alphabet(enc, dec);
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

/* ------------------------------------------- GPT-2 pre-tokenization and BPE */

/* End of the regex match that starts at s[i] (i < n):
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t pretok_next(const uint8_t *s, size_t n, size_t i) {
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            uint8_t b = s[i + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        }
    }
    size_t j, k;
    int c = class_at(s, n, i, &j);
    size_t p = i;
    int pc = c;
    if (s[i] == ' ' && j < n) {            /* " ?" then a letter, number or other run */
        size_t j2;
        int c2 = class_at(s, n, j, &j2);
        if (c2 != CL_S) { p = j; pc = c2; }
    }
    if (pc != CL_S) {
        size_t e;
        class_at(s, n, p, &e);
        while (e < n && class_at(s, n, e, &k) == pc) e = k;
        return e;
    }
    /* whitespace run [i, e); last character starts at last */
    size_t e = j, last = i;
    while (e < n && class_at(s, n, e, &k) == CL_S) { last = e; e = k; }
    if (e == n || last == i) return e;   /* \s+(?!\S) takes it all at the end; one char: \s+ */
    return last;                          /* \s+(?!\S) backs off one character */
}

/* Class of the character at s[i] for the Split regex below, whose \s is Unicode's White_Space
 * (Oniguruma's, and transformers.js's rewrite of it): JavaScript's \s of cp_class, which
 * GPT-2's regex uses, with U+0085 and without U+FEFF (the only two differences). */
static int ws_class_at(const uint8_t *s, size_t n, size_t i, size_t *next) {
    int c = class_at(s, n, i, next);
    if (*next - i == 2 && s[i] == 0xC2 && s[i + 1] == 0x85) return CL_S;
    if (*next - i == 3 && s[i] == 0xEF && s[i + 1] == 0xBB && s[i + 2] == 0xBF) return CL_O;
    return c;
}

/* End of the match of Llama 3's pre-tokenizer regex (GPT-4's cl100k) that starts at s[i] (i < n):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2's has \p{N} for \p{N}{1,3}: max_digits 1. The first alternative that matches wins, as in
 * a backtracking regex. Every character starts a match, so the matches tile the text. (?i:)
 * folds as Oniguruma (the Rust library) and tiktoken do: 'S and 'RE match, and U+017F (long
 * s) matches s; transformers.js folds ASCII only. */
static size_t split_next(const uint8_t *s, size_t n, size_t i, int max_digits) {
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t a = s[i + 1] | 0x20, b = i + 2 < n ? s[i + 2] | 0x20 : 0;    /* ASCII lower case */
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3;   /* U+017F */
    }
    size_t j, k, e;
    int c = ws_class_at(s, n, i, &j);
    int crlf = s[i] == '\r' || s[i] == '\n';
    size_t p = c == CL_L ? i : j;                   /* [^\r\n\p{L}\p{N}]?\p{L}+: letters from p */
    if ((c == CL_L || (c != CL_N && !crlf)) && p < n && class_at(s, n, p, &k) == CL_L) {
        for (e = k; e < n && class_at(s, n, e, &k) == CL_L;) e = k;
        return e;
    }
    if (c == CL_N) {                                /* \p{N}{1,3} */
        e = j;
        for (int d = 1; d < max_digits && e < n && class_at(s, n, e, &k) == CL_N; d++) e = k;
        return e;
    }
    p = s[i] == ' ' && j < n ? j : i;               /* " ?[^\s\p{L}\p{N}]+[\r\n]*": other from p */
    if (ws_class_at(s, n, p, &e) == CL_O) {
        while (e < n && ws_class_at(s, n, e, &k) == CL_O) e = k;
        while (e < n && (s[e] == '\r' || s[e] == '\n')) e++;
        return e;
    }
    /* whitespace run [i, e): \s*[\r\n]+ ends after its last CR or LF; else as in pretok_next */
    size_t last = i, nl = crlf ? j : 0;
    for (e = j; e < n && ws_class_at(s, n, e, &k) == CL_S; e = k) {
        last = e;
        if (s[e] == '\r' || s[e] == '\n') nl = k;
    }
    if (nl) return nl;
    return e == n || last == i ? e : last;
}

/* Exposed for src/text/bpe_train.c (text/tokenizer_internal.h), so the trainer splits text
 * exactly as the encoder does: end of the pre-token starting at s[i], and GPT-2's display
 * code point of each byte. */
size_t sk_tok_pretok_next_(const uint8_t *s, size_t n, size_t i) { return pretok_next(s, n, i); }
void sk_tok_byte_alphabet_(uint32_t enc[256]) { int16_t dec[324]; byte_alphabet(enc, dec); }

static int out_push(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t k) {
    if (sk_grow((void **)ids, cap, *n + k, sizeof **ids)) return 1;
    memcpy(*ids + *n, src, k * sizeof *src);
    *n += k;
    return 0;
}

/* BPE of one pre-token w[0..len): writes len or fewer ids to syms (capacity len) and
 * returns how many; ranks is scratch of len ints. */
static size_t bpe_word(const sk_tokenizer *t, const uint8_t *w, size_t len, int32_t *syms, int32_t *ranks) {
    size_t n = len;
    for (size_t i = 0; i < n; i++) syms[i] = t->byte_id[w[i]];
    while (n > 1) {
        int32_t best = INT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            const pair_slot *p = pair_find(t, syms[i], syms[i + 1]);
            ranks[i] = p->rank < 0 ? INT32_MAX : p->rank;
            if (ranks[i] <= best && ranks[i] != INT32_MAX) { best = ranks[i]; at = i; }
        }
        if (best == INT32_MAX) break;
        int32_t first = syms[at], second = syms[at + 1];
        int32_t merged = pair_find(t, first, second)->merged;
        size_t o = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && syms[i] == first && syms[i + 1] == second) { syms[o++] = merged; i += 2; }
            else syms[o++] = syms[i++];
        }
        n = o;
    }
    return n;
}

static void cache_clear(sk_tokenizer *t) {
    if (t->cache) memset(t->cache, 0, (t->cache_mask + 1) * sizeof *t->cache);
    t->cache_count = 0; t->cb_len = 0; t->ci_len = 0;
}

/* Cached word lookup; slot index or (size_t)-1 on a miss (then *ins is where to insert). */
static size_t cache_find(const sk_tokenizer *t, const uint8_t *w, size_t len, uint64_t h, size_t *ins) {
    size_t i = (size_t)h & t->cache_mask;
    for (;;) {
        const cache_slot *c = &t->cache[i];
        if (c->w_len == 0) { *ins = i; return (size_t)-1; }
        if (c->h == h && c->w_len == len && memcmp(t->cache_bytes + c->w_off, w, len) == 0) return i;
        i = (i + 1) & t->cache_mask;
    }
}

static int cache_add(sk_tokenizer *t, size_t slot, const uint8_t *w, size_t len, uint64_t h,
                     const int32_t *ids, size_t k) {
    if (sk_grow((void **)&t->cache_bytes, &t->cb_cap, t->cb_len + len, 1)) return 1;
    if (sk_grow((void **)&t->cache_ids, &t->ci_cap, t->ci_len + k, sizeof *t->cache_ids)) return 1;
    memcpy(t->cache_bytes + t->cb_len, w, len);
    memcpy(t->cache_ids + t->ci_len, ids, k * sizeof *ids);
    cache_slot *c = &t->cache[slot];
    c->h = h; c->w_off = (uint32_t)t->cb_len; c->w_len = (uint32_t)len;
    c->i_off = (uint32_t)t->ci_len; c->i_n = (uint32_t)k;
    t->cb_len += len; t->ci_len += k;
    t->cache_count++;
    return 0;
}

static int cache_grow(sk_tokenizer *t) {
    size_t ncap = t->cache ? (t->cache_mask + 1) * 2 : 1u << 14;
    cache_slot *nc = calloc(ncap, sizeof *nc);
    if (!nc) return 1;
    if (t->cache) {
        for (size_t i = 0; i <= t->cache_mask; i++) {
            cache_slot c = t->cache[i];
            if (!c.w_len) continue;
            size_t j = (size_t)c.h & (ncap - 1);
            while (nc[j].w_len) j = (j + 1) & (ncap - 1);
            nc[j] = c;
        }
    }
    free(t->cache);
    t->cache = nc; t->cache_mask = ncap - 1;
    return 0;
}

/* Hugging Face's BPE (tokenizers' Word::merge_all) over the symbols syms[0..len): repeatedly
 * merge the adjacent pair of lowest rank, the leftmost one among equals, one occurrence at a
 * time; a merged symbol keeps its left part's position. A binary heap of (rank, position)
 * with stale entries skipped makes it O(len log len). This differs from bpe_word (which
 * merges every occurrence of the best pair at once) only for merge lists whose ranks are not
 * in training order, e.g. (aa, a) ranked before (a, a): "aaaa" gives aaa|a here, aa|aa there.
 * A symbol < 0 (a character outside the vocabulary) never merges. On return the symbols
 * left are syms[0], syms[next[0]], ... until -1 (next = link + len; merged-away ones are -1).
 * link: 2*len scratch; heap: 3*len scratch (len - 1 pairs at first, at most two per merge). */
static void bpe_merge_hf(const sk_tokenizer *t, int32_t *syms, size_t len, int32_t *link, uint64_t *heap) {
    int32_t *prev = link, *next = link + len;
    size_t nh = 0;
#define HEAP_PUSH(key) do {                                                              \
        uint64_t k_ = (key); size_t c_ = nh++;                                           \
        while (c_ && heap[(c_ - 1) / 2] > k_) { heap[c_] = heap[(c_ - 1) / 2]; c_ = (c_ - 1) / 2; } \
        heap[c_] = k_;                                                                   \
    } while (0)
    for (size_t i = 0; i < len; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < len; i++) {
        if (syms[i] < 0 || syms[i + 1] < 0) continue;
        const pair_slot *p = pair_find(t, syms[i], syms[i + 1]);
        if (p->rank >= 0) HEAP_PUSH((uint64_t)p->rank << 32 | i);
    }
    while (nh) {
        uint64_t top = heap[0], last = heap[--nh];
        size_t c = 0;                                   /* sift the last entry down from the root */
        for (;;) {
            size_t k = 2 * c + 1;
            if (k >= nh) break;
            if (k + 1 < nh && heap[k + 1] < heap[k]) k++;
            if (heap[k] >= last) break;
            heap[c] = heap[k]; c = k;
        }
        if (nh) heap[c] = last;
        int32_t pos = (int32_t)(top & 0xffffffffu), rank = (int32_t)(top >> 32);
        int32_t nx = next[pos];
        if (syms[pos] < 0 || nx < 0) continue;          /* merged away, or now last */
        const pair_slot *p = pair_find(t, syms[pos], syms[nx]);
        if (p->rank != rank) continue;                  /* stale: the pair here has changed */
        syms[pos] = p->merged;
        syms[nx] = -1;
        next[pos] = next[nx];
        if (next[pos] >= 0) prev[next[pos]] = pos;
        if (prev[pos] >= 0 && syms[prev[pos]] >= 0) {
            const pair_slot *q = pair_find(t, syms[prev[pos]], syms[pos]);
            if (q->rank >= 0) HEAP_PUSH((uint64_t)q->rank << 32 | (uint32_t)prev[pos]);
        }
        if (next[pos] >= 0 && syms[next[pos]] >= 0) {
            const pair_slot *q = pair_find(t, syms[pos], syms[next[pos]]);
            if (q->rank >= 0) HEAP_PUSH((uint64_t)q->rank << 32 | (uint32_t)pos);
        }
    }
#undef HEAP_PUSH
}

/* bpe_merge_hf on the bytes of one pre-token w[0..len): writes the ids left to syms
 * (capacity len) and returns how many. link: 2*len scratch; heap: 3*len scratch. */
static size_t bpe_word_hf(const sk_tokenizer *t, const uint8_t *w, size_t len, int32_t *syms,
                          int32_t *link, uint64_t *heap) {
    for (size_t i = 0; i < len; i++) syms[i] = t->byte_id[w[i]];
    bpe_merge_hf(t, syms, len, link, heap);
    const int32_t *next = link + len;
    size_t o = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) syms[o++] = syms[i];
    return o;
}

/* Make room for one more cache entry (grow the table, or clear it when full). */
static int cache_ready(sk_tokenizer *t) {
    if (t->cache && (t->cache_count + 1) * 2 <= t->cache_mask + 1) return 0;
    if (t->cache_count >= CACHE_MAX_ENTRIES) { cache_clear(t); return 0; }
    return cache_grow(t);
}

/* The ids of one pre-token w[0..len), appended to ids: a single byte directly, short words
 * through the cache, the rest by BPE on the heap. */
static int encode_word(sk_tokenizer *t, const uint8_t *w, size_t len, int32_t **ids, size_t *cnt, size_t *cap) {
    if (len == 1) return out_push(ids, cnt, cap, &t->byte_id[w[0]], 1);
    if (t->ignore_merges) {                             /* a whole word in the vocabulary wins */
        int32_t id = vocab_find(t, w, len);
        if (id >= 0) return out_push(ids, cnt, cap, &id, 1);
    }
    int hf = t->kind == KIND_HF;
    size_t ins = 0, hit = (size_t)-1;
    uint64_t h = 0;
    if (len <= CACHE_MAX_WORD) {
        if (cache_ready(t)) return 1;
        h = hash_bytes(w, len) | 1;
        hit = cache_find(t, w, len, h, &ins);
        if (hit != (size_t)-1) {
            const cache_slot *c = &t->cache[hit];
            return out_push(ids, cnt, cap, t->cache_ids + c->i_off, c->i_n);
        }
        int32_t syms[CACHE_MAX_WORD], work[2 * CACHE_MAX_WORD];
        uint64_t heap[3 * CACHE_MAX_WORD];
        size_t k = hf ? bpe_word_hf(t, w, len, syms, work, heap) : bpe_word(t, w, len, syms, work);
        return out_push(ids, cnt, cap, syms, k) || cache_add(t, ins, w, len, h, syms, k);
    }
    int32_t *syms = malloc(3 * len * sizeof *syms);
    uint64_t *heap = hf ? malloc(3 * len * sizeof *heap) : NULL;
    if (!syms || (hf && !heap)) { free(syms); free(heap); return 1; }
    size_t k = hf ? bpe_word_hf(t, w, len, syms, syms + len, heap) : bpe_word(t, w, len, syms, syms + len);
    int rc = out_push(ids, cnt, cap, syms, k);
    free(syms); free(heap);
    return rc;
}

/* Pre-tokenize s[0..n) and encode each pre-token; non-zero only when out of memory. */
static int encode_words(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    for (size_t i = 0; i < n;) {
        size_t e = pretok_next(s, n, i);
        if (encode_word(t, s + i, e - i, ids, cnt, cap)) return 1;
        i = e;
    }
    return 0;
}

static int gpt2_encode(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    if (encode_words(t, s, n, ids, cnt, cap)) return sk_error(SK_ENOMEM, "tokenizer: out of memory");
    return SK_OK;
}

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

static int json_flag(const sk_json *obj, const char *key, int def) {
    const sk_json *v = sk_json_get(obj, key);
    return v && v->type == SK_JSON_BOOL ? v->boolean : def;
}

/* obj[key] is the string want */
static int json_str_is(const sk_json *obj, const char *key, const char *want) {
    const sk_json *v = obj && obj->type == SK_JSON_OBJ ? sk_json_get(obj, key) : NULL;
    return v && v->type == SK_JSON_STR && v->str_len == strlen(want) && memcmp(v->str, want, v->str_len) == 0;
}
static int json_is(const sk_json *v, const char *type) { return json_str_is(v, "type", type); }

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
                        re && re->type == SK_JSON_STR ? show(re->str, re->str_len, sh, sizeof sh) : "other than a Regex");
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
    *nfc = norm && json_is(norm, "NFC");
    if (norm && norm->type != SK_JSON_NULL && !*nfc) return hf_refuse(path, "the normalizer", norm);
    if (pre && json_is(pre, "Sequence")) {       /* [Digits or Split,] ByteLevel: SmolLM's, StarCoder's, Llama 3's */
        const sk_json *seq = sk_json_get(pre, "pretokenizers");
        if (!seq || seq->type != SK_JSON_ARR || seq->n < 1)
            return sk_error(SK_EFORMAT, "%s: pre_tokenizer: a Sequence needs a non-empty \"pretokenizers\" array", path);
        for (int i = 0; i < seq->n; i++) {
            const sk_json *p = &seq->items[i];
            if (json_is(p, "Digits") && i == 0 && seq->n == 2) {
                const sk_json *ind = sk_json_get(p, "individual_digits");
                if (ind && ind->type != SK_JSON_BOOL)
                    return sk_error(SK_EFORMAT, "%s: pre_tokenizer: Digits' individual_digits must be true or false", path);
                *digits = ind && ind->boolean ? 1 : 2;
                continue;
            }
            if (json_is(p, "Split") && i == 0 && seq->n == 2) {
                int rc = hf_split(p, path, split);
                if (rc) return rc;
                continue;
            }
            if (json_is(p, "ByteLevel") && i == seq->n - 1) continue;
            if (json_is(p, "Digits") || json_is(p, "Split") || json_is(p, "ByteLevel"))
                return sk_error(SK_EFORMAT, "%s: pre_tokenizer: a Sequence must be [Digits or Split,] ByteLevel (found %s at %d of %d)",
                                path, sk_json_get(p, "type")->str, i + 1, seq->n);
            return hf_refuse(path, "the pre-tokenizer in the Sequence", p);
        }
        pre = &seq->items[seq->n - 1];
    }
    if (!json_is(pre, "ByteLevel")) return pre && pre->type != SK_JSON_NULL ? hf_refuse(path, "the pre-tokenizer", pre)
                                          : sk_error(SK_EFORMAT, "%s: no pre_tokenizer: skiplm reads byte-level BPE tokenizers (ByteLevel)", path);
    if (!json_is(dec, "ByteLevel")) return dec && dec->type != SK_JSON_NULL ? hf_refuse(path, "the decoder", dec)
                                          : sk_error(SK_EFORMAT, "%s: no decoder: skiplm reads byte-level BPE tokenizers (ByteLevel)", path);
    *pre_io = pre;                               /* the ByteLevel, whose options load_hf reads */
    return SK_OK;
}

/* ------------------------------------------- sentencepiece-style BPE (Llama 2's)
 *
 * Llama 2, TinyLlama, Mistral and llama2.c's files: no byte-level alphabet. A stretch of text
 * between added tokens has its spaces replaced by U+2581 ("▁") and gets a ▁ in front, either
 * by the normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] (older conversions, every
 * non-empty stretch) or by the Metaspace pre-tokenizer (split: false; prepend_scheme "always":
 * every stretch not starting with ▁; "first": only the stretch at the start of the input;
 * "never"). The whole stretch is then one BPE word whose first symbols are its Unicode
 * characters; a character outside the vocabulary becomes the <0xXX> tokens of its UTF-8
 * bytes (byte_fallback) or the unk token (runs of them one unk with fuse_unk). Decoding: ▁ is
 * a space and <0xXX> its byte (the ByteFallback decoder). */

#define META "\xe2\x96\x81"                     /* U+2581, sentencepiece's space */

/* Replace whose pattern is the String `from` and whose content is `to` */
static int sp_replace_is(const sk_json *r, const char *from, const char *to) {
    const sk_json *pat = sk_json_get(r, "pattern");
    return json_is(r, "Replace") && pat && pat->type == SK_JSON_OBJ && pat->n == 1 && json_str_is(pat, "String", from) &&
           json_str_is(r, "content", to);
}

static int sp_refuse(const char *path, const char *what, const sk_json *v, const char *want) {
    const sk_json *ty = v && v->type == SK_JSON_OBJ ? sk_json_get(v, "type") : NULL;
    return sk_error(SK_EFORMAT, "%s: %s%s%s is not supported (skiplm reads sentencepiece-style BPE as Llama 2's: %s)", path,
                    what, ty && ty->type == SK_JSON_STR ? " of type " : "", ty && ty->type == SK_JSON_STR ? ty->str : "", want);
}

/* The normalizer of a sentencepiece-style file: null, Prepend("▁"), Replace(" " -> "▁") or a
 * Sequence of these two (each at most once; either order gives the same text). */
static int sp_normalizer(const sk_json *norm, const char *path, int *prepend, int *replace) {
    static const char want[] = "a normalizer Prepend(\"\\u2581\") and/or Replace(\" \" -> \"\\u2581\"), alone or in a Sequence";
    *prepend = *replace = 0;
    if (!norm || norm->type == SK_JSON_NULL) return SK_OK;
    const sk_json *one = norm, *seq = NULL;
    int n = 1;
    if (json_is(norm, "Sequence")) {
        seq = sk_json_get(norm, "normalizers");
        if (!seq || seq->type != SK_JSON_ARR) return sp_refuse(path, "the normalizer Sequence without \"normalizers\"", NULL, want);
        n = seq->n;
    }
    for (int i = 0; i < n; i++) {
        const sk_json *x = seq ? &seq->items[i] : one;
        if (json_is(x, "Prepend") && json_str_is(x, "prepend", META) && !*prepend) *prepend = 1;
        else if (sp_replace_is(x, " ", META) && !*replace) *replace = 1;
        else return sp_refuse(path, seq ? "the normalizer in the Sequence" : "the normalizer", x, want);
    }
    return SK_OK;
}

/* Metaspace pre-tokenizer: replacement "▁", split false (transformers.js never splits; the Rust
 * library splits before every ▁ with true, its default), a prepend_scheme. 0 or an error. */
static int sp_metaspace(const sk_json *pre, const char *path, int *scheme) {
    static const char want[] = "Metaspace with replacement \"\\u2581\", split false and prepend_scheme first, always or never";
    const sk_json *split = sk_json_get(pre, "split"), *str_rep = sk_json_get(pre, "str_rep");
    if (!json_str_is(pre, "replacement", META) || (str_rep && !json_str_is(pre, "str_rep", META)))
        return sp_refuse(path, "the pre-tokenizer Metaspace with another replacement", NULL, want);
    if (!split || split->type != SK_JSON_BOOL || split->boolean)
        return sp_refuse(path, "the pre-tokenizer Metaspace with split true (or no \"split\")", NULL, want);
    *scheme = json_str_is(pre, "prepend_scheme", "always") ? SP_ALWAYS : json_str_is(pre, "prepend_scheme", "first") ? SP_FIRST
            : json_str_is(pre, "prepend_scheme", "never") ? SP_NEVER : 0;
    if (!*scheme) return sp_refuse(path, "the pre-tokenizer Metaspace without a prepend_scheme of first, always or never", NULL, want);
    return SK_OK;
}

/* Decoder: Sequence[Replace("▁" -> " "), ByteFallback, Fuse, optional Strip(" ", start <= 1,
 * stop 0)] (sets *bytes: <0xXX> decodes to its byte), or Metaspace("▁") (<0xXX> stays text). */
static int sp_decoder(const sk_json *dec, const char *path, int *bytes) {
    static const char want[] = "a decoder Sequence[Replace(\"\\u2581\" -> \" \"), ByteFallback, Fuse, Strip(\" \", 1, 0)] or Metaspace";
    *bytes = 0;
    if (json_is(dec, "Metaspace")) {
        if (!json_str_is(dec, "replacement", META)) return sp_refuse(path, "the decoder Metaspace with another replacement", NULL, want);
        return SK_OK;
    }
    const sk_json *seq = json_is(dec, "Sequence") ? sk_json_get(dec, "decoders") : NULL;
    if (!seq || seq->type != SK_JSON_ARR) return sp_refuse(path, "the decoder", dec, want);
    for (int i = 0; i < seq->n; i++) {
        const sk_json *x = &seq->items[i], *start = sk_json_get(x, "start"), *stop = sk_json_get(x, "stop");
        int ok = i == 0 ? sp_replace_is(x, META, " ") : i == 1 ? json_is(x, "ByteFallback") : i == 2 ? json_is(x, "Fuse")
               : i == 3 && json_is(x, "Strip") && json_str_is(x, "content", " ") && start && start->type == SK_JSON_NUM &&
                 (start->num == 0 || start->num == 1) && stop && stop->type == SK_JSON_NUM && stop->num == 0;
        if (!ok) return sp_refuse(path, "the decoder in the Sequence", x, want);
    }
    if (seq->n < 3) return sp_refuse(path, "a decoder Sequence this short", NULL, want);
    *bytes = 1;
    return SK_OK;
}

static int dpool_set(sk_tokenizer *t, int id, const char *s, size_t n) {
    if (sk_grow((void **)&t->dpool, &t->dpool_cap, t->dpool_len + n + 1, 1)) return 1;
    char *o = t->dpool + t->dpool_len;
    memcpy(o, s, n);
    o[n] = 0;
    t->doff[id] = (uint32_t)t->dpool_len; t->dlen[id] = (uint32_t)n;
    t->dpool_len += n + 1;
    return 0;
}

static int hex_digit(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* A sentencepiece-style file once its vocabulary and added tokens are in: the byte tokens
 * <0x00>..<0xFF> (byte_fallback), the unk token, and every token's decoded text (▁ as a
 * space; <0xXX> as its byte when the decoder has ByteFallback, which like the Rust library
 * reads any "<0x" + two hex digits + ">"). */
static int sp_tokens(sk_tokenizer *t, const sk_json *model, const char *path, int dec_bytes) {
    const sk_json *unk = sk_json_get(model, "unk_token");
    t->byte_fallback = json_flag(model, "byte_fallback", 0);
    t->fuse_unk = json_flag(model, "fuse_unk", 0);
    t->unk = unk && unk->type == SK_JSON_STR ? vocab_find(t, (const uint8_t *)unk->str, unk->str_len) : -1;
    for (int b = 0; b < 256 && t->byte_fallback; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        if ((t->byte_id[b] = vocab_find(t, (const uint8_t *)name, 6)) < 0)
            return sk_error(SK_EFORMAT, "%s: model.byte_fallback without the token \"%s\" is not supported (it needs all 256, "
                            "<0x00> to <0xFF>)", path, name);
    }
    if (!t->byte_fallback && t->unk < 0)
        return sk_error(SK_EFORMAT, "%s: model.unk_token %s: without byte_fallback a character outside the vocabulary needs it "
                        "(not supported)", path, unk && unk->type == SK_JSON_STR ? "is not in model.vocab" : "is missing");
    t->doff = malloc((size_t)t->vocab_size * sizeof *t->doff);
    t->dlen = malloc((size_t)t->vocab_size * sizeof *t->dlen);
    char *tmp = malloc(t->pool_len + 1);
    int rc = !t->doff || !t->dlen || !tmp;
    for (int id = 0; id < t->vocab_size && !rc; id++) {
        const char *s = t->pool + t->off[id];
        size_t n = t->len[id], o = 0;
        if (dec_bytes && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0)
            tmp[o++] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
        else
            for (size_t i = 0; i < n;) {
                if (n - i >= 3 && !memcmp(s + i, META, 3)) { tmp[o++] = ' '; i += 3; }
                else tmp[o++] = s[i++];
            }
        rc = dpool_set(t, id, tmp, o);
    }
    free(tmp);
    return rc ? sk_error(SK_ENOMEM, "%s: out of memory", path) : SK_OK;
}

static int load_hf(sk_tokenizer **out, const sk_json *j, const char *path) {
    const sk_json *model = sk_json_get(j, "model");
    if (!model || model->type != SK_JSON_OBJ) return sk_error(SK_EFORMAT, "%s: no \"model\" object: not a tokenizer.json", path);
    const sk_json *mt = sk_json_get(model, "type");
    if (mt && !json_is(model, "BPE")) return hf_refuse(path, "the model", model);
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
    int sp = json_is(pre, "Metaspace") || (no_pre && (json_is(norm, "Sequence") || json_is(norm, "Prepend") || json_is(norm, "Replace")));
    int sp_prepend = 0, sp_replace = 0, sp_meta = 0, sp_bytes = 0;
    int nfc = 0, digits = 0, split = 0;
    if (sp) {
        int rc;
        if ((rc = sp_normalizer(norm, path, &sp_prepend, &sp_replace))) return rc;
        if (!no_pre && (rc = sp_metaspace(pre, path, &sp_meta))) return rc;
        if ((rc = sp_decoder(dec, path, &sp_bytes))) return rc;
        if (json_flag(model, "ignore_merges", 0))
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
                            show(vocab->keys[i], vocab->key_lens[i], sh, sizeof sh));
        if ((int)e->num + 1 > V) V = (int)e->num + 1;
    }
    for (int i = 0; i < n_added; i++) {
        const sk_json *a = &added->items[i], *id = a->type == SK_JSON_OBJ ? sk_json_get(a, "id") : NULL;
        const sk_json *c = a->type == SK_JSON_OBJ ? sk_json_get(a, "content") : NULL;
        if (!id || id->type != SK_JSON_NUM || id->num != floor(id->num) || id->num < 0 || id->num >= 1 << 24 ||
            !c || c->type != SK_JSON_STR || c->str_len == 0)
            return sk_error(SK_EFORMAT, "%s: added_tokens[%d] needs an integer \"id\" in [0, 2^24) and a non-empty \"content\"", path, i);
        if (json_flag(a, "single_word", 0))
            return sk_error(SK_EFORMAT, "%s: added token \"%s\": single_word is not supported", path, show(c->str, c->str_len, sh, sizeof sh));
        /* the library matches a normalized added token in the normalized text (its own text
         * normalized too: "▁<s>" after a Prepend; after NFC, "abc" is not in "abc\u0301"), which
         * skiplm does not reproduce: it matches every added token in the raw text */
        if ((sp_prepend || sp_replace || nfc) && json_flag(a, "normalized", !json_flag(a, "special", 0)))
            return sk_error(SK_EFORMAT, "%s: added token \"%s\": normalized (true, or not special) with a %s normalizer "
                            "is not supported", path, show(c->str, c->str_len, sh, sizeof sh), nfc ? "NFC" : "Prepend/Replace");
        if ((int)id->num + 1 > V) V = (int)id->num + 1;
    }
    uint32_t enc[256]; int16_t dec_tab[324];
    byte_alphabet(enc, dec_tab);
    sk_tokenizer *t = tok_new(KIND_HF, V);
    uint8_t *state = calloc((size_t)V, 1);            /* 1: from the vocabulary, 2: added */
    size_t buf_cap = 64;
    for (int i = 0; i < vocab->n; i++) if (vocab->key_lens[i] + 4 > buf_cap) buf_cap = vocab->key_lens[i] + 4;
    uint8_t *buf = malloc(2 * buf_cap + 8);
    int rc = SK_OK;
    if (!t || !state || !buf) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    t->prefix_space = json_flag(pre, "add_prefix_space", 0);
    t->use_regex = json_flag(pre, "use_regex", 1);
    t->digits = digits;
    t->split = split;
    t->nfc = nfc;
    t->ignore_merges = json_flag(model, "ignore_merges", 0);
    t->sp = sp; t->sp_prepend = sp_prepend; t->sp_replace = sp_replace; t->sp_meta = sp_meta;
    t->vocab_mask = pow2_at_least((size_t)V * 2) - 1;
    t->vocab_tab = malloc((t->vocab_mask + 1) * sizeof *t->vocab_tab);
    if (!t->vocab_tab) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    memset(t->vocab_tab, 0xff, (t->vocab_mask + 1) * sizeof *t->vocab_tab);
    for (int i = 0; i < vocab->n; i++) {
        const char *key = vocab->keys[i]; size_t klen = vocab->key_lens[i];
        int id = (int)vocab->items[i].num;
        if (state[id]) { rc = sk_error(SK_EFORMAT, "%s: model.vocab \"%s\": duplicate id %d", path, show(key, klen, sh, sizeof sh), id); goto done; }
        state[id] = 1;
        if (klen == 0) { rc = sk_error(SK_EFORMAT, "%s: model.vocab has an empty token (id %d)", path, id); goto done; }
        /* a token outside GPT-2's byte alphabet (a special token's literal text, say) is
         * never produced by BPE; it decodes to its own UTF-8, as Hugging Face's decoder does */
        size_t bl = sp ? klen : undisplay(dec_tab, key, klen, buf);        /* sp: raw UTF-8 */
        int literal = sp || bl == (size_t)-1;
        if (pool_set(t, id, literal ? (const uint8_t *)key : buf, literal ? klen : bl)) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        if ((sp || !literal) && vocab_insert(t, id) >= 0) {
            rc = sk_error(SK_EFORMAT, "%s: model.vocab \"%s\" appears twice", path, show(key, klen, sh, sizeof sh)); goto done;
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
                          show(c->str, c->str_len, sh, sizeof sh), id, show(t->pool + t->off[id], t->len[id], sh2, sizeof sh2));
            goto done;
        }
        for (int k = 0; k < t->n_added; k++)
            if (t->len[t->added[k].id] == c->str_len && !memcmp(t->pool + t->off[t->added[k].id], c->str, c->str_len)) {
                rc = sk_error(SK_EFORMAT, "%s: added token \"%s\" appears twice (ids %d and %d)", path,
                              show(c->str, c->str_len, sh, sizeof sh), t->added[k].id, id);
                goto done;
            }
        if (state[id] == 0 && pool_set(t, id, c->str, c->str_len)) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        state[id] = 2;
        added_tok *at = &t->added[t->n_added++];
        at->id = id; at->lstrip = (uint8_t)json_flag(a, "lstrip", 0); at->rstrip = (uint8_t)json_flag(a, "rstrip", 0);
        if (json_flag(a, "special", 0)) {
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
    if (t->eot < 0) t->eot = vocab_find(t, (const uint8_t *)"<|endoftext|>", 13);
    if (t->eot < 0) t->eot = bos >= 0 ? bos : vocab_find(t, (const uint8_t *)"<|begin_of_text|>", 17);
    /* sentencepiece-style: <s>, the BOS Llama 2 puts before every document */
    if (t->eot < 0 && sp) t->eot = bos_s >= 0 ? bos_s : vocab_find(t, (const uint8_t *)"<s>", 3);
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
    if (sp ? (rc = sp_tokens(t, model, path, sp_bytes)) : (rc = find_byte_ids(t, path, "model.vocab has "))) goto done;
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
            ra = undisplay(dec_tab, a, la, buf);
            rb = ra == (size_t)-1 ? ra : undisplay(dec_tab, b, lb, buf + ra);
        }
        int32_t x = ra == (size_t)-1 ? -1 : vocab_find(t, buf, ra);
        int32_t y = rb == (size_t)-1 ? -1 : vocab_find(t, buf + ra, rb);
        int32_t xy = x < 0 || y < 0 ? -1 : vocab_find(t, buf, ra + rb);
        if (xy < 0) {
            if (x < 0 || y < 0)
                rc = sk_error(SK_EFORMAT, "%s: model.merges[%d] (\"%s\" \"%s\") refers to a token not in the vocabulary", path, r,
                              show(a, la, sh, sizeof sh), show(b, lb, sh2, sizeof sh2));
            else
                rc = sk_error(SK_EFORMAT, "%s: model.merges[%d] (\"%s\" \"%s\"): the merged token is not in the vocabulary", path, r,
                              show(a, la, sh, sizeof sh), show(b, lb, sh2, sizeof sh2));
            goto done;
        }
        pair_put(t, x, y, r, xy);
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
    while (i < end && class_at(s, end, i, &k) == CL_S) i = k;
    return i;
}
static size_t trim_space(const uint8_t *s, size_t i, size_t end) {
    size_t last = i, k;                                  /* end of the last non-space character */
    while (i < end) { int c = class_at(s, end, i, &k); if (c != CL_S) last = k; i = k; }
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
    int rc = t->use_regex ? encode_words(t, s, n, ids, cnt, cap) : encode_word(t, s, n, ids, cnt, cap);
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
            e = split_next(s, n, i, t->split);
            if (hf_piece(t, s + i, e - i, ids, cnt, cap)) return 1;
        }
        return 0;
    }
    if (!t->digits) return hf_piece(t, s, n, ids, cnt, cap);
    size_t from = 0, i = 0, next;
    while (i < n) {
        if (class_at(s, n, i, &next) != CL_N) { i = next; continue; }
        if (hf_piece(t, s + from, i - from, ids, cnt, cap)) return 1;
        size_t e = next;
        if (t->digits == 2)
            while (e < n && class_at(s, n, e, &next) == CL_N) e = next;
        if (hf_piece(t, s + i, e - i, ids, cnt, cap)) return 1;
        from = i = e;
    }
    return hf_piece(t, s + from, n - from, ids, cnt, cap);
}

/* The ids of a sentencepiece-style word w[0..len) (a whole normalized stretch), appended:
 * its characters (an invalid UTF-8 byte is a character of its own) looked up in the
 * vocabulary, bpe_merge_hf over them, then each character left outside the vocabulary as the
 * <0xXX> ids of its bytes, or as unk (one unk for a run of them with fuse_unk, as
 * transformers.js fuses the unks of a word's output). Words up to CACHE_MAX_WORD bytes go
 * through the cache; longer ones (a document without added tokens is one word) use
 * 3 ints, 3 int64 and an offset per character. */
static int sp_word(sk_tokenizer *t, const uint8_t *w, size_t len, int32_t **ids, size_t *cnt, size_t *cap) {
    size_t ins = 0, hit;
    uint64_t h = 0;
    int cached = len <= CACHE_MAX_WORD;
    if (cached) {
        if (cache_ready(t)) return 1;
        h = hash_bytes(w, len) | 1;
        if ((hit = cache_find(t, w, len, h, &ins)) != (size_t)-1)
            return out_push(ids, cnt, cap, t->cache_ids + t->cache[hit].i_off, t->cache[hit].i_n);
    }
    int32_t s_syms[CACHE_MAX_WORD], s_link[2 * CACHE_MAX_WORD]; uint32_t s_at[CACHE_MAX_WORD + 1];
    uint64_t s_heap[3 * CACHE_MAX_WORD];
    int32_t *syms = s_syms, *link = s_link; uint32_t *at = s_at; uint64_t *heap = s_heap;
    if (!cached) {
        syms = malloc(3 * len * sizeof *syms); at = malloc((len + 1) * sizeof *at); heap = malloc(3 * len * sizeof *heap);
        link = syms + len;
        if (!syms || !at || !heap) { free(syms); free(at); free(heap); return 1; }
    }
    size_t nc = 0, start = *cnt;
    for (size_t i = 0; i < len; nc++) {                /* characters: at[k] = byte offset of the k-th */
        uint32_t cp;
        size_t l = utf8_decode(w + i, len - i, &cp);
        at[nc] = (uint32_t)i;
        syms[nc] = vocab_find(t, w + i, l);           /* -1: not in the vocabulary */
        i += l;
    }
    at[nc] = (uint32_t)len;
    bpe_merge_hf(t, syms, nc, link, heap);
    const int32_t *next = link + nc;
    int rc = 0;
    for (int32_t k = 0; k >= 0 && !rc; k = next[k]) {
        if (syms[k] >= 0) { rc = out_push(ids, cnt, cap, &syms[k], 1); continue; }
        if (t->byte_fallback) {
            for (uint32_t b = at[k]; b < at[k + 1] && !rc; b++) rc = out_push(ids, cnt, cap, &t->byte_id[w[b]], 1);
            continue;
        }
        if (!(t->fuse_unk && *cnt > start && (*ids)[*cnt - 1] == t->unk)) rc = out_push(ids, cnt, cap, &t->unk, 1);
    }
    if (!rc && cached) rc = cache_add(t, ins, w, len, h, *ids + start, *cnt - start);
    if (!cached) { free(syms); free(at); free(heap); }
    return rc;
}

/* A sentencepiece-style stretch (non-empty): the normalizer (spaces to ▁, a ▁ in front), the
 * Metaspace pre-tokenizer (spaces to ▁, a ▁ in front unless there is one: always, or, for
 * "first", only on the stretch at the start of the input), then one word. */
static int sp_stretch(sk_tokenizer *t, const uint8_t *s, size_t n, int first, int32_t **ids, size_t *cnt, size_t *cap) {
    uint8_t *o = malloc(3 * n + 6);
    if (!o) return 1;
    size_t on = 0;
    if (t->sp_prepend) { memcpy(o, META, 3); on = 3; }
    int spaces = t->sp_replace || t->sp_meta;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' && spaces) { memcpy(o + on, META, 3); on += 3; }
        else o[on++] = s[i];
    }
    if ((t->sp_meta == SP_ALWAYS || (t->sp_meta == SP_FIRST && first)) && !(on >= 3 && !memcmp(o, META, 3))) {
        memmove(o + 3, o, on);
        memcpy(o, META, 3);
        on += 3;
    }
    int rc = sp_word(t, o, on, ids, cnt, cap);
    free(o);
    return rc;
}

/* A stretch between added tokens through the normalizer (NFC, src/text/nfc.c), then hf_stretch:
 * the `tokenizers` library normalizes each such stretch on its own, after cutting the added
 * tokens out of the raw text (those with normalized: false, as all of Qwen2's). Or, for a
 * sentencepiece-style file, sp_stretch; first: the stretch starts the input. */
static int hf_norm_stretch(sk_tokenizer *t, const uint8_t *s, size_t n, int first, int32_t **ids, size_t *cnt, size_t *cap) {
    if (t->sp) return n ? sp_stretch(t, s, n, first, ids, cnt, cap) : 0;
    if (!t->nfc || !n) return hf_stretch(t, s, n, ids, cnt, cap);
    uint8_t *o;
    size_t on;
    if (sk_nfc(s, n, &o, &on)) return 1;
    int rc = hf_stretch(t, o, on, ids, cnt, cap);
    free(o);
    return rc;
}

static int hf_encode(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    size_t from = 0;
    int rstrip = 0;
    for (size_t i = 0; i < n;) {
        int k = t->added_from[s[i]] < t->added_from[s[i] + 1] ? added_at(t, s, n, i) : -1;
        if (k < 0) { i++; continue; }
        const added_tok *a = &t->added[k];
        size_t b = rstrip ? skip_space(s, from, i) : from;
        size_t e = a->lstrip ? trim_space(s, b, i) : i;
        if (hf_norm_stretch(t, s + b, e - b, from == 0, ids, cnt, cap) || out_push(ids, cnt, cap, &a->id, 1))
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
    int rc = read_json(path, &j);
    if (rc) return rc;
    rc = j.type == SK_JSON_OBJ ? load_hf(out, &j, path) : sk_error(SK_EFORMAT, "%s: not a tokenizer.json (expected an object)", path);
    sk_json_free(&j);
    return rc;
}

int sk_tok_load_hf_text(sk_tokenizer **out, const char *text, size_t len, const char *name) {
    sk_json j;
    char err[160];
    if (sk_json_parse(text, len, &j, err, sizeof err)) return sk_error(SK_EFORMAT, "%s: %s", name, err);
    int rc = j.type == SK_JSON_OBJ ? load_hf(out, &j, name) : sk_error(SK_EFORMAT, "%s: not a tokenizer.json (expected an object)", name);
    sk_json_free(&j);
    return rc;
}

/* ------------------------------------------------------- character tokenizer */

static int cmp_u32pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;          /* by code point, then id */
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Build the lookup structures from t->cps (vocab_size entries). Fails on duplicates. */
static int char_index(sk_tokenizer *t, const char *what) {
    int V = t->vocab_size;
    t->sorted = malloc((size_t)V * sizeof *t->sorted);
    if (!t->sorted) return sk_error(SK_ENOMEM, "%s: out of memory", what);
    for (int i = 0; i < 128; i++) t->ascii_id[i] = -1;
    for (int i = 0; i < V; i++) {
        uint8_t b[4];
        size_t bl = sk_utf8_encode(t->cps[i], b);
        if (pool_set(t, i, b, bl)) return sk_error(SK_ENOMEM, "%s: out of memory", what);
        t->sorted[i][0] = t->cps[i]; t->sorted[i][1] = (uint32_t)i;
        if (t->cps[i] < 128) t->ascii_id[t->cps[i]] = i;
    }
    qsort(t->sorted, (size_t)V, sizeof *t->sorted, cmp_u32pair);
    for (int i = 1; i < V; i++)
        if (t->sorted[i][0] == t->sorted[i - 1][0])
            return sk_error(SK_EFORMAT, "%s: character U+%04X appears twice (ids %u and %u)", what,
                            t->sorted[i][0], t->sorted[i - 1][1], t->sorted[i][1]);
    return SK_OK;
}

int sk_tok_build_char(sk_tokenizer **out, const char *text, size_t len) {
    uint8_t *seen = calloc(0x110000 / 8, 1);
    if (!seen) return sk_error(SK_ENOMEM, "char tokenizer: out of memory");
    const uint8_t *s = (const uint8_t *)text;
    int V = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (cp == CP_INVALID) {
            free(seen);
            return sk_error(SK_EFORMAT, "char tokenizer: invalid UTF-8 at byte offset %zu (byte 0x%02x)", i, s[i]);
        }
        if (!(seen[cp >> 3] & (1u << (cp & 7)))) { seen[cp >> 3] |= (uint8_t)(1u << (cp & 7)); V++; }
        i += k;
    }
    if (V == 0) { free(seen); return sk_error(SK_EINVAL, "char tokenizer: empty training text"); }
    sk_tokenizer *t = tok_new(KIND_CHAR, V);
    if (!t || !(t->cps = malloc((size_t)V * sizeof *t->cps))) {
        free(seen); sk_tok_free(t);
        return sk_error(SK_ENOMEM, "char tokenizer: out of memory");
    }
    int k = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++)
        if (seen[cp >> 3] & (1u << (cp & 7))) t->cps[k++] = cp;
    free(seen);
    int rc = char_index(t, "char tokenizer");
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}

int sk_tok_save_char(const sk_tokenizer *t, const char *path) {
    if (!t || t->kind != KIND_CHAR) return sk_error(SK_EINVAL, "%s: only a char tokenizer can be saved", path);
    char *buf = NULL; size_t len = 0, cap = 0;
    const char *head = "{\"type\": \"char\", \"vocab\": [";
    int bad = sk_grow((void **)&buf, &cap, strlen(head) + 1, 1);
    if (!bad) { memcpy(buf, head, strlen(head)); len = strlen(head); }
    for (int i = 0; i < t->vocab_size && !bad; i++) {
        if (i && !(bad = sk_grow((void **)&buf, &cap, len + 2, 1))) { buf[len++] = ','; buf[len++] = i % 16 ? ' ' : '\n'; }
        if (!bad) bad = sk_json_write_str(&buf, &len, &cap, t->pool + t->off[i], t->len[i]);
    }
    if (!bad) bad = sk_grow((void **)&buf, &cap, len + 3, 1);
    if (bad) { free(buf); return sk_error(SK_ENOMEM, "%s: out of memory", path); }
    memcpy(buf + len, "]}\n", 3); len += 3;
    int rc = sk_write_atomic(path, buf, len);
    free(buf);
    return rc;
}

static int load_char_json(sk_tokenizer **out, const sk_json *j, const char *path) {
    const sk_json *type = j->type == SK_JSON_OBJ ? sk_json_get(j, "type") : NULL;
    const sk_json *vocab = j->type == SK_JSON_OBJ ? sk_json_get(j, "vocab") : NULL;
    sk_tokenizer *t = NULL;
    int rc;
    if (!type || type->type != SK_JSON_STR || strcmp(type->str, "char") != 0) {
        rc = sk_error(SK_EFORMAT, "%s: not a char vocabulary (expected {\"type\": \"char\", \"vocab\": [...]}) "
                      "nor a tokenizer.json (no \"model\")", path);
        goto done;
    }
    if (!vocab || vocab->type != SK_JSON_ARR || vocab->n == 0) {
        rc = sk_error(SK_EFORMAT, "%s: \"vocab\" must be a non-empty array of one-character strings", path);
        goto done;
    }
    t = tok_new(KIND_CHAR, vocab->n);
    if (!t || !(t->cps = malloc((size_t)vocab->n * sizeof *t->cps))) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    for (int i = 0; i < vocab->n; i++) {
        const sk_json *e = &vocab->items[i];
        uint32_t cp = CP_INVALID;
        if (e->type == SK_JSON_STR && e->str_len > 0 &&
            utf8_decode((const uint8_t *)e->str, e->str_len, &cp) != e->str_len) cp = CP_INVALID;
        if (cp == CP_INVALID) {
            rc = sk_error(SK_EFORMAT, "%s: vocab entry %d is not a string of exactly one character", path, i);
            goto done;
        }
        t->cps[i] = cp;
    }
    rc = char_index(t, path);
done:
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}

int sk_tok_load_char(sk_tokenizer **out, const char *path) {
    sk_json j;
    int rc = read_json(path, &j);
    if (rc) return rc;
    rc = load_char_json(out, &j, path);
    sk_json_free(&j);
    return rc;
}

static int32_t char_lookup(const sk_tokenizer *t, uint32_t cp) {
    if (cp < 128) return t->ascii_id[cp];
    int lo = 0, hi = t->vocab_size - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < t->sorted[mid][0]) hi = mid - 1;
        else if (cp > t->sorted[mid][0]) lo = mid + 1;
        else return (int32_t)t->sorted[mid][1];
    }
    return -1;
}

static int char_encode(const sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    if (sk_grow((void **)ids, cap, *cnt + n, sizeof **ids)) return sk_error(SK_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, n - i, &cp);
        if (cp == CP_INVALID)
            return sk_error(SK_EINVAL, "char tokenizer: invalid UTF-8 at byte offset %zu (byte 0x%02x)", i, s[i]);
        int32_t id = char_lookup(t, cp);
        if (id < 0) {
            char sh[8] = {0};
            if (cp >= 0x20 && cp != 0x7f) memcpy(sh, s + i, k);
            return sk_error(SK_EINVAL, "char tokenizer: character U+%04X '%s' at byte offset %zu is not in the vocabulary",
                            cp, sh, i);
        }
        (*ids)[(*cnt)++] = id;
        i += k;
    }
    return SK_OK;
}

/* ---------------------------------------------------------------- common API */

int sk_tok_load(sk_tokenizer **tok, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return sk_error(SK_EIO, "%s: no such tokenizer file or directory", path);
    if (S_ISDIR(st.st_mode)) {
        /* GPT-2's own files first, then a Hugging Face folder's tokenizer.json, then its
         * vocab.json + merges.txt */
        size_t n = strlen(path) + 32;
        char *p = malloc(n);
        if (!p) return sk_error(SK_ENOMEM, "out of memory");
        snprintf(p, n, "%s/encoder.json", path);
        int gpt2 = stat(p, &st) == 0;
        snprintf(p, n, "%s/tokenizer.json", path);
        int rc = !gpt2 && stat(p, &st) == 0 ? sk_tok_load_hf(tok, p) : sk_tok_load_gpt2_dir(tok, path);
        free(p);
        return rc;
    }
    sk_json j;                                  /* a file: tokenizer.json or a char vocabulary */
    int rc = read_json(path, &j);
    if (rc) return rc;
    int hf = j.type == SK_JSON_OBJ && sk_json_get(&j, "model");
    rc = hf ? load_hf(tok, &j, path) : load_char_json(tok, &j, path);
    sk_json_free(&j);
    return rc;
}

int sk_tok_vocab_size(const sk_tokenizer *t) { return t->vocab_size; }
int sk_tok_eot(const sk_tokenizer *t) { return t->eot; }
int sk_tok_is_special(const sk_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->vocab_size) return 0;
    if (t->kind == KIND_GPT2) return id == t->eot;     /* GPT-2's one special token, <|endoftext|> */
    return t->special && t->special[id];
}
const char *sk_tok_kind(const sk_tokenizer *t) { return t->kind == KIND_GPT2 ? "gpt2" : t->kind == KIND_HF ? "hf" : "char"; }

int sk_tok_encode(sk_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap) {
    if (!t || (!text && len)) return sk_error(SK_EINVAL, "sk_tok_encode: null argument");
    if (t->kind == KIND_GPT2) return gpt2_encode(t, (const uint8_t *)text, len, ids, n, cap);
    if (t->kind == KIND_HF) return hf_encode(t, (const uint8_t *)text, len, ids, n, cap);
    return char_encode(t, (const uint8_t *)text, len, ids, n, cap);
}

const char *sk_tok_decode_one(const sk_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) {
        sk_error(SK_EINVAL, "token id %d out of range [0, %d)", (int)id, t->vocab_size);
        if (len) *len = 0;
        return NULL;
    }
    if (t->dpool) { if (len) *len = t->dlen[id]; return t->dpool + t->doff[id]; }
    if (len) *len = t->len[id];
    return t->pool + t->off[id];
}

int sk_tok_decode(const sk_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return sk_error(SK_EINVAL, "token id %d at position %zu out of range [0, %d)", (int)ids[i], i, t->vocab_size);
        total += t->dpool ? t->dlen[ids[i]] : t->len[ids[i]];
    }
    char *o = malloc(total + 1);
    if (!o) return sk_error(SK_ENOMEM, "decode: out of memory");
    size_t p = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *s = sk_tok_decode_one(t, ids[i], &l);
        memcpy(o + p, s, l); p += l;
    }
    o[p] = 0;
    *out = o;
    if (len) *len = p;
    return SK_OK;
}
