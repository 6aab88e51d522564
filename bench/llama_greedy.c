/* Greedy decoding with llama.cpp's library, token ids in and out, for bench/llama_cpp_bench.sh's
 * agreement check against `skiplm sample --greedy`:
 *   llama_greedy MODEL.gguf N_NEW THREADS LOGITS.bin|- ID...
 * decodes the prompt ids in one batch, then N_NEW tokens, each the argmax of the last logits
 * (the first index of the maximum), with an fp32 KV cache; prints the new ids on one line and
 * writes the N_NEW rows of logits they were chosen from (float32) to LOGITS.bin. */
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: llama_greedy MODEL.gguf N_NEW THREADS LOGITS.bin|- ID...\n"); return 2; }
    const int n_new = atoi(argv[2]), threads = atoi(argv[3]), n_prompt = argc - 5;
    llama_token *ids = malloc(sizeof(llama_token) * (size_t)(n_prompt + 1));
    for (int i = 0; i < n_prompt; i++) ids[i] = atoi(argv[5 + i]);
    FILE *lf = strcmp(argv[4], "-") ? fopen(argv[4], "wb") : NULL;
    if (strcmp(argv[4], "-") && !lf) { fprintf(stderr, "llama_greedy: cannot write %s\n", argv[4]); return 1; }
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "llama_greedy: cannot load %s\n", argv[1]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_new + 16);
    cp.n_batch = cp.n_ubatch = cp.n_ctx;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    /* the CPU flash-attention kernel: its logits differed from skiplm's by about 2e-4 of the
     * largest in a test, against under 1e-6 without it */
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llama_greedy: cannot make a context\n"); return 1; }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (llama_decode(ctx, llama_batch_get_one(ids, n_prompt))) { fprintf(stderr, "llama_greedy: decode failed\n"); return 1; }
    for (int i = 0; i < n_new; i++) {
        const float *lg = llama_get_logits_ith(ctx, -1);
        if (lf && fwrite(lg, sizeof(float), (size_t)V, lf) != (size_t)V) { fprintf(stderr, "llama_greedy: write failed\n"); return 1; }
        llama_token best = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        printf(i ? " %d" : "%d", best);
        ids[0] = best;
        if (i + 1 < n_new && llama_decode(ctx, llama_batch_get_one(ids, 1))) { fprintf(stderr, "llama_greedy: decode failed\n"); return 1; }
    }
    printf("\n");
    if (lf && fclose(lf)) { fprintf(stderr, "llama_greedy: write failed\n"); return 1; }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
