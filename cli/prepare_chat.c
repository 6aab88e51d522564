/* Conversations for supervised fine-tuning (prepare.h): each one rendered with the model's
 * chat template, its text encoded stretch by stretch, the loss mask 1 on the assistant's
 * replies. The stretches come from rendering growing prefixes of the conversation: before
 * assistant message k, the prefix k with the generation prompt (the assistant's header); the
 * reply is what the prefix k+1 adds to that, up to and including the end-of-turn token
 * (tokenizer_config.json's eos_token, where the reply holds it). */
#include "prepare.h"
#include <stdlib.h>
#include <string.h>

/* text[from..to) encoded and appended, every token's mask m */
static int add(sk_tokenizer *tok, const char *text, size_t from, size_t to, uint8_t m, int32_t **ids, uint8_t **mask,
               size_t *n, size_t *cap) {
    size_t n0 = *n, cap0 = *cap;
    if (to > from && sk_tok_encode(tok, text + from, to - from, ids, n, cap)) return 1;
    if (*cap != cap0 || !*mask) {
        uint8_t *nm = realloc(*mask, *cap ? *cap : 1);
        if (!nm) return sk_error(SK_ENOMEM, "out of memory"), 1;
        *mask = nm;
    }
    memset(*mask + n0, m, *n - n0);
    return 0;
}

/* prefix k of msgs rendered; its text must begin with what was rendered before (prev) */
static int render(const sk_chat *ct, const sk_chat_msg *msgs, int k, int gen, const char *prev, size_t prev_len,
                  char **text, size_t *len) {
    if (sk_chat_render(ct, msgs, k, NULL, gen, text, len)) return 1;
    if (*len < prev_len || memcmp(*text, prev, prev_len)) {
        sk_error(SK_EFORMAT, "the chat template renders the first %d messages%s as text that does not begin with its "
                 "rendering of the messages before (a template that rewrites earlier turns cannot give a loss mask)", k,
                 gen ? " with the generation prompt" : "");
        return 1;
    }
    return 0;
}

int prep_chat_encode(const sk_chat *ct, sk_tokenizer *tok, const char *line, size_t len, const char *field,
                     int32_t **ids, uint8_t **mask, size_t *n, size_t *cap) {
    sk_chat_msg *msgs;
    int nm, rc = 0;
    if (sk_jsonl_messages(line, len, field, &msgs, &nm)) return 1;
    const char *eos = sk_chat_eos_token(ct);
    char *prev = calloc(1, 1), *a = NULL, *b = NULL;
    size_t prev_len = 0, al, bl;
    int replies = 0;
    for (int k = 0; k < nm && !rc; k++) {
        if (strcmp(msgs[k].role, "assistant")) continue;
        replies++;
        rc = render(ct, msgs, k, 1, prev, prev_len, &a, &al) || render(ct, msgs, k + 1, 0, a, al, &b, &bl) ||
             add(tok, a, prev_len, al, 0, ids, mask, n, cap);
        if (rc) break;
        size_t end = bl;                      /* the reply, through its end-of-turn token */
        if (eos && *eos) {
            size_t el = strlen(eos);
            for (size_t i = bl; i >= al + el; i--)
                if (!memcmp(b + i - el, eos, el)) { end = i; break; }
        }
        rc = add(tok, b, al, end, 1, ids, mask, n, cap) || add(tok, b, end, bl, 0, ids, mask, n, cap);
        free(prev); free(a);
        prev = b; prev_len = bl; a = b = NULL;
    }
    if (!rc && !replies) { sk_error(SK_EFORMAT, "no \"assistant\" message: nothing to learn from"); rc = 1; }
    if (!rc) {                                /* what follows the last reply */
        rc = render(ct, msgs, nm, 0, prev, prev_len, &a, &al) || add(tok, a, prev_len, al, 0, ids, mask, n, cap);
    }
    free(prev); free(a); free(b); free(msgs);
    return rc;
}
