/* Test driver for the LoRA comparison with PyTorch (tests/test_lora.py, tests/test_lora_train.py).
 *   tool_lora grad BASE ADAPTER BATCH OUT [DROPOUT SEED]
 *       the adapter attached to the frozen base as training attaches it (sk_lora_attach, with
 *       dropout DROPOUT, default 0): forward on BATCH (I32 "inputs", "targets" (B, T)) into
 *       OUT/out.safetensors ("logits", "loss", "loss_fb", "model_grads": 1 if the base holds a
 *       gradient buffer after the backward pass), then forward + backward with dropout
 *       seed SEED (default 0) and the adapter's gradients written as an adapter folder OUT (PEFT's
 *       names and layout, the gradients in place of A and B). */
#include "skiplm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(void) { fprintf(stderr, "tool_lora: %s\n", sk_last_error()); return 1; }

int main(int argc, char **argv) {
    if ((argc != 6 && argc != 8) || strcmp(argv[1], "grad")) {
        fprintf(stderr, "usage: tool_lora grad BASE ADAPTER BATCH OUT [DROPOUT SEED]\n");
        return 2;
    }
    sk_model *m;
    sk_lora *l;
    sk_safetensors bt;
    if (sk_model_load(&m, argv[2], NULL) || sk_lora_load(&l, m, argv[3]) || sk_st_read(argv[4], &bt)) return die();
    const sk_st_tensor *ti = sk_st_find(&bt, "inputs"), *tt = sk_st_find(&bt, "targets");
    if (!ti || !tt || ti->dtype != SK_I32 || ti->ndim != 2 || tt->nbytes != ti->nbytes) { fprintf(stderr, "bad batch\n"); return 1; }
    const int B = (int)ti->shape[0], T = (int)ti->shape[1];
    int32_t *x = malloc(ti->nbytes), *y = malloc(tt->nbytes);
    memcpy(x, bt.data + ti->offset, ti->nbytes);
    memcpy(y, bt.data + tt->offset, tt->nbytes);
    const int V = sk_model_config(m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)B * T * V), loss, loss_fb;
    const float drop = argc == 8 ? (float)atof(argv[6]) : 0.0f;
    const uint64_t seed = argc == 8 ? strtoull(argv[7], NULL, 10) : 0;
    if (sk_lora_attach(l, m, B * T, drop)) return die();
    if (sk_model_forward(m, x, y, B, T, &loss, logits)) return die();
    sk_lora_zero_grad(l);
    if (sk_model_forward_backward(m, x, y, B, T, 1.0f, seed, &loss_fb)) return die();
    /* the gradients written where A and B go */
    memcpy(sk_lora_weights(l), sk_lora_grads(l), sk_lora_num_params(l) * sizeof(float));
    if (sk_lora_save(l, m, argv[5], NULL)) return die();
    sk_st_writer *w = sk_st_writer_new();
    int64_t ls[3] = {B, T, V}, one[1] = {1};
    sk_st_add(w, "logits", SK_F32, 3, ls, logits);
    sk_st_add(w, "loss", SK_F32, 1, one, &loss);
    sk_st_add(w, "loss_fb", SK_F32, 1, one, &loss_fb);
    float has_grads = sk_model_grads(m) != NULL;     /* the frozen base's gradient buffer: none */
    sk_st_add(w, "model_grads", SK_F32, 1, one, &has_grads);
    char p[4096];
    snprintf(p, sizeof p, "%s/out.safetensors", argv[5]);
    if (sk_st_write(w, p)) return die();
    sk_st_writer_free(w);
    free(x); free(y); free(logits);
    sk_st_free(&bt);
    sk_lora_detach(l, m);
    sk_lora_free(l);
    sk_model_free(m);
    return 0;
}
