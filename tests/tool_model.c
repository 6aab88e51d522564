/* Test driver for the PyTorch comparisons (tests/test_gpt2_torch.py).
 *   tool_model run  WEIGHTS BATCH OUT [bf16]  forward + backward on BATCH (I32 "inputs", "targets"
 *                                       of shape (B, T)); OUT holds "logits", "loss",
 *                                       "loss_fb" (from forward_backward) and "grad.<name>";
 *                                       bf16: in bf16 mixed precision (sk_model_set_bf16).
 *   tool_model decode WEIGHTS BATCH OUT fp32|bf16[-kv16]   row 0 of "inputs" through the KV
 *                                       cache one token at a time (bf16: bf16 weights; -kv16: K/V
 *                                       stored in bf16); OUT holds "logits" (T, V), each
 *                                       position's logits from the cache.
 *   tool_model init OUT SEED key=value...   random model with that config, saved to OUT.
 *   tool_model rope IN OUT key=value...     skiplm's RoPE (sk_rope_freqs, sk_rope_table,
 *                                       sk_rope) on the rows of IN's F32 "x" (N, hs), row i at
 *                                       position "pos" (I32 (N, 1)), under a config of those
 *                                       key=values (rope_theta, rope_scaling...); OUT: "y".
 *   tool_model gelu IN OUT              sk_gelu_forward / _backward (dout = 1) on IN's F32 "x"
 *                                       (N, 1): OUT holds "erf", "tanh", "derf", "dtanh". */
#include "skiplm.h"
#include "core/config.h"
#include "core/ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(void) { fprintf(stderr, "tool_model: %s\n", sk_last_error()); return 1; }

