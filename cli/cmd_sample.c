/* skiplm sample: prompt -> streamed text, with a KV cache. */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif

/* The tokenizer named by --tokenizer, or the weights' own (cli_tokenizer_of). */
static int load_tokenizer(sk_tokenizer **tok, const char *given, const char *weights) {
    if (given) return sk_tok_load(tok, given);
    char path[4096];
    return cli_tokenizer_of(weights, path, sizeof path) || sk_tok_load(tok, path);
}

/* The KV cache and decoding of either device; sampling is the host's for both. */
typedef struct {
    sk_model *m;
    sk_kvcache *kv;                  /* CPU */
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm;               /* GPU (--device cuda) */
    sk_cuda_kvcache *gkv;
#endif
} decoder;

/* prec: 0 fp32, 1 TF32, 2 bf16 (sk_cuda_precision) */
static int dec_new(decoder *d, sk_model *m, int use_cuda, int prec, int max_T, int quiet) {
    memset(d, 0, sizeof *d);
    d->m = m;
#ifdef SKIPLM_CUDA
    if (use_cuda) {
        char dev[256];
        if (sk_cuda_device_info(dev, sizeof dev) || sk_cuda_model_new_inference(&d->cm, m, (sk_cuda_precision)prec))
            return 1;
        if (!quiet) fprintf(stderr, "[device: cuda: %s, %s]\n", dev, sk_cuda_precision_name((sk_cuda_precision)prec));
        return sk_cuda_kvcache_new(&d->gkv, d->cm, max_T, 0);
    }
#endif
    (void)use_cuda; (void)quiet;
    if (prec == 2) return sk_kvcache_new_bf16(&d->kv, m, max_T);   /* CPU --bf16: bf16 weights */
    return sk_kvcache_new(&d->kv, m, max_T);
}
static int dec_run(decoder *d, const int32_t *tokens, int n, float *logits) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_prefill(d->cm, d->gkv, tokens, n, logits);
#endif
    return sk_model_decode(d->m, d->kv, tokens, n, logits);
}
static int dec_pos(const decoder *d) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_kvcache_pos(d->gkv);
#endif
    return sk_kvcache_pos(d->kv);
}
static void dec_reset(decoder *d) {
#ifdef SKIPLM_CUDA
    if (d->cm) { sk_cuda_kvcache_reset(d->gkv); return; }
#endif
    sk_kvcache_reset(d->kv);
}
/* the cache's K/V bytes (and without SLA's saving), and their type */
static const char *dec_bytes(const decoder *d, size_t *bytes, size_t *full) {
#ifdef SKIPLM_CUDA
    if (d->cm) {
        *bytes = sk_cuda_kvcache_bytes(d->gkv); *full = sk_cuda_kvcache_bytes_full(d->gkv);
        return sk_cuda_kvcache_bf16(d->gkv) ? "bf16" : "fp32";
    }
#endif
    *bytes = sk_kvcache_bytes(d->kv); *full = sk_kvcache_bytes_full(d->kv);
    return sk_kvcache_bf16(d->kv) ? "fp32; weights in bf16" : "fp32";
}
static void dec_free(decoder *d) {
#ifdef SKIPLM_CUDA
    sk_cuda_kvcache_free(d->gkv);
    sk_cuda_model_free(d->cm);
#endif
    sk_kvcache_free(d->kv);
}

