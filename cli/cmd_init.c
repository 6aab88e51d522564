/* skiplm init: write a randomly initialised model as a safetensors file: the config of a
 * preset and model options, the weights drawn from --seed (a starting point for train --init,
 * or a model to try sample, eval or export on). */
#include "cli.h"
#include <stdio.h>

int cmd_init(int argc, char **argv) {
    uint64_t seed = 1337;
    cli_opt opts[] = {{"seed", 'u', &seed, "initialisation seed (1337)"}, {0}};
    sk_config cfg;
    sk_config_default(&cfg);
    char *pos[1]; int np, given;
    int rc = cli_parse(argc, argv, "init", "OUT.safetensors [model options]", opts, pos, 1, &np, &cfg, &given);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1) { fprintf(stderr, "skiplm init: give the output path\n"); return 2; }
    if (cfg.vocab_size == 0) { fprintf(stderr, "skiplm init: give --vocab_size (or a gpt2 preset)\n"); return 2; }
    sk_model *m;
    if (sk_model_new(&m, &cfg, seed) || sk_model_save(m, pos[0])) return cli_fail("init");
    printf("wrote %s (%zu parameters)\n", pos[0], sk_model_num_params(m));
    sk_model_free(m);
    return 0;
}
