/* What skiplm sample and skiplm chat share (generate.h). */
#include "generate.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int gen_sampling_ok(const sk_sampling *sp) {
    return !(sp->temperature < 0.0f || !(sp->top_p > 0.0f && sp->top_p <= 1.0f) || sp->top_k < 0 ||
             !(sp->min_p >= 0.0f && sp->min_p <= 1.0f) || !(sp->repetition_penalty > 0.0f));
}

int gen_load(sk_model **m, sk_tokenizer **tok, const char *weights, const cli_model_opts *mo, const char *tok_path) {
    if (cli_load_model(m, weights, mo)) return 1;
    if (tok_path) {
        if (cli_tok_load(tok, tok_path)) return 1;
    } else {
        char path[4096];
        if (cli_tokenizer_of(weights, path, sizeof path) || cli_tok_load(tok, path)) return 1;
    }
    const int V = sk_model_config(*m)->vocab_size;
    if (sk_tok_vocab_size(*tok) > V)
        return sk_error(SK_EINVAL, "the tokenizer has %d tokens but the model only %d", sk_tok_vocab_size(*tok), V);
    return SK_OK;
}

/* 1 if folder (or the folder of file) holds a chat_template.jinja or a tokenizer_config.json */
static int has_chat_files(const char *path, int is_file) {
    const char *slash = is_file ? strrchr(path, '/') : NULL;
    const int dl = is_file ? (slash ? (int)(slash - path) : 1) : (int)strlen(path);
    const char *dir = is_file && !slash ? "." : path;
    static const char *const names[] = {"chat_template.jinja", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%.*s/%s", dl, dir, names[i]);
        if (stat(p, &sb) == 0) return 1;
    }
    return 0;
}

/* Beside the model's tokenizer when it lies elsewhere: a checkpoint fine-tuned from an instruct
 * model's folder (prepare copied its tokenizer_config.json beside the tokenizer.json the
 * checkpoint records). */
int gen_load_chat(sk_chat **ct, const char *model, const char *tpl, const char *tok_given) {
    char *file = sk_weights_file(model);
    if (!file) return sk_error(SK_ENOMEM, "out of memory");
    if (!tpl && cli_is_gguf(file)) {            /* the template a GGUF file holds */
        int rc = cli_gguf_chat(ct, file);
        free(file);
        return rc;
    }
    int here = has_chat_files(file, 1);
    free(file);
    char tp[4096];
    struct stat sb;
    if (!here && tok_given) snprintf(tp, sizeof tp, "%s", tok_given);
    else if (!here && cli_tokenizer_of(model, tp, sizeof tp)) here = 1;
    if (!here) {
        const int dir = stat(tp, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (has_chat_files(tp, !dir)) {
            if (!dir) { char *s = strrchr(tp, '/'); if (s) *s = 0; else snprintf(tp, sizeof tp, "."); }
            return sk_chat_load(ct, tp, tpl);
        }
    }
    return sk_chat_load(ct, model, tpl);
}

/* A chat model's turn ends at its template's eos_token (tokenizer_config.json) as well as at
 * generation_config.json's ids: SmolLM2-Instruct's <|im_end|>, Qwen2.5's, Llama 3's <|eot_id|>.
 * The text must be one token (an added token is matched whole); otherwise it is said and left. */
void gen_chat_eos(sk_tokenizer *tok, const sk_chat *ct, int32_t *eos, int *n_eos, int max, int quiet) {
    const char *e = sk_chat_eos_token(ct);
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    if (e && *e && !sk_tok_encode(tok, e, strlen(e), &ids, &n, &cap) && n == 1) {
        int have = 0;
        for (int i = 0; i < *n_eos; i++) have |= eos[i] == ids[0];
        if (!have && *n_eos < max) eos[(*n_eos)++] = ids[0];
    } else if (e && *e && !quiet) {
        fprintf(stderr, "[the eos_token \"%s\" of tokenizer_config.json is not one token of this tokenizer: replies stop "
                "only at generation_config.json's ids or --tokens]\n", e);
    }
    free(ids);
}

/* ------------------------------------------------------------------ the decoder */

int gen_dec_new(gen_decoder *d, sk_model *m, int use_cuda, int prec, int kv16, int max_T, int quiet, int n_seq) {
    memset(d, 0, sizeof *d);
    d->m = m;
    if (use_cuda && (prec == 3 || sk_model_q8(m)))
        return sk_error(SK_EINVAL, "8-bit weights (--q8, or a quantized file) decode on the CPU only, not with --device cuda");
    if (use_cuda && kv16)
        return sk_error(SK_EINVAL, "--kv-bf16 is for the CPU: with --device cuda the KV cache is bf16 under --bf16 already");
#ifdef SKIPLM_CUDA
    if (use_cuda) {
        char dev[256];
        if (n_seq != 1) return sk_error(SK_EINVAL, "the CUDA decoder runs one sequence at a time");
        if (sk_cuda_device_info(dev, sizeof dev) || sk_cuda_model_new_inference(&d->cm, m, (sk_cuda_precision)prec))
            return 1;
        if (!quiet) fprintf(stderr, "[device: cuda: %s, %s]\n", dev, sk_cuda_precision_name((sk_cuda_precision)prec));
        return sk_cuda_kvcache_new(&d->gkv, d->cm, max_T, 0);
    }
#endif
    (void)use_cuda; (void)quiet;
    /* CPU: --bf16 (prec 2) bf16 weights, --q8 (prec 3) or a quantized file 8-bit ones */
    const int q8 = prec == 3 || sk_model_q8(m);
    if (q8 && prec == 2) return sk_error(SK_EINVAL, "the weights are 8-bit (a quantized file): --bf16 does not apply");
    sk_kvcache_params kp = sk_kvcache_default_params();
    kp.max_T = max_T;
    kp.n_seq = n_seq;
    kp.weights = q8 ? SK_WEIGHTS_Q8 : prec == 2 ? SK_WEIGHTS_BF16 : SK_WEIGHTS_F32;
    kp.kv_type = kv16 ? SK_KV_BF16 : SK_KV_F32;
    return sk_kvcache_new_params(&d->kv, m, &kp);
}

int gen_dec_run(gen_decoder *d, int s, const int32_t *tokens, int n, float *logits) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_prefill(d->cm, d->gkv, tokens, n, logits);
#endif
    return sk_model_decode_seq(d->m, d->kv, s, tokens, n, logits);
}

