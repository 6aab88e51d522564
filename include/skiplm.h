/* skiplm — GPT-style language models with Skip-Layer Attention, in C11.
 *
 * The public API, one header a part. Every exported name starts with sk_. Library functions
 * return 0 on success and a non-zero error code on failure, with the message in
 * sk_last_error(); only the command-line tool prints and exits. Tensors are plain float
 * arrays, row-major, shapes given in the comments.
 *
 *   skiplm_base.h       errors, clock, memory limit, atomic writes
 *   skiplm_attention.h  scaled dot-product attention (PyTorch's contract) and MHA
 *   skiplm_model.h      config and Skip-Layer routing, the model, KV cache, sampling
 *   skiplm_io.h         safetensors, weights files, Hugging Face folders
 *   skiplm_train.h      shards and loader, AdamW, the trainer, MPI
 *   skiplm_text.h       tokenizers, chat templates, BPE training
 *   skiplm_cuda.h       the CUDA backend (not included here: only in a `make cuda` build)
 */
#ifndef SKIPLM_H
#define SKIPLM_H
#include "skiplm_base.h"
#include "skiplm_attention.h"
#include "skiplm_model.h"
#include "skiplm_io.h"
#include "skiplm_train.h"
#include "skiplm_text.h"
#endif