static int32_t *get_i32(const sk_safetensors *st, const char *name, int64_t *B, int64_t *T) {
    const sk_st_tensor *t = sk_st_find(st, name);
    if (!t || t->dtype != SK_I32 || t->ndim != 2) return NULL;
    *B = t->shape[0]; *T = t->shape[1];
    int32_t *x = malloc(t->nbytes);
    memcpy(x, st->data + t->offset, t->nbytes);
    return x;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "init")) {
        sk_config cfg;
        sk_config_default(&cfg);
        for (int i = 4; i < argc; i++) {
            char *eq = strchr(argv[i], '=');
            if (!eq) { fprintf(stderr, "bad arg %s\n", argv[i]); return 1; }
            *eq = 0;
            if (sk_config_set(&cfg, argv[i], eq + 1)) return die();
        }
        sk_model *m;
        if (sk_model_new(&m, &cfg, strtoull(argv[3], NULL, 10))) return die();
        if (sk_model_save(m, argv[2])) return die();
        sk_model_free(m);
        return 0;
    }
    if (argc >= 4 && !strcmp(argv[1], "rope")) {
        sk_config cfg;
        sk_config_default(&cfg);
        if (sk_config_set(&cfg, "family", "llama")) return die();
        for (int i = 4; i < argc; i++) {
            char *eq = strchr(argv[i], '=');
            if (!eq) { fprintf(stderr, "bad arg %s\n", argv[i]); return 1; }
            *eq = 0;
            if (sk_config_set(&cfg, argv[i], eq + 1)) return die();
        }
        sk_safetensors in;
        if (sk_st_read(argv[2], &in)) return die();
        const sk_st_tensor *x = sk_st_find(&in, "x");
        int64_t N, one;
        int32_t *pos = get_i32(&in, "pos", &N, &one);
        if (!x || x->dtype != SK_F32 || x->ndim != 2 || !pos || one != 1 || x->shape[0] != N) {
            fprintf(stderr, "bad rope file\n");
            return 1;
        }
        int hs = (int)x->shape[1], max_pos = 0;
        for (int64_t i = 0; i < N; i++) max_pos = pos[i] + 1 > max_pos ? pos[i] + 1 : max_pos;
        double *freq = malloc(sizeof(double) * (size_t)(hs / 2));
        float *table = malloc(sizeof(float) * (size_t)max_pos * hs), *y = malloc(x->nbytes);
        memcpy(y, in.data + x->offset, x->nbytes);
        sk_rope_freqs(&cfg, hs, freq);
        sk_rope_table(table, max_pos, hs, freq);
        for (int64_t i = 0; i < N; i++) sk_rope(y + (size_t)i * hs, table, 1, 1, hs, 0, 1, hs, pos[i], 0);
        sk_st_writer *w = sk_st_writer_new();
        int64_t ys[2] = {N, hs};
        sk_st_add(w, "y", SK_F32, 2, ys, y);
        if (sk_st_write(w, argv[3])) return die();
        sk_st_writer_free(w);
        free(freq); free(table); free(y); free(pos);
        sk_st_free(&in);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "gelu")) {
        sk_safetensors in;
        if (sk_st_read(argv[2], &in)) return die();
        const sk_st_tensor *x = sk_st_find(&in, "x");
        if (!x || x->dtype != SK_F32 || x->ndim != 2) { fprintf(stderr, "bad gelu file\n"); return 1; }
        size_t n = x->nbytes / sizeof(float);
        const float *xv = (const float *)(in.data + x->offset);
        float *y[4];
        for (int k = 0; k < 4; k++) y[k] = malloc(x->nbytes);
        for (int t = 0; t < 2; t++) {
            sk_gelu_forward(y[t], xv, n, t);
            for (size_t i = 0; i < n; i++) y[2 + t][i] = 1.0f;
            sk_gelu_backward(y[2 + t], xv, y[2 + t], n, t);
        }
        sk_st_writer *w = sk_st_writer_new();
        int64_t shape[2] = {x->shape[0], x->shape[1]};
        const char *names[4] = {"erf", "tanh", "derf", "dtanh"};
        for (int k = 0; k < 4; k++) sk_st_add(w, names[k], SK_F32, 2, shape, y[k]);
        if (sk_st_write(w, argv[3])) return die();
        sk_st_writer_free(w);
        for (int k = 0; k < 4; k++) free(y[k]);
        sk_st_free(&in);
        return 0;
    }
    if (argc == 6 && !strcmp(argv[1], "decode")) {
        sk_model *m;
        sk_safetensors bt;
        if (sk_model_load(&m, argv[2], NULL) || sk_st_read(argv[3], &bt)) return die();
        int64_t B, T;
        int32_t *inp = get_i32(&bt, "inputs", &B, &T);
        if (!inp) { fprintf(stderr, "bad batch file\n"); return 1; }
        int V = sk_model_config(m)->vocab_size;
        float *logits = malloc(sizeof(float) * (size_t)T * V);
        sk_kvcache *kv;
        sk_kvcache_params kp = sk_kvcache_default_params();
        kp.max_T = (int)T;
        kp.weights = !strncmp(argv[5], "bf16", 4) ? SK_WEIGHTS_BF16 : SK_WEIGHTS_F32;
        kp.kv_type = strstr(argv[5], "-kv16") ? SK_KV_BF16 : SK_KV_F32;
        if (sk_kvcache_new_params(&kv, m, &kp)) return die();
        for (int64_t i = 0; i < T; i++)
            if (sk_model_decode(m, kv, inp + i, 1, logits + (size_t)i * V)) return die();
        sk_st_writer *w = sk_st_writer_new();
        int64_t ls[2] = {T, V};
        sk_st_add(w, "logits", SK_F32, 2, ls, logits);
        if (sk_st_write(w, argv[4])) return die();
        sk_st_writer_free(w);
        sk_kvcache_free(kv);
        free(logits); free(inp);
        sk_st_free(&bt);
        sk_model_free(m);
        return 0;
    }
    if (argc < 5 || argc > 6 || strcmp(argv[1], "run") || (argc == 6 && strcmp(argv[5], "bf16"))) {
        fprintf(stderr, "usage: tool_model run WEIGHTS BATCH OUT [bf16] | decode WEIGHTS BATCH OUT fp32|bf16[-kv16] | init OUT SEED k=v...\n");
        return 2;
    }
    sk_model *m;
    if (sk_model_load(&m, argv[2], NULL)) return die();
    if (argc == 6 && sk_model_set_bf16(m, 1)) return die();
    sk_safetensors bt;
    if (sk_st_read(argv[3], &bt)) return die();
    int64_t B, T, B2, T2;
    int32_t *inp = get_i32(&bt, "inputs", &B, &T), *tgt = get_i32(&bt, "targets", &B2, &T2);
    if (!inp || !tgt || B != B2 || T != T2) { fprintf(stderr, "bad batch file\n"); return 1; }
    const sk_config *c = sk_model_config(m);
    size_t nl = (size_t)B * T * c->vocab_size;
    float *logits = malloc(nl * sizeof(float));
    float loss, loss_fb;
    if (sk_model_forward(m, inp, tgt, (int)B, (int)T, &loss, logits)) return die();
    sk_model_zero_grad(m);
    if (sk_model_forward_backward(m, inp, tgt, (int)B, (int)T, 1.0f, 0, &loss_fb)) return die();
    sk_st_writer *w = sk_st_writer_new();
    int64_t ls[3] = {B, T, c->vocab_size}, one[1] = {1};
    sk_st_add(w, "logits", SK_F32, 3, ls, logits);
    sk_st_add(w, "loss", SK_F32, 1, one, &loss);
    sk_st_add(w, "loss_fb", SK_F32, 1, one, &loss_fb);
    int n;
    const sk_tensor *ts = sk_model_tensors(m, &n);
    char (*names)[96] = malloc(sizeof(*names) * n);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], 96, "grad.%s", ts[i].name);
        sk_st_add(w, names[i], SK_F32, ts[i].ndim, ts[i].shape, sk_model_grads(m) + ts[i].offset);
    }
    if (sk_st_write(w, argv[4])) return die();
    sk_st_writer_free(w);
    free(names); free(logits); free(inp); free(tgt);
    sk_st_free(&bt);
    sk_model_free(m);
    return 0;
}
