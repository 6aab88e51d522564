/* skiplm files: safetensors (reader, validating every offset, and atomic writer), the
 * model's weights files with the config in their metadata, Hugging Face folders
 * (config.json, generation_config.json) and GGUF files, in both directions. Included by skiplm.h;
 * docs/files.md. */
#ifndef SKIPLM_IO_H
#define SKIPLM_IO_H
#include <stddef.h>
#include <stdint.h>
#include "skiplm_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ safetensors */

typedef enum { SK_F32 = 0, SK_F16, SK_BF16, SK_F64, SK_I32, SK_I64, SK_U8, SK_BOOL, SK_I16, SK_U16, SK_I8 } sk_dtype;

typedef struct {
    char *name;
    sk_dtype dtype;
    int ndim;
    int64_t shape[8];
    size_t offset, nbytes;          /* within the data section */
} sk_st_tensor;

typedef struct {
    sk_st_tensor *tensors; int n_tensors;
    char **meta_keys, **meta_vals; int n_meta;   /* __metadata__ (string -> string) */
    uint8_t *data; size_t data_size;             /* the data section (owned) */
    char *path;                                  /* file name, for error messages (owned) */
} sk_safetensors;

/* Read and validate a whole file: sizes, JSON header, dtypes, shapes, offsets (tensors
 * must tile the data section exactly: no overlap, no hole), duplicate names, metadata
 * values are strings. Errors: SK_EIO (cannot read) or SK_EFORMAT, message
 * "<path>: [tensor 'name': ]<what>". On error *st is left empty (safe to sk_st_free).
 * Data is little-endian, as in the format; tensor data may be unaligned in st->data. */
int sk_st_read(const char *path, sk_safetensors *st);
void sk_st_free(sk_safetensors *st);
const sk_st_tensor *sk_st_find(const sk_safetensors *st, const char *name);
const char *sk_st_meta(const sk_safetensors *st, const char *key);
/* Copy a tensor into float32 (converting f16/bf16/f64), checking the expected element count.
 * A missing tensor, another dtype or n != number of elements: SK_EFORMAT naming the tensor,
 * its shape and the expected count. */
int sk_st_get_f32(const sk_safetensors *st, const char *name, float *dst, size_t n);

/* Writer: collect tensors (data pointers must stay valid until sk_st_write), then write
 * atomically (temp file, fsync, rename). Tensors are written in insertion order, streamed
 * from the caller's buffers (no copy); names must be non-empty unique UTF-8, metadata keys
 * unique; metadata is written first as "__metadata__". sk_st_add copies name and shape.
 * Add wider dtypes first if readers need aligned data (the official writer sorts so). */
typedef struct sk_st_writer sk_st_writer;
sk_st_writer *sk_st_writer_new(void);
int sk_st_add(sk_st_writer *w, const char *name, sk_dtype dtype, int ndim,
              const int64_t *shape, const void *data);
int sk_st_add_meta(sk_st_writer *w, const char *key, const char *value);
int sk_st_write(sk_st_writer *w, const char *path);
void sk_st_writer_free(sk_st_writer *w);

/* ---------------------------------------------------------------- weights */

/* Weights as safetensors (docs/files.md): nanoGPT/HF names, config in __metadata__.
 * lm_head.weight is tied to transformer.wte.weight and not stored twice. */
int sk_model_save(const sk_model *m, const char *path);
/* The same with more metadata: meta holds key, value pairs and ends with NULL (a NULL value
 * skips its key). A quantized model (sk_model_q8) is written as int8 matrices with fp16 scales
 * and "quantization": "q8_0" (docs/files.md); sk_model_load reads it back as it was. */
int sk_model_save_meta(const sk_model *m, const char *path, const char *const *meta);
/* Load a file, or a folder holding model.safetensors (as Hugging Face writes it). Config
 * comes from the metadata, or for a file without skiplm metadata from HF's config.json
 * beside it (model_type gpt2 or llama), else from the shapes; fields given in override
 * (non-NULL: its non-zero fields, and routing when not "") take precedence; n_head, and
 * the SLA setting (n_skip_layer, n_skip_head, routing) where the file's own routes heads,
 * must agree with the file (SK_EINVAL names the field). The SLA paper's metadata names
 * num_skip_layer / num_skip_head are read as n_skip_layer / n_skip_head. HF GPT-2 files load as they are: names with or without
 * "transformer.", Linear weights stored (in, out) by Conv1D transposed on load. */
