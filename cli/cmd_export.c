/* skiplm export: a model as a Hugging Face folder (model.safetensors, config.json and the
 * tokenizer: GPT-2's as vocab.json + merges.txt, a tokenizer.json as is), which
 * transformers' from_pretrained reads. */
#include "cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cmd_export(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *out = NULL, *tok = NULL;
    cli_opt opts[] = {
        {"out", 's', &out, "the folder to write (created if missing)"},
        {"tokenizer", 's', &tok, "tokenizer to copy beside the weights: a GPT-2 folder or a tokenizer.json (default: the model's own)"},
        CLI_MODEL_OPTS(&mo),
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "export", "WEIGHTS --out DIR [options]", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1 || !out) { fprintf(stderr, "skiplm export: give the weights and --out DIR\n"); return 2; }
    sk_model *m;
    if (cli_load_model(&m, pos[0], &mo)) return cli_fail("export");
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
    char tp[4096];
    if (tok) snprintf(tp, sizeof tp, "%s", tok);
    else if (cli_tokenizer_of(pos[0], tp, sizeof tp)) tp[0] = 0;
    sk_tokenizer *t = NULL;
    if (tp[0] && sk_tok_load(&t, tp)) {
        if (tok) return cli_fail("export");
        fprintf(stderr, "skiplm export: the model's tokenizer is not copied: %s\n", sk_last_error());
        tp[0] = 0;
    }
    rc = t ? cli_copy_tokenizer(t, tp, out, 1) : 2;
    const char *kind = t ? sk_tok_kind(t) : "none";
    sk_tok_free(t);
    if (rc == 1) return cli_fail("export");
    if (rc == 2 && tok) { fprintf(stderr, "skiplm export: --tokenizer %s: a character-level tokenizer has no Hugging Face form\n", tok); return 1; }
    if (rc == 0)
        printf("wrote %s: model.safetensors, config.json, %s (from %s)\n", out,
               strcmp(kind, "hf") ? "vocab.json + merges.txt (GPT-2 tokenizer)" : "tokenizer.json", tp);
    else
        printf("wrote %s: model.safetensors, config.json%s\n", out,
               tp[0] ? " (the character-level tokenizer has no Hugging Face form: not copied)" : "");
    return 0;
}
