/* Generation shared by skiplm sample and skiplm chat: the sampling options, the model with its
 * tokenizer, the chat template with its stop tokens, and a KV-cache decoder on either device. */
#ifndef SK_CLI_GENERATE_H
#define SK_CLI_GENERATE_H
#include "cli.h"
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif

/* The option rows of sk_sampling sp (all but --temperature, whose default differs) and --seed. */
#define GEN_SAMPLING_OPTS(sp, seed)                                                                                    \
    {"top-k", 'i', &(sp).top_k, "sample among the k most likely tokens; 0 = all (0)"},                                 \
    {"top-p", 'f', &(sp).top_p, "nucleus: smallest set with this probability (1.0 = off)"},                           \
    {"min-p", 'f', &(sp).min_p, "keep only tokens at least this fraction as likely as the most likely one, after top-k and top-p (0 = off)"}, \
    {"repetition-penalty", 'f', &(sp).repetition_penalty, "divide the logit of every token already in the context by this if positive, multiply if negative, as transformers (1 = off; 1.1-1.3 discourages loops)"}, \
    {"seed", 'u', &(seed), "sampling seed (1337)"}
/* 1 if --temperature >= 0, --top-k >= 0, 0 < --top-p <= 1, 0 <= --min-p <= 1 and --repetition-penalty > 0 */
int gen_sampling_ok(const sk_sampling *sp);

/* End-of-sequence ids kept at most. */
#define GEN_MAX_EOS 16

/* The model (cli_load_model) and the tokenizer named by tok_path, else the weights' own
 * (cli_tokenizer_of), which must not have more tokens than the model. */
int gen_load(sk_model **m, sk_tokenizer **tok, const char *weights, const cli_model_opts *mo, const char *tok_path);
/* The chat template and its special tokens: those of the model's folder, else those beside the
 * model's tokenizer (tok_given, else the one the weights record) when that lies elsewhere;
 * tpl (--chat-template) replaces the template, not the special tokens. */
int gen_load_chat(sk_chat **ct, const char *model, const char *tpl, const char *tok_given);
/* Adds the chat template's eos_token to eos[0..*n_eos) (at most max) when it is one token of
 * tok; says so (unless quiet) when it is not. */
void gen_chat_eos(sk_tokenizer *tok, const sk_chat *ct, int32_t *eos, int *n_eos, int max, int quiet);

/* The KV cache and decoding of either device; sampling is the host's for both. The CPU holds
 * n_seq sequences side by side, the GPU one (s is then 0). */
typedef struct {
    sk_model *m;
    sk_kvcache *kv;                  /* CPU */
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm;               /* GPU (--device cuda) */
    sk_cuda_kvcache *gkv;
#endif
} gen_decoder;

/* prec: 0 fp32, 1 TF32, 2 bf16 (sk_cuda_precision; on the CPU 2 is bf16 weights), 3 8-bit weights
 * (q8_0, CPU only: refused with use_cuda); a quantized model (sk_model_q8) decodes with its 8-bit
 * weights whatever prec says (2 is refused). kv16: K and V stored in bf16 (--kv-bf16, CPU only).
 * max_T positions */
int gen_dec_new(gen_decoder *d, sk_model *m, int use_cuda, int prec, int kv16, int max_T, int quiet, int n_seq);
/* tokens[0..n) appended to sequence s; the logits of the last one */
int gen_dec_run(gen_decoder *d, int s, const int32_t *tokens, int n, float *logits);
/* one token for each of sequences seqs[0..n), logits n x V */
int gen_dec_batch(gen_decoder *d, const int *seqs, const int32_t *tokens, int n, float *logits);
int gen_dec_pos(const gen_decoder *d, int s);
void gen_dec_truncate(gen_decoder *d, int s, int n);
/* the cache's K/V bytes (and without SLA's saving), and their type */
const char *gen_dec_bytes(const gen_decoder *d, size_t *bytes, size_t *full);
void gen_dec_free(gen_decoder *d);
#endif
