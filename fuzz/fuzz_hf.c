/* libFuzzer harness for Hugging Face folders: sk_model_load on a folder whose config.json
 * is the fuzzer's input (after a first byte that picks the model.safetensors beside it: a
 * tiny GPT-2 in Conv1D layout with GPT2Model's names, or a tiny Llama with HF's names). A
 * refusal must name the folder's files and leave no model; an accepted model runs a
 * forward pass, and sk_model_save_hf writes it to a second folder, which must load back
 * with the same config. Models are capped at 16 MB, so a config.json asking for more is
 * refused up front. */
#include "fuzz_util.h"
#include "skiplm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char dirs[2][64], out_dir[64];

static float val(int i) { return 0.05f * (float)((i * 37) % 11 - 5); }

/* the writer streams from the caller's buffers when it writes: they live until then */
static float *bufs[64];
static int n_bufs;
static void add(sk_st_writer *w, const char *name, int64_t d0, int64_t d1, float base) {
    size_t n = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    float *x = malloc(n * sizeof(float));
    if (!x || n_bufs == 64) abort();
    for (size_t i = 0; i < n; i++) x[i] = base + val((int)i);
    bufs[n_bufs++] = x;
    int64_t shape[2] = {d0, d1};
    if (sk_st_add(w, name, SK_F32, d1 ? 2 : 1, shape, x)) abort();
}
static void write_and_free(sk_st_writer *w, const char *path) {
    if (sk_st_write(w, path)) abort();
    sk_st_writer_free(w);
    while (n_bufs) free(bufs[--n_bufs]);
}

/* GPT-2: L=2, C=8, V=16, positions 8, Conv1D (in, out), no "transformer." prefix */
static void write_gpt2(const char *dir) {
    sk_st_writer *w = sk_st_writer_new();
    sk_st_add_meta(w, "format", "pt");
    add(w, "wte.weight", 16, 8, 0); add(w, "wpe.weight", 8, 8, 0);
    char n[64];
    for (int l = 0; l < 2; l++) {
#define A(s, d0, d1, b) snprintf(n, sizeof n, "h.%d.%s", l, s), add(w, n, d0, d1, b)
        A("ln_1.weight", 8, 0, 1); A("ln_1.bias", 8, 0, 0);
        A("attn.c_attn.weight", 8, 24, 0); A("attn.c_attn.bias", 24, 0, 0);
        A("attn.c_proj.weight", 8, 8, 0); A("attn.c_proj.bias", 8, 0, 0);
        A("ln_2.weight", 8, 0, 1); A("ln_2.bias", 8, 0, 0);
        A("mlp.c_fc.weight", 8, 32, 0); A("mlp.c_fc.bias", 32, 0, 0);
        A("mlp.c_proj.weight", 32, 8, 0); A("mlp.c_proj.bias", 8, 0, 0);
#undef A
    }
    add(w, "ln_f.weight", 8, 0, 1); add(w, "ln_f.bias", 8, 0, 0);
    snprintf(n, sizeof n, "%s/model.safetensors", dir);
    write_and_free(w, n);
}

/* Llama: L=2, C=8, 2 heads, 1 KV head, hidden 16, V=16 */
static void write_llama(const char *dir) {
    sk_st_writer *w = sk_st_writer_new();
    sk_st_add_meta(w, "format", "pt");
    add(w, "model.embed_tokens.weight", 16, 8, 0);
    char n[80];
    for (int l = 0; l < 2; l++) {
#define A(s, d0, d1, b) snprintf(n, sizeof n, "model.layers.%d.%s", l, s), add(w, n, d0, d1, b)
        A("input_layernorm.weight", 8, 0, 1);
        A("self_attn.q_proj.weight", 8, 8, 0); A("self_attn.k_proj.weight", 4, 8, 0);
        A("self_attn.v_proj.weight", 4, 8, 0); A("self_attn.o_proj.weight", 8, 8, 0);
        A("post_attention_layernorm.weight", 8, 0, 1);
        A("mlp.gate_proj.weight", 16, 8, 0); A("mlp.up_proj.weight", 16, 8, 0); A("mlp.down_proj.weight", 8, 16, 0);
#undef A
    }
    add(w, "model.norm.weight", 8, 0, 1);
    snprintf(n, sizeof n, "%s/model.safetensors", dir);
    write_and_free(w, n);
}

/* the three folders go when the fuzzer exits */
static void cleanup(void) {
    const char *ds[3] = {dirs[0], dirs[1], out_dir};
    char p[96];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/model.safetensors", ds[i]); unlink(p);
        snprintf(p, sizeof p, "%s/config.json", ds[i]); unlink(p);
        rmdir(ds[i]);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    atexit(cleanup);
    sk_set_memory_limit((size_t)16 << 20);
    for (int i = 0; i < 2; i++) {
        snprintf(dirs[i], sizeof dirs[i], "/tmp/skiplm-fuzz-hf-XXXXXX");
        if (!mkdtemp(dirs[i])) abort();
    }
    snprintf(out_dir, sizeof out_dir, "/tmp/skiplm-fuzz-hf-XXXXXX");
    if (!mkdtemp(out_dir)) abort();
    write_gpt2(dirs[0]);
    write_llama(dirs[1]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 8192) return 0;
    const char *dir = dirs[data[0] & 1];
    char path[96];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f)) abort();
    sk_model *m = NULL;
    if (sk_model_load(&m, dir, NULL)) {
        if (m || !strstr(sk_last_error(), dir)) abort();
        return 0;
    }
    const sk_config *c = sk_model_config(m);
    fuzz_forward(m);
    if (sk_model_save_hf(m, out_dir) == 0) {
        sk_model *b = NULL;
        if (sk_model_load(&b, out_dir, NULL)) abort();
        const sk_config *d = sk_model_config(b);
        if (d->n_layer != c->n_layer || d->n_head != c->n_head || d->n_embd != c->n_embd || d->family != c->family ||
            d->ffn_hidden != c->ffn_hidden || d->norm_eps != c->norm_eps || d->gelu != c->gelu || d->relu != c->relu)
            abort();
        sk_model_free(b);
    }
    sk_model_free(m);
    return 0;
}
