/* skiplm export: a model as a Hugging Face folder (model.safetensors, config.json and the
 * tokenizer: GPT-2's as vocab.json + merges.txt, a tokenizer.json as is), which
 * transformers' from_pretrained reads; or with --gguf as one GGUF file (weights, tokenizer,
 * chat template) that llama.cpp runs; or with --weights as skiplm's own weights file (any model
 * skiplm runs, SLA included: a model with a LoRA adapter merged, say) (docs/files.md). */
#include "cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --gguf: the model (already loaded) and its tokenizer (tp, may be "") into one file */
static int export_gguf(sk_model *m, const char *weights, const char *path, const char *type, const char *tp) {
    int t = !type ? (sk_model_q8(m) ? SK_GGML_Q8_0 : SK_GGML_F32) : !strcmp(type, "f32") ? SK_GGML_F32
          : !strcmp(type, "bf16") ? SK_GGML_BF16 : !strcmp(type, "q8_0") ? SK_GGML_Q8_0 : -1;
    if (t < 0) { fprintf(stderr, "skiplm export: --type must be f32, bf16 or q8_0 (got '%s')\n", type); return 2; }
    sk_gguf_writer *w = sk_gguf_writer_new();
    if (!w) { sk_error(SK_ENOMEM, "out of memory"); return cli_fail("export"); }
    int rc = sk_model_to_gguf(m, w, t);
    if (!rc && !tp[0]) fprintf(stderr, "skiplm export: %s records no tokenizer: the GGUF file gets none (give --tokenizer)\n", weights);
    sk_tokenizer *tok = NULL;
    if (!rc && tp[0]) {
        if (cli_tok_load(&tok, tp)) rc = SK_EINVAL;
        else if (!strcmp(sk_tok_kind(tok), "char")) rc = sk_error(SK_EINVAL, "%s: a character-level tokenizer has no GGUF form", tp);
        else if (sk_tok_vocab_size(tok) > sk_model_config(m)->vocab_size)
            rc = sk_error(SK_EINVAL, "%s: the tokenizer has %d tokens but the model only %d", tp, sk_tok_vocab_size(tok),
                          sk_model_config(m)->vocab_size);
        else rc = cli_gguf_add_tokenizer(w, tp, weights, tok);
    }
    if (!rc) rc = sk_gguf_write(w, path);
    sk_tok_free(tok);
    sk_gguf_writer_free(w);
    if (rc) return cli_fail("export");
    printf("wrote %s: %s weights%s%s\n", path, t == SK_GGML_F32 ? "f32" : t == SK_GGML_BF16 ? "bf16" : "q8_0",
           tp[0] ? ", the tokenizer of " : " (no tokenizer)", tp);
    return 0;
}

int cmd_export(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *out = NULL, *tok = NULL, *gguf = NULL, *type = NULL, *wfile = NULL;
    cli_opt opts[] = {
        {"out", 's', &out, "the Hugging Face folder to write (created if missing)"},
        {"gguf", 's', &gguf, "write one GGUF file instead (llama.cpp, ollama, LM Studio): weights, tokenizer, chat template"},
        {"weights", 's', &wfile, "write skiplm's own weights file instead (.safetensors, written atomically): any model skiplm runs, SLA included (with --merge-lora: the merged model)"},
        {"type", 's', &type, "with --gguf: the matrices' type, f32 | bf16 | q8_0 (f32; an 8-bit model: q8_0, its own blocks)"},
        {"tokenizer", 's', &tok, "tokenizer to write with the weights: a GPT-2 folder or a tokenizer.json (default: the model's own)"},
        {"merge-lora", 's', &mo.lora, "a LoRA adapter folder (PEFT's) merged into the weights written (the same as --lora)"},
        CLI_MODEL_OPTS(&mo),
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "export", "WEIGHTS --out DIR | --gguf FILE [--type f32|bf16|q8_0] | --weights FILE [options]", opts,
                       pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1 || (!!out + !!gguf + !!wfile) != 1) {
        fprintf(stderr, "skiplm export: give the weights and one of --out DIR, --gguf FILE or --weights FILE\n");
        return 2;
    }
    if (type && !gguf) { fprintf(stderr, "skiplm export: --type is for --gguf\n"); return 2; }
    sk_model *m;
    if (cli_load_model(&m, pos[0], &mo)) return cli_fail("export");
    char tp[4096];
    if (tok) snprintf(tp, sizeof tp, "%s", tok);
    else if (cli_tokenizer_of(pos[0], tp, sizeof tp)) tp[0] = 0;
    if (gguf) {
        rc = export_gguf(m, pos[0], gguf, type, tp);
        sk_model_free(m);
        return rc;
    }
    if (wfile) {
        const char *meta[] = {"tokenizer", tp[0] ? tp : NULL, NULL};
        rc = sk_model_save_meta(m, wfile, meta);
        if (!rc) printf("wrote %s: %.2fM parameters%s%s%s\n", wfile, sk_model_num_params(m) / 1e6, sk_model_q8(m) ? " (8-bit)" : "",
                        mo.lora ? ", the LoRA adapter merged from " : "", mo.lora ? mo.lora : "");
        sk_model_free(m);
        return rc ? cli_fail("export") : 0;
    }
    if (sk_model_q8(m)) {
        fprintf(stderr, "skiplm export: %s holds 8-bit weights (skiplm quantize): export needs the fp32 weights it was quantized from\n", pos[0]);
        sk_model_free(m);
        return 1;
    }
    if (cli_mkdir_p(out)) {
        fprintf(stderr, "skiplm export: %s: %s\n", out, strerror(errno));
        sk_model_free(m);
        return 1;
    }
    if (sk_model_save_hf(m, out)) { sk_model_free(m); return cli_fail("export"); }
    sk_model_free(m);
    sk_tokenizer *t = NULL;
    if (tp[0] && cli_tok_load(&t, tp)) {
        if (tok) return cli_fail("export");
        fprintf(stderr, "skiplm export: the model's tokenizer is not copied: %s\n", sk_last_error());
        tp[0] = 0;
    }
    const int from_gguf = t && cli_is_gguf(tp);
    rc = from_gguf ? (cli_gguf_write_hf_tokenizer(tp, out) ? 1 : 0) : t ? cli_copy_tokenizer(t, tp, out, 1) : 2;
    const char *kind = t ? sk_tok_kind(t) : "none";
    sk_tok_free(t);
    if (rc == 1) return cli_fail("export");
    if (rc == 2 && tok) { fprintf(stderr, "skiplm export: --tokenizer %s: a character-level tokenizer has no Hugging Face form\n", tok); return 1; }
    if (rc == 0)
        printf("wrote %s: model.safetensors, config.json, %s (from %s)\n", out,
               from_gguf ? "tokenizer.json (+ tokenizer_config.json with the chat template, where the file has one)"
               : strcmp(kind, "hf") ? "vocab.json + merges.txt (GPT-2 tokenizer)" : "tokenizer.json", tp);
    else
        printf("wrote %s: model.safetensors, config.json%s\n", out,
               tp[0] ? " (the character-level tokenizer has no Hugging Face form: not copied)" : "");
    return 0;
}
