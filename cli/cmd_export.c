/* skiplm export: a model as a Hugging Face folder (model.safetensors, config.json and, for
 * GPT-2's tokenizer, vocab.json + merges.txt), which transformers' from_pretrained reads. */
#include "cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* GPT-2's tokenizer files under Hugging Face's names (the contents are the same) */
static int copy_gpt2_tokenizer(const char *tok_dir, const char *out) {
    static const char *const names[][2] = {{"encoder.json", "vocab.json"}, {"vocab.bpe", "merges.txt"}};
    struct stat sb;
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/encoder.json", tok_dir);
    const int hf_names = stat(src, &sb) != 0;
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", tok_dir, names[i][hf_names]);
        snprintf(dst, sizeof dst, "%s/%s", out, names[i][1]);
        char *data; size_t len;
        if (cli_read_file(src, &data, &len)) return 1;
        int rc = sk_write_atomic(dst, data, len);
        free(data);
        if (rc) return rc;
    }
    return 0;
}

int cmd_export(int argc, char **argv) {
    int n_head = 0;
    const char *out = NULL, *tok = NULL;
    cli_opt opts[] = {
        {"out", 's', &out, "the folder to write (created if missing)"},
        {"tokenizer", 's', &tok, "GPT-2 tokenizer folder to copy beside the weights (default: the model's own, if GPT-2's)"},
        {"n_head", 'i', &n_head, CLI_N_HEAD_HELP},
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "export", "WEIGHTS --out DIR [options]", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1 || !out) { fprintf(stderr, "skiplm export: give the weights and --out DIR\n"); return 2; }
    sk_model *m;
    if (cli_load_model(&m, pos[0], n_head)) return cli_fail("export");
    if (cli_mkdir_p(out)) {
        fprintf(stderr, "skiplm export: %s: %s\n", out, strerror(errno));
        sk_model_free(m);
        return 1;
    }
    if (sk_model_save_hf(m, out)) { sk_model_free(m); return cli_fail("export"); }
    sk_model_free(m);
    char tp[4096];
    struct stat sb;
    if (tok) snprintf(tp, sizeof tp, "%s", tok);
    else if (cli_tokenizer_of(pos[0], tp, sizeof tp)) tp[0] = 0;
    if (tp[0] && stat(tp, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (copy_gpt2_tokenizer(tp, out)) return cli_fail("export");
        printf("wrote %s: model.safetensors, config.json, vocab.json + merges.txt (GPT-2 tokenizer from %s)\n", out, tp);
    } else {
        if (tok) { fprintf(stderr, "skiplm export: --tokenizer %s: not a GPT-2 tokenizer folder\n", tok); return 1; }
        printf("wrote %s: model.safetensors, config.json%s\n", out,
               tp[0] ? " (the character-level tokenizer has no Hugging Face form: not copied)" : "");
    }
    return 0;
}
