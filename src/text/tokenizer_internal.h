/* Tokenizer internals: what the tokenizer (tok_bpe.c, tok_common.c) exposes to the BPE trainer
 * (bpe_train.c), so that the trainer splits text exactly as the GPT-2 encoder does and writes
 * its byte alphabet, and to tests/tool_tok.c, which checks the Unicode classes against Node's. */
#ifndef SK_TOKENIZER_INTERNAL_H
#define SK_TOKENIZER_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

/* End of the GPT-2 pre-token (its regex match) that starts at s[i], i < n. */
size_t sk_tok_pretok_next_(const uint8_t *s, size_t n, size_t i);
/* GPT-2's display code point of each byte: enc[b] is the printable character that stands for b. */
void sk_tok_byte_alphabet_(uint32_t enc[256]);
/* Class of a code point in the pre-tokenizer's sense: 0 other, 1 letter, 2 number, 3 space. */
int sk_tok_unicode_class_(uint32_t cp);
/* The Unicode version of the class tables (src/text/unicode_tables.h). */
const char *sk_tok_unicode_version_(void);
#endif
