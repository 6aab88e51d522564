/* What the tokenizer files share (tokenizer.c, the common API; tok_common.c, tok_bpe.c,
 * tok_gpt2.c, tok_hf.c, tok_sp.c, tok_char.c): the tokenizer object, the tables of byte-level
 * BPE, and the functions one file gives another, listed by the file that defines them. */
#ifndef SK_TOK_IMPL_H
#define SK_TOK_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "skiplm_text.h"
#include "base/json.h"
#include "base/utf8.h"

enum { CL_O = 0, CL_L = 1, CL_N = 2, CL_S = 3 };   /* other, letter, number, JS \s */
#define CP_INVALID SK_UTF8_INVALID

/* The character at s[0..n) (n >= 1): its byte length and code point; an ill-formed or truncated
 * sequence is a character of one byte, CP_INVALID. */
static inline size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    size_t len = sk_utf8_decode(s, n, cp);
    return len ? len : 1;
}
static inline uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;               /* FNV-1a, then a finalizer */
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ULL; }
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33;
    return h;
}
static inline uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}
static inline size_t pow2_at_least(size_t n) { size_t p = 16; while (p < n) p <<= 1; return p; }
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

/* ---------------------------------------- defined in (each documented there): tok_common.c */
int tk_class_at(const uint8_t *s, size_t n, size_t i, size_t *next);
sk_tokenizer *tk_new(int kind, int vocab_size);
int tk_pool_set(sk_tokenizer *t, int id, const void *bytes, size_t n);
const char *tk_show(const char *s, size_t n, char *buf, size_t cap);
int tk_read_json(const char *path, sk_json *j);
int tk_json_flag(const sk_json *obj, const char *key, int def);
int tk_json_str_is(const sk_json *obj, const char *key, const char *want);
int tk_json_is(const sk_json *v, const char *type);

/* tok_bpe.c */
void tk_byte_alphabet(uint32_t enc[256], int16_t dec[324]);
size_t tk_undisplay(const int16_t dec[324], const char *s, size_t slen, uint8_t *out);
int32_t tk_vocab_find(const sk_tokenizer *t, const uint8_t *s, size_t n);
int32_t tk_vocab_insert(sk_tokenizer *t, int32_t id);
int tk_find_byte_ids(sk_tokenizer *t, const char *path, const char *where);
int tk_pair_put(sk_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged);
size_t tk_split_next(const uint8_t *s, size_t n, size_t i, int max_digits);
int tk_out_push(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t k);
size_t tk_cache_find(const sk_tokenizer *t, const uint8_t *w, size_t len, uint64_t h, size_t *ins);
int tk_cache_add(sk_tokenizer *t, size_t slot, const uint8_t *w, size_t len, uint64_t h,
                     const int32_t *ids, size_t k);
void tk_bpe_merge_hf(const sk_tokenizer *t, int32_t *syms, size_t len, int32_t *link, uint64_t *heap);
int tk_cache_ready(sk_tokenizer *t);
int tk_encode_word(sk_tokenizer *t, const uint8_t *w, size_t len, int32_t **ids, size_t *cnt, size_t *cap);
int tk_encode_words(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap);

/* tok_gpt2.c */
int tk_gpt2_encode(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap);

/* tok_sp.c */
int tk_sp_normalizer(const sk_json *norm, const char *path, int *prepend, int *replace);
int tk_sp_metaspace(const sk_json *pre, const char *path, int *scheme);
int tk_sp_decoder(const sk_json *dec, const char *path, int *bytes);
int tk_sp_tokens(sk_tokenizer *t, const sk_json *model, const char *path, int dec_bytes);
int tk_sp_stretch(sk_tokenizer *t, const uint8_t *s, size_t n, int first, int32_t **ids, size_t *cnt, size_t *cap);

/* tok_hf.c */
int tk_load_hf(sk_tokenizer **out, const sk_json *j, const char *path);
int tk_hf_encode(sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap);

/* tok_char.c */
int tk_load_char_json(sk_tokenizer **out, const sk_json *j, const char *path);
int tk_char_encode(const sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap);
#endif