int sk_model_load(sk_model **m, const char *path, const sk_config *override);
/* Write dir/model.safetensors and dir/config.json as Hugging Face's transformers writes
 * GPT2LMHeadModel or LlamaForCausalLM, so that from_pretrained(dir) computes what skiplm
 * does (dir must exist). Refused for what those models lack: Skip-Layer routing,
 * sinusoidal positions, Llama with a ReLU MLP. */
int sk_model_save_hf(const sk_model *m, const char *dir);
/* Build the model from an already parsed file (path is for messages). */
int sk_model_load_st(sk_model **m, const sk_safetensors *st, const char *path, const sk_config *override);
/* Metadata keys of st that read like a config field ("n_...", "num_...", or a word such as
 * layer, head, embd, vocab, skip, rope) but that skiplm does not read: a config another
 * trainer wrote that would otherwise be dropped without a word. Returns how many; the first
 * max of them go to keys (pointers into st). The SLA paper's num_skip_layer / num_skip_head
 * are read (as n_skip_layer / n_skip_head), so they are not among them. */
int sk_meta_unknown_keys(const sk_safetensors *st, const char **keys, int max);
/* Read just the config of a weights file or folder, as sk_model_load does. */
int sk_config_from_file(sk_config *cfg, const char *path);
/* The end-of-sequence ids of a Hugging Face folder (or of the weights file inside one):
 * eos_token_id of generation_config.json, else of config.json (a number or a list), at most
 * max of them into ids; *n = 0 when neither file gives one (skiplm's own files: the caller
 * decides). A file that exists but is not valid JSON, or an eos_token_id that is not a whole
 * number >= 0 or a list of them, is an error naming the file. */
int sk_hf_eos_ids(const char *path, int32_t *ids, int max, int *n);


/* ------------------------------------------------------------------- GGUF
 *
 * llama.cpp's file format (versions 2 and 3; docs/files.md). The reader checks every length,
 * count, offset, alignment and tensor extent against the file (a truncated or hostile file is
 * an SK_EFORMAT error naming what is wrong, never a read past the end); the file is mapped
 * read-only, tensor data point into it. */
typedef enum { SK_GGUF_U8 = 0, SK_GGUF_I8, SK_GGUF_U16, SK_GGUF_I16, SK_GGUF_U32, SK_GGUF_I32, SK_GGUF_F32,
               SK_GGUF_BOOL, SK_GGUF_STR, SK_GGUF_ARR, SK_GGUF_U64, SK_GGUF_I64, SK_GGUF_F64 } sk_gguf_type;
/* the ggml tensor types skiplm converts (others are named by sk_ggml_type_name and refused) */
enum { SK_GGML_F32 = 0, SK_GGML_F16 = 1, SK_GGML_Q8_0 = 8, SK_GGML_BF16 = 30 };

typedef struct {
    char *key;
    int type;                   /* sk_gguf_type */
    int elem;                   /* arrays: the elements' type; -1 otherwise */
    uint64_t n;                 /* strings: byte length; arrays: element count; else 1 */
    const uint8_t *data;        /* the value's bytes in the file (a string: its bytes, no NUL;
                                   an array: its first element) */
    const char **strs;          /* string arrays: each element's bytes (no NUL) ... */
    size_t *lens;               /* ... and length */
} sk_gguf_kv;

typedef struct {
    char *name;
    int ndim;
    int64_t ne[4];              /* ne[0] is the contiguous dimension: a (rows, cols) matrix has ne = {cols, rows} */
    int type;                   /* ggml type */
    uint64_t offset, nbytes, numel;
    const uint8_t *data;        /* in the mapped file, aligned as the file says */
} sk_gguf_tensor;

typedef struct {
    uint32_t version;
    sk_gguf_kv *kv; int n_kv;
    sk_gguf_tensor *tensors; int n_tensors;
    uint64_t alignment, data_offset;
    const uint8_t *base; size_t size;     /* the whole file */
    void *map; size_t map_size;           /* (internal) the mapping, or ... */
    uint8_t *owned;                       /* ... the copy of sk_gguf_read_mem */
    char *path;
} sk_gguf;

/* Read and validate a GGUF file (SK_EIO, SK_EFORMAT "<path>: <what>"); on error *g is left
 * empty (safe to sk_gguf_free). sk_gguf_read_mem parses a copy of buf (tests, fuzzers). */