int gen_dec_batch(gen_decoder *d, const int *seqs, const int32_t *tokens, int n, float *logits) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_prefill(d->cm, d->gkv, tokens, 1, logits);   /* n = 1, seqs[0] = 0 */
#endif
    return sk_model_decode_batch(d->m, d->kv, seqs, tokens, n, logits);
}

int gen_dec_pos(const gen_decoder *d, int s) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_kvcache_pos(d->gkv);
#endif
    return sk_kvcache_seq_pos(d->kv, s);
}

void gen_dec_truncate(gen_decoder *d, int s, int n) {
#ifdef SKIPLM_CUDA
    if (d->cm) { sk_cuda_kvcache_truncate(d->gkv, n); return; }
#endif
    sk_kvcache_seq_truncate(d->kv, s, n);
}

const char *gen_dec_bytes(const gen_decoder *d, size_t *bytes, size_t *full) {
#ifdef SKIPLM_CUDA
    if (d->cm) {
        *bytes = sk_cuda_kvcache_bytes(d->gkv); *full = sk_cuda_kvcache_bytes_full(d->gkv);
        return sk_cuda_kvcache_bf16(d->gkv) ? "bf16" : "fp32";
    }
#endif
    *bytes = sk_kvcache_bytes(d->kv); *full = sk_kvcache_bytes_full(d->kv);
    const sk_kvcache_params kp = sk_kvcache_get_params(d->kv);
    const int kv16 = kp.kv_type == SK_KV_BF16;
    if (kp.weights == SK_WEIGHTS_BF16) return kv16 ? "bf16; weights in bf16" : "fp32; weights in bf16";
    if (kp.weights == SK_WEIGHTS_Q8) return kv16 ? "bf16; weights in 8 bits, q8_0" : "fp32; weights in 8 bits, q8_0";
    return kv16 ? "bf16" : "fp32";
}

void gen_dec_free(gen_decoder *d) {
#ifdef SKIPLM_CUDA
    sk_cuda_kvcache_free(d->gkv);
    sk_cuda_model_free(d->cm);
#endif
    sk_kvcache_free(d->kv);
}
