/* Byte-level BPE, shared by GPT-2's files (tok_gpt2.c) and tokenizer.json (tok_hf.c): GPT-2's
 * byte alphabet, the vocabulary and merge tables, pre-tokenization (GPT-2's regex, Llama 3's
 * Split), BPE of a word (GPT-2's order and Hugging Face's) and the word cache.
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
#include "text/tok_impl.h"
#include "text/tokenizer_internal.h"
#include "text/unicode_tables.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------- byte alphabet, vocabulary and merge tables */

/* GPT-2 shows each byte as a printable character: bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves, the other 68 map to U+0100.. in byte order. */
void tk_byte_alphabet(uint32_t enc[256], int16_t dec[324]) {
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
size_t tk_undisplay(const int16_t dec[324], const char *s, size_t slen, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < slen;) {
        uint32_t cp;
        i += utf8_decode((const uint8_t *)s + i, slen - i, &cp);
        if (cp >= 324 || dec[cp] < 0) return (size_t)-1;
        out[o++] = (uint8_t)dec[cp];
    }
    return o;
}

int32_t tk_vocab_find(const sk_tokenizer *t, const uint8_t *s, size_t n) {
    size_t i = (size_t)hash_bytes(s, n) & t->vocab_mask;
    for (;;) {
        int32_t id = t->vocab_tab[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->pool + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->vocab_mask;
    }
}
/* Insert id (its bytes already in the pool); returns the existing id on a duplicate. */
int32_t tk_vocab_insert(sk_tokenizer *t, int32_t id) {
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



/* Every single byte must be a token (byte-level BPE starts from them): fill t->byte_id, or
 * fail naming the first missing byte and how GPT-2 shows it. */
int tk_find_byte_ids(sk_tokenizer *t, const char *path, const char *where) {
    uint32_t enc[256]; int16_t dec[324];
    tk_byte_alphabet(enc, dec);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b, shown[4];
        t->byte_id[b] = tk_vocab_find(t, &c, 1);
        if (t->byte_id[b] < 0) {
            char sh[16];
            return sk_error(SK_EFORMAT, "%s: %sno token for byte 0x%02x (\"%s\"; byte-level BPE needs all 256 single bytes)",
                            path, where, b, tk_show((const char *)shown, sk_utf8_encode(enc[b], shown), sh, sizeof sh));
        }
    }
    return SK_OK;
}


int tk_pair_put(sk_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    pair_slot *p = pair_find(t, a, b);
    p->key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    p->rank = rank; p->merged = merged;
    return 0;
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
    int c = tk_class_at(s, n, i, &j);
    size_t p = i;
    int pc = c;
    if (s[i] == ' ' && j < n) {            /* " ?" then a letter, number or other run */
        size_t j2;
        int c2 = tk_class_at(s, n, j, &j2);
        if (c2 != CL_S) { p = j; pc = c2; }
    }
    if (pc != CL_S) {
        size_t e;
        tk_class_at(s, n, p, &e);
        while (e < n && tk_class_at(s, n, e, &k) == pc) e = k;
        return e;
    }
    /* whitespace run [i, e); last character starts at last */
    size_t e = j, last = i;
    while (e < n && tk_class_at(s, n, e, &k) == CL_S) { last = e; e = k; }
    if (e == n || last == i) return e;   /* \s+(?!\S) takes it all at the end; one char: \s+ */
    return last;                          /* \s+(?!\S) backs off one character */
}

/* Class of the character at s[i] for the Split regex below, whose \s is Unicode's White_Space
 * (Oniguruma's, and transformers.js's rewrite of it): JavaScript's \s of cp_class, which
 * GPT-2's regex uses, with U+0085 and without U+FEFF (the only two differences). */
static int ws_class_at(const uint8_t *s, size_t n, size_t i, size_t *next) {
    int c = tk_class_at(s, n, i, next);
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
size_t tk_split_next(const uint8_t *s, size_t n, size_t i, int max_digits) {
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
    if ((c == CL_L || (c != CL_N && !crlf)) && p < n && tk_class_at(s, n, p, &k) == CL_L) {
        for (e = k; e < n && tk_class_at(s, n, e, &k) == CL_L;) e = k;
        return e;
    }
    if (c == CL_N) {                                /* \p{N}{1,3} */
        e = j;
        for (int d = 1; d < max_digits && e < n && tk_class_at(s, n, e, &k) == CL_N; d++) e = k;
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
void sk_tok_byte_alphabet_(uint32_t enc[256]) { int16_t dec[324]; tk_byte_alphabet(enc, dec); }

int tk_out_push(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t k) {
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
size_t tk_cache_find(const sk_tokenizer *t, const uint8_t *w, size_t len, uint64_t h, size_t *ins) {
    size_t i = (size_t)h & t->cache_mask;
    for (;;) {
        const cache_slot *c = &t->cache[i];
        if (c->w_len == 0) { *ins = i; return (size_t)-1; }
        if (c->h == h && c->w_len == len && memcmp(t->cache_bytes + c->w_off, w, len) == 0) return i;
        i = (i + 1) & t->cache_mask;
    }
}

int tk_cache_add(sk_tokenizer *t, size_t slot, const uint8_t *w, size_t len, uint64_t h,
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
void tk_bpe_merge_hf(const sk_tokenizer *t, int32_t *syms, size_t len, int32_t *link, uint64_t *heap) {
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
    tk_bpe_merge_hf(t, syms, len, link, heap);
    const int32_t *next = link + len;
    size_t o = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) syms[o++] = syms[i];
    return o;
}

/* Make room for one more cache entry (grow the table, or clear it when full). */
int tk_cache_ready(sk_tokenizer *t) {
    if (t->cache && (t->cache_count + 1) * 2 <= t->cache_mask + 1) return 0;
    if (t->cache_count >= CACHE_MAX_ENTRIES) { cache_clear(t); return 0; }
    return cache_grow(t);
}

/* The ids of one pre-token w[0..len), appended to ids: a single byte directly, short words
 * through the cache, the rest by BPE on the heap. */
int tk_encode_word(sk_tokenizer *t, const uint8_t *w, size_t len, int32_t **ids, size_t *cnt, size_t *cap) {
    if (len == 1) return tk_out_push(ids, cnt, cap, &t->byte_id[w[0]], 1);
    if (t->ignore_merges) {                             /* a whole word in the vocabulary wins */
        int32_t id = tk_vocab_find(t, w, len);
        if (id >= 0) return tk_out_push(ids, cnt, cap, &id, 1);
    }
    int hf = t->kind == KIND_HF;
    size_t ins = 0, hit = (size_t)-1;
    uint64_t h = 0;
    if (len <= CACHE_MAX_WORD) {
        if (tk_cache_ready(t)) return 1;
        h = hash_bytes(w, len) | 1;
        hit = tk_cache_find(t, w, len, h, &ins);
        if (hit != (size_t)-1) {
            const cache_slot *c = &t->cache[hit];
            return tk_out_push(ids, cnt, cap, t->cache_ids + c->i_off, c->i_n);
        }
        int32_t syms[CACHE_MAX_WORD], work[2 * CACHE_MAX_WORD];
        uint64_t heap[3 * CACHE_MAX_WORD];
        size_t k = hf ? bpe_word_hf(t, w, len, syms, work, heap) : bpe_word(t, w, len, syms, work);
        return tk_out_push(ids, cnt, cap, syms, k) || tk_cache_add(t, ins, w, len, h, syms, k);
    }
    int32_t *syms = malloc(3 * len * sizeof *syms);
    uint64_t *heap = hf ? malloc(3 * len * sizeof *heap) : NULL;
    if (!syms || (hf && !heap)) { free(syms); free(heap); return 1; }
    size_t k = hf ? bpe_word_hf(t, w, len, syms, syms + len, heap) : bpe_word(t, w, len, syms, syms + len);
    int rc = tk_out_push(ids, cnt, cap, syms, k);
    free(syms); free(heap);
    return rc;
}

/* Pre-tokenize s[0..n) and encode each pre-token; non-zero only when out of memory. */
int tk_encode_words(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    for (size_t i = 0; i < n;) {
        size_t e = pretok_next(s, n, i);
        if (tk_encode_word(t, s + i, e - i, ids, cnt, cap)) return 1;
        i = e;
    }
    return 0;
}
