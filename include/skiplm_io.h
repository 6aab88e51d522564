/* skiplm files: safetensors (reader, validating every offset, and atomic writer), the
 * model's weights files with the config in their metadata, and Hugging Face folders
 * (config.json, generation_config.json) in both directions. Included by skiplm.h;
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

#ifdef __cplusplus
}
#endif
#endif
