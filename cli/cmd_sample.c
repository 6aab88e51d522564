/* skiplm sample: prompt -> streamed text, with a KV cache. */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The tokenizer named by --tokenizer, or recorded in the checkpoint's metadata. */
static int load_tokenizer(sk_tokenizer **tok, const char *given, const char *weights) {
    if (given) return sk_tok_load(tok, given);
    sk_safetensors st;
    if (sk_st_read(weights, &st)) return 1;
    const char *p = sk_st_meta(&st, "tokenizer_path");
    if (!p) p = sk_st_meta(&st, "tokenizer");
    int rc = p ? sk_tok_load(tok, p) :
        sk_error(SK_EINVAL, "%s records no tokenizer: give --tokenizer (a vocab.json or a folder with encoder.json and vocab.bpe)", weights);
    sk_st_free(&st);
    return rc;
}

int cmd_sample(int argc, char **argv) {
    const char *prompt = NULL, *tok_path = NULL;
    int n_new = 256, top_k = 0, greedy = 0, quiet = 0;
    float temperature = 0.8f, top_p = 1.0f;
    uint64_t seed = 1337;
    cli_opt opts[] = {
        {"prompt", 's', &prompt, "text to continue (default: a newline, or <|endoftext|> for GPT-2)"},
        {"tokens", 'i', &n_new, "new tokens to generate (256)"},
        {"temperature", 'f', &temperature, "softmax temperature; 0 = greedy (0.8)"},
        {"top-k", 'i', &top_k, "sample among the k most likely tokens; 0 = all (0)"},
        {"top-p", 'f', &top_p, "nucleus: smallest set with this probability (1.0 = off)"},
        {"seed", 'u', &seed, "sampling seed (1337)"},
        {"greedy", 'b', &greedy, "same as --temperature 0"},
        {"tokenizer", 's', &tok_path, "vocab.json (char) or folder with encoder.json + vocab.bpe (default: from the checkpoint)"},
        {"quiet", 'b', &quiet, "print only the generated text (no prompt, no statistics)"},
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
    sk_model *m;
    sk_tokenizer *tok;
    if (sk_model_load(&m, pos[0], NULL)) return cli_fail("sample");
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
    sk_kvcache *kv;
    if (sk_kvcache_new(&kv, m, c->block_size)) return cli_fail("sample");
    float *logits = malloc(sizeof(float) * c->vocab_size);
    if (!quiet && prompt) fwrite(prompt, 1, strlen(prompt), stdout);
    /* a prompt longer than the context keeps its last block_size tokens */
    size_t start = n > (size_t)c->block_size ? n - c->block_size : 0;
    double t0 = sk_now();
    if (sk_model_decode(m, kv, ids + start, (int)(n - start), logits)) return cli_fail("sample");
    double t1 = sk_now();
    uint64_t rng = seed;
    for (int i = 0; i < n_new; i++) {
        int32_t next = sk_sample_token(logits, c->vocab_size, temperature, top_k, top_p, &rng);
        if (next >= sk_tok_vocab_size(tok)) next = 0;   /* padded rows of a wider model */
        ids[n++] = next;
        size_t len;
        const char *s = sk_tok_decode_one(tok, next, &len);
        if (s) { fwrite(s, 1, len, stdout); fflush(stdout); }
        if (i + 1 == n_new) break;
        if (sk_kvcache_pos(kv) == c->block_size) {
            /* context full: keep the newest half and rebuild the cache from it */
            int keep = c->block_size / 2;
            sk_kvcache_reset(kv);
            if (sk_model_decode(m, kv, ids + n - keep, keep, logits)) return cli_fail("sample");
        } else if (sk_model_decode(m, kv, &next, 1, logits)) return cli_fail("sample");
    }
    double t2 = sk_now();
    printf("\n");
    if (!quiet)
        fprintf(stderr, "[prompt %zu tokens in %.3f s; %d new tokens at %.1f tok/s; KV cache %.2f MiB, %.2f MiB without SLA's saving]\n",
                n - n_new - start, t1 - t0, n_new, n_new / (t2 - t1 > 0 ? t2 - t1 : 1e-9),
                sk_kvcache_bytes(kv) / 1048576.0, sk_kvcache_bytes_full(kv) / 1048576.0);
    free(ids); free(logits);
    sk_kvcache_free(kv);
    sk_tok_free(tok);
    sk_model_free(m);
    return 0;
}
