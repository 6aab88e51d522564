/* libFuzzer harness for the GGUF reader (sk_gguf_read_mem: the checks of sk_gguf_read on a
 * buffer) and what reads an accepted file: every tensor must lie inside the image, every
 * accessor must stay in bounds, the model loader (sk_model_load_gguf, models capped at 16 MB
 * by sk_set_memory_limit) must load or refuse with the file's name, an accepted model runs a
 * forward pass (and, 8-bit, decodes with its 8-bit weights), and the same bytes as a file go
 * through the CLI's tokenizer and chat template readers (cli/gguf_cli.c). Seeds: small llama,
 * qwen2 and gpt2 files in F32, F16, BF16 and Q8_0, with "gpt2" and "llama" vocabularies. */
#include "fuzz_util.h"
#include "cli.h"
#include "skiplm.h"

#include <string.h>

static volatile uint8_t sink;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    sk_set_memory_limit((size_t)16 << 20);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sk_gguf g;
    if (sk_gguf_read_mem(data, size, "fuzz.gguf", &g)) {
        if (g.tensors || g.kv || g.path || g.n_tensors || g.n_kv) abort();       /* left empty on error */
        return 0;
    }
    for (int i = 0; i < g.n_tensors; i++) {
        const sk_gguf_tensor *t = &g.tensors[i];
        if (t->data < g.base || t->nbytes > g.size || (size_t)(t->data - g.base) > g.size - t->nbytes) abort();
        if (sk_gguf_tensor_find(&g, t->name) != t) abort();
        for (uint64_t k = 0; k < t->nbytes; k += 61) sink ^= t->data[k];       /* readable */
    }
    for (int i = 0; i < g.n_kv; i++) {
        const sk_gguf_kv *kv = &g.kv[i];
        if (sk_gguf_find(&g, kv->key) != kv) abort();
        int64_t iv; double dv; float fv; size_t len;
        sk_gguf_get_int(&g, kv->key, &iv);
        sk_gguf_get_float(&g, kv->key, &dv);
        const char *s = sk_gguf_get_str(&g, kv->key, &len);
        if (s && (s < (const char *)g.base || len > g.size)) abort();
        for (uint64_t k = 0; kv->type == SK_GGUF_ARR && k < kv->n && k < 64; k++) {
            sk_gguf_arr_int(kv, k, &iv);
            sk_gguf_arr_float(kv, k, &fv);
            if (kv->elem == SK_GGUF_STR && kv->lens[k] > g.size) abort();
        }
    }
    sk_model *m = NULL;
    if (sk_model_load_gguf(&m, &g, NULL)) {
        if (m || !strstr(sk_last_error(), "fuzz.gguf")) abort();
    } else {
        const sk_config *c = sk_model_config(m);
        fuzz_forward(m);
        if (sk_model_q8(m)) {
            sk_kvcache *kv;
            float *lg = malloc(sizeof(float) * c->vocab_size);
            int32_t tok[2] = {0, 1 % c->vocab_size};
            const int n = 2 < c->block_size ? 2 : c->block_size;
            if (lg && sk_kvcache_new_params(&kv, m, &(sk_kvcache_params){.max_T = n, .n_seq = 1, .weights = SK_WEIGHTS_Q8}) == 0) {
                sk_model_decode(m, kv, tok, n, lg);
                sk_kvcache_free(kv);
            }
            free(lg);
        }
        sk_model_free(m);
    }
    sk_gguf_free(&g);
    /* the tokenizer and the chat template, read from the same bytes as a file */
    fuzz_file f;
    fuzz_file_open(&f, data, size);
    sk_tokenizer *tok = NULL;
    if (cli_gguf_tokenizer(&tok, f.path) == 0) {
        int32_t *ids = NULL; size_t n = 0, cap = 0;
        static const char text[] = "Hello world, 123 <s> \xe2\x96\x81x\n";
        if (sk_tok_encode(tok, text, sizeof text - 1, &ids, &n, &cap) == 0) {
            char *out; size_t len;
            if (sk_tok_decode(tok, ids, n, &out, &len) == 0) free(out);
        }
        free(ids);
        sk_tok_free(tok);
    }
    sk_chat *ct = NULL;
    if (cli_gguf_chat(&ct, f.path) == 0) {
        sk_chat_msg msg = {"user", "hi"};
        char *txt; size_t len;
        if (sk_chat_render(ct, &msg, 1, NULL, 1, &txt, &len) == 0) free(txt);
        sk_chat_free(ct);
    }
    fuzz_file_close(&f);
    return 0;
}
