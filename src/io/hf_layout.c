/* Hugging Face's tensor layouts against skiplm's: GPT-2's Conv1D weights stored (in, out) and
 * their transpose, Llama's q/k projection rows ordered by halves rather than by pairs (the
 * permutation both ways, fp32 rows and rows of any width). Used by weights.c (loading HF
 * files), hf.c (exporting them) and gguf_model.c (GGUF's q/k rows). See io.h. */
#include "core/model.h"
#include "io/io.h"
#include <string.h>

int sk_hf_gpt2_linear(const sk_model *m, const char *name) {
    if (m->cfg.family != SK_GPT2) return 0;
    static const char *const sfx[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
    size_t n = strlen(name);
    for (int i = 0; i < 4; i++) {
        size_t k = strlen(sfx[i]);
        if (n > k && !strcmp(name + n - k, sfx[i])) return 1;
    }
    return 0;
}

/* dst (C, R) = src (R, C)^T, in 32 x 32 tiles (a row-by-row loop strides through memory on
 * every write: 3x slower for GPT-2's matrices) */
void sk_transpose(float *dst, const float *src, size_t R, size_t C) {
    for (size_t r0 = 0; r0 < R; r0 += 32)
        for (size_t c0 = 0; c0 < C; c0 += 32) {
            const size_t r1 = r0 + 32 < R ? r0 + 32 : R, c1 = c0 + 32 < C ? c0 + 32 : C;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++) dst[c * R + r] = src[r * C + c];
        }
}

/* rows of n_heads heads of size d, each row_bytes long: pairs -> halves (to_hf) or back (an
 * 8-bit file's int8 rows and their scale rows move as the fp32 rows do) */
void sk_permute_rows_bytes(void *dst, const void *src, int n_heads, int d, size_t row_bytes, int to_hf) {
    for (int h = 0; h < n_heads; h++)
        for (int j = 0; j < d / 2; j++)
            for (int e = 0; e < 2; e++) {
                size_t pair_row = (size_t)h * d + 2 * j + e, half_row = (size_t)h * d + j + e * (d / 2);
                size_t to = to_hf ? half_row : pair_row, from = to_hf ? pair_row : half_row;
                memcpy((char *)dst + to * row_bytes, (const char *)src + from * row_bytes, row_bytes);
            }
}
void sk_hf_permute_rope_rows(float *dst, const float *src, int n_heads, int d, int C, int to_hf) {
    sk_permute_rows_bytes(dst, src, n_heads, d, sizeof(float) * (size_t)C, to_hf);
}

/* q/k projection weights and biases (qkv_bias): their rows are permuted */
int sk_hf_rope_proj(const sk_model *m, const char *name, int *n_heads) {
    if (m->cfg.family != SK_LLAMA) return 0;
    if (strstr(name, "self_attn.q_proj.")) { *n_heads = m->H; return 1; }
    if (strstr(name, "self_attn.k_proj.")) { *n_heads = m->Hkv; return 1; }
    return 0;
}
