/* Internal to the io part: the in-memory safetensors parser (tests and fuzzers), the
 * weights writer with extra tensors (checkpoints, src/train/train.c), and what weights.c,
 * hf.c and gguf_model.c share (meta.c, hf_layout.c). */
#ifndef SK_IO_INTERNAL_H
#define SK_IO_INTERNAL_H
#include "skiplm_io.h"

/* Parse a safetensors image held in memory with sk_st_read's checks (tests, fuzzers);
 * name is used in error messages. The data section is copied. */
int sk_st_read_mem(const void *buf, size_t n, const char *name, sk_safetensors *st);

/* As sk_model_save, with extra tensors and metadata already added to `extra` by the caller
 * (a checkpoint adds its optimizer state); the writer is not freed. */
int sk_model_save_with(const sk_model *m, const char *path, sk_st_writer *extra);

/* meta.c: the config's fields as metadata keys, shared by weights.c (skiplm's metadata) and
 * hf.c (config.json's numbers): name, float (1) or int (0), offset in sk_config. */
typedef struct { const char *key; int is_float; size_t off; } sk_meta_field;
extern const sk_meta_field sk_meta_fields[];
extern const size_t sk_n_meta_fields;
/* 1 if the metadata / config field `field` holds a float (dropout, norm_eps, rope_*), 0 an int. */
int sk_meta_is_float(const char *field);

/* hf.c, for weights.c: the config of a file without skiplm metadata from HF's config.json
 * beside weights_path, where there is one (*found = 1); *tie = tie_word_embeddings (0/1), -1
 * when not given. */
int sk_hf_apply_config(sk_config *c, const char *weights_path, int *found, int *tie);

/* hf_layout.c: HF's tensor layouts, shared by weights.c (HF files on load), hf.c (export)
 * and gguf_model.c. GPT-2's four Linear weights (c_attn, attn c_proj, c_fc, mlp c_proj): Conv1D's (in, out) in HF. */
int sk_hf_gpt2_linear(const sk_model *m, const char *name);
/* Llama's q/k projection weights and biases, whose rows HF orders by halves (*n_heads set). */
int sk_hf_rope_proj(const sk_model *m, const char *name, int *n_heads);
/* rows of n_heads heads of size d, each row of width C: pairs -> halves (to_hf) or back */
void sk_hf_permute_rope_rows(float *dst, const float *src, int n_heads, int d, int C, int to_hf);
/* the same for rows of row_bytes bytes (an 8-bit matrix's int8 rows, its rows of scales) */
void sk_permute_rows_bytes(void *dst, const void *src, int n_heads, int d, size_t row_bytes, int to_hf);
/* dst (C, R) = src (R, C)^T, in 32 x 32 tiles */
void sk_transpose(float *dst, const float *src, size_t R, size_t C);
#endif
