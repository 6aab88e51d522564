/* skiplm quantize: a weights file or checkpoint with its 2-D weights in 8 bits (q8_0: int8 in
 * blocks of 32 inputs, one fp16 scale each; docs/files.md), written atomically. The tokenizer
 * the source names (or has beside it) is recorded, so that sample and chat find it; the
 * optimizer state of a checkpoint is left behind. */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>

int cmd_quantize(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *out = NULL;
    cli_opt opts[] = {
        {"out", 's', &out, "the file to write (a .safetensors file)"},
        CLI_MODEL_OPTS(&mo),
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "quantize", "WEIGHTS --out FILE [options]", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1 || !out) { fprintf(stderr, "skiplm quantize: give the weights and --out FILE\n"); return 2; }
    sk_model *m;
    if (cli_load_model(&m, pos[0], &mo)) return cli_fail("quantize");
    const int was_q8 = sk_model_q8(m);
    char tp[4096];
    const char *meta[] = {"tokenizer", cli_tokenizer_of(pos[0], tp, sizeof tp) ? NULL : tp, NULL};
    if (!meta[1]) fprintf(stderr, "skiplm quantize: no tokenizer recorded (%s): give sample --tokenizer\n", sk_last_error());
    if (sk_model_quantize_q8(m) || sk_model_save_meta(m, out, meta)) { sk_model_free(m); return cli_fail("quantize"); }
    size_t n = sk_model_num_params(m);
    printf("wrote %s: %.2fM parameters, the 2-D weights in 8 bits (q8_0)%s\n", out, n / 1e6,
           was_q8 ? " as they were" : "");
    sk_model_free(m);
    return 0;
}