int sk_gguf_read(const char *path, sk_gguf *g);
int sk_gguf_read_mem(const void *buf, size_t n, const char *name, sk_gguf *g);
void sk_gguf_free(sk_gguf *g);
/* 1 if the file at path starts with GGUF's magic */
int sk_is_gguf(const char *path);
const char *sk_ggml_type_name(int type);
const char *sk_gguf_type_name(int type);
const sk_gguf_kv *sk_gguf_find(const sk_gguf *g, const char *key);
const sk_gguf_tensor *sk_gguf_tensor_find(const sk_gguf *g, const char *name);
/* Scalar values: 0 found, 1 absent, -1 of another type (SK_EFORMAT message set). Integers of
 * any width (and bool); floats accept f32, f64 and integers. */
int sk_gguf_get_int(const sk_gguf *g, const char *key, int64_t *v);
int sk_gguf_get_float(const sk_gguf *g, const char *key, double *v);
/* A string value (not NUL-terminated) and its length, or NULL if absent or not a string. */
const char *sk_gguf_get_str(const sk_gguf *g, const char *key, size_t *len);
/* Element i of an array of integers / floats: 0, or 1 (out of range or another type). */
int sk_gguf_arr_int(const sk_gguf_kv *kv, uint64_t i, int64_t *v);
int sk_gguf_arr_float(const sk_gguf_kv *kv, uint64_t i, float *v);

/* A model from a GGUF file of architecture llama, qwen2 or gpt2 (general.architecture) with
 * its 2-D weights in F32, F16, BF16 or Q8_0 (1-D ones in F32, F16 or BF16). The config comes
 * from the architecture's metadata; Q8_0 matrices are kept 8-bit (as a quantized skiplm file:
 * sk_model_q8, decoding reads them), the other matrices of such a file are quantized as
 * sk_model_quantize_q8 does. Another tensor type (Q4_K, ...) is refused by name. The
 * override's n_head must agree with the file; its SLA fields apply as for a file without
 * SLA. */
int sk_model_load_gguf(sk_model **m, const sk_gguf *g, const sk_config *override);
/* Write m as a GGUF file that llama.cpp runs (architecture llama, qwen2 or gpt2), 2-D weights
 * as type (SK_GGML_F32, SK_GGML_BF16 or SK_GGML_Q8_0; an 8-bit model is written Q8_0 as it
 * is, a model quantized on export gets the blocks sk_model_quantize_q8 makes), 1-D ones F32.
 * meta: extra key/value string pairs ending with NULL (the tokenizer's, written by the
 * caller through sk_gguf_writer), may be NULL. Refused for what llama.cpp's models lack:
 * Skip-Layer routing, sinusoidal positions, a ReLU MLP, llama3 RoPE scaling. Atomic. */
typedef struct sk_gguf_writer sk_gguf_writer;
sk_gguf_writer *sk_gguf_writer_new(void);
void sk_gguf_writer_free(sk_gguf_writer *w);
/* metadata: copied; keys unique */
int sk_gguf_add_str(sk_gguf_writer *w, const char *key, const char *s, size_t len);
int sk_gguf_add_u32(sk_gguf_writer *w, const char *key, uint32_t v);
int sk_gguf_add_i32(sk_gguf_writer *w, const char *key, int32_t v);
int sk_gguf_add_f32(sk_gguf_writer *w, const char *key, float v);
int sk_gguf_add_bool(sk_gguf_writer *w, const char *key, int v);
/* arrays: strings (n of them, each with its length), f32, i32 */
int sk_gguf_add_str_arr(sk_gguf_writer *w, const char *key, const char *const *s, const size_t *lens, size_t n);
int sk_gguf_add_f32_arr(sk_gguf_writer *w, const char *key, const float *v, size_t n);
int sk_gguf_add_i32_arr(sk_gguf_writer *w, const char *key, const int32_t *v, size_t n);
/* a tensor: ne as in the file (ne[0] contiguous), data of its type's size, kept by pointer until
 * sk_gguf_write (own = 1: freed with the writer) */
int sk_gguf_add_tensor(sk_gguf_writer *w, const char *name, int type, int ndim, const int64_t *ne, const void *data, int own);
int sk_gguf_write(sk_gguf_writer *w, const char *path);
/* The model's metadata and tensors into w (then sk_gguf_write): see above. */
int sk_model_to_gguf(const sk_model *m, sk_gguf_writer *w, int type);

#ifdef __cplusplus
}
#endif
#endif