int cmd_sample(int argc, char **argv) {
    int n_head = 0;
    const char *prompt = NULL, *tok_path = NULL, *device = "cpu";
    int n_new = 256, top_k = 0, greedy = 0, quiet = 0, tf32 = 0, bf16 = 0, ignore_eos = 0;
    float temperature = 0.8f, top_p = 1.0f;
    uint64_t seed = 1337;
    cli_opt opts[] = {
        {"prompt", 's', &prompt, "text to continue (default: the tokenizer's end-of-text token, e.g. <|endoftext|>, else a newline)"},
        {"tokens", 'i', &n_new, "new tokens to generate (256)"},
        {"temperature", 'f', &temperature, "softmax temperature; 0 = greedy (0.8)"},
        {"top-k", 'i', &top_k, "sample among the k most likely tokens; 0 = all (0)"},
        {"top-p", 'f', &top_p, "nucleus: smallest set with this probability (1.0 = off)"},
        {"seed", 'u', &seed, "sampling seed (1337)"},
        {"greedy", 'b', &greedy, "same as --temperature 0"},
        {"tokenizer", 's', &tok_path, "vocab.json (char), tokenizer.json, or a folder with encoder.json + vocab.bpe, tokenizer.json or vocab.json + merges.txt (default: from the checkpoint, or beside it)"},
        {"quiet", 'b', &quiet, "print only the generated text (no prompt, no statistics)"},
        {"device", 's', &device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &tf32, "with --device cuda: TF32 tensor-core GEMMs in the prefill"},
        {"bf16", 'b', &bf16, "bf16 copy of the weights for the matrix products, fp32 everything else (CPU or --device cuda)"},
        {"ignore-eos", 'b', &ignore_eos, "go on past the end-of-sequence token of a Hugging Face folder (eos_token_id)"},
        {"n_head", 'i', &n_head, CLI_N_HEAD_HELP},
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "sample", "WEIGHTS_OR_CHECKPOINT [options]", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1) { fprintf(stderr, "skiplm sample: give a weights file or checkpoint\n"); return 2; }
    if (greedy) temperature = 0.0f;
    if (n_new < 0 || temperature < 0.0f || !(top_p > 0.0f && top_p <= 1.0f) || top_k < 0) {
        fprintf(stderr, "skiplm sample: need --tokens >= 0, --temperature >= 0, --top-k >= 0, 0 < --top-p <= 1\n");
        return 2;
    }
    int use_cuda = !strcmp(device, "cuda") || !strcmp(device, "gpu");
    if (!use_cuda && strcmp(device, "cpu")) { fprintf(stderr, "skiplm sample: --device must be cpu or cuda (got '%s')\n", device); return 2; }
    if (tf32 && bf16) { fprintf(stderr, "skiplm sample: --tf32 and --bf16 exclude each other\n"); return 2; }
    if (tf32 && !use_cuda) { fprintf(stderr, "skiplm sample: --tf32 needs --device cuda\n"); return 2; }
#ifndef SKIPLM_CUDA
    if (use_cuda) {
        fprintf(stderr, "skiplm sample: --device cuda: this skiplm was built without CUDA (build it with `make cuda`, "
                "then run build-cuda/skiplm)\n");
        return 2;
    }
#endif
    /* a Hugging Face folder's end-of-sequence ids: generation stops there, as generate() does
     * (read first: a bad file is refused before anything is loaded) */
    int32_t eos[16];
    int n_eos = 0;
    if (!ignore_eos && sk_hf_eos_ids(pos[0], eos, 16, &n_eos)) return cli_fail("sample");
    sk_model *m;
    sk_tokenizer *tok;
    if (cli_load_model(&m, pos[0], n_head)) return cli_fail("sample");
    if (load_tokenizer(&tok, tok_path, pos[0])) return cli_fail("sample");
    const sk_config *c = sk_model_config(m);
    if (sk_tok_vocab_size(tok) > c->vocab_size) {
        fprintf(stderr, "skiplm sample: the tokenizer has %d tokens but the model only %d\n", sk_tok_vocab_size(tok), c->vocab_size);
        return 1;
    }
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    if (prompt && *prompt) {
        if (sk_tok_encode(tok, prompt, strlen(prompt), &ids, &n, &cap)) return cli_fail("sample");
    } else {
        int32_t start = sk_tok_eot(tok);
        if (start < 0) { if (sk_tok_encode(tok, "\n", 1, &ids, &n, &cap)) return cli_fail("sample"); }
        else { ids = malloc(sizeof(int32_t) * 4); cap = 4; ids[n++] = start; }
    }
    size_t total = n + (size_t)n_new;
    if (sk_mem_check(sizeof(int32_t) * (total + 1), "the token ids of the prompt and --tokens")) return cli_fail("sample");
    int32_t *grown = realloc(ids, sizeof(int32_t) * (total + 1));
    if (!grown) { free(ids); return sk_error(SK_ENOMEM, "out of memory for %zu token ids", total + 1), cli_fail("sample"); }
    ids = grown;
    /* a prompt longer than the context keeps its last block_size tokens; the cache holds what
     * this run can reach (a model with a 128k context sampled for 100 tokens does not reserve
     * 128k positions) */
    size_t start = n > (size_t)c->block_size ? n - c->block_size : 0;
    int ctx = total - start < (size_t)c->block_size ? (int)(total - start) : c->block_size;
    decoder dec;
    if (dec_new(&dec, m, use_cuda, bf16 ? 2 : tf32 ? 1 : 0, ctx, quiet)) return cli_fail("sample");
    float *logits = malloc(sizeof(float) * c->vocab_size);
    if (!quiet && prompt) fwrite(prompt, 1, strlen(prompt), stdout);
    double t0 = sk_now();
    if (dec_run(&dec, ids + start, (int)(n - start), logits)) return cli_fail("sample");
    double t1 = sk_now();
    uint64_t rng = seed;
    for (int i = 0; i < n_new; i++) {
        int32_t next = sk_sample_token(logits, c->vocab_size, temperature, top_k, top_p, &rng);
        if (next >= sk_tok_vocab_size(tok)) next = 0;   /* padded rows of a wider model */
        int stop = 0;
        for (int e = 0; e < n_eos; e++) stop |= next == eos[e];
        if (stop) {                                     /* not printed, as decode(skip_special_tokens) */
            if (!quiet) fprintf(stderr, "\n[end-of-sequence token %d after %d new tokens; --ignore-eos goes on]", next, i);
            n_new = i;
            break;
        }
        ids[n++] = next;
        size_t len;
        const char *s = sk_tok_decode_one(tok, next, &len);
        if (s) { fwrite(s, 1, len, stdout); fflush(stdout); }
        if (i + 1 == n_new) break;
        if (dec_pos(&dec) == ctx) {
            /* context full (ctx is block_size here): keep the newest half and rebuild the cache from it */
            int keep = c->block_size / 2;
            dec_reset(&dec);
            if (dec_run(&dec, ids + n - keep, keep, logits)) return cli_fail("sample");
        } else if (dec_run(&dec, &next, 1, logits)) return cli_fail("sample");
    }
    double t2 = sk_now();
    printf("\n");
    size_t kv_bytes, kv_full;
    const char *kv_type = dec_bytes(&dec, &kv_bytes, &kv_full);
    if (!quiet)
        fprintf(stderr, "[prompt %zu tokens in %.3f s; %d new tokens at %.1f tok/s; KV cache (%s) %.2f MiB, %.2f MiB without SLA's saving]\n",
                n - n_new - start, t1 - t0, n_new, n_new / (t2 - t1 > 0 ? t2 - t1 : 1e-9), kv_type,
                kv_bytes / 1048576.0, kv_full / 1048576.0);
    free(ids); free(logits);
    dec_free(&dec);
    sk_tok_free(tok);
    sk_model_free(m);
    return 0;
}
