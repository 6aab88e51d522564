/* Train a tiny model with Skip-Layer Attention with the shared library (docs/library.md):
 *   cc train.c -Iinclude -Lbuild -lskiplm -o train
 *   ./train SHARD VOCAB_SIZE STEPS OUT.safetensors
 * SHARD is a token shard (skiplm prepare's train.bin); the model is GPT-2-family, 2 layers, 4
 * heads, 64 wide, context 32, with the paper's 3/4 SLA rule; it prints the loss of each step
 * and writes a checkpoint that skiplm eval, sample and train --resume read. Its weights and
 * optimizer state are those of `skiplm train --data DIR --n_layer 2 --n_head 4 --n_embd 64
 * --block_size 32 --sla --steps STEPS --batch 8 --seq 32 --lr 3e-3 --eval-every 0` when DIR
 * holds SHARD as train.bin. */
#include <skiplm.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: train SHARD VOCAB_SIZE STEPS OUT.safetensors\n"); return 2; }
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 2; c.n_head = 4; c.n_embd = 64; c.block_size = 32; c.vocab_size = atoi(argv[2]);
    sk_config_sla_default(&c);                        /* layer 1's last 3 heads read layer 0's K/V */
    sk_train_cfg tc;
    sk_train_default(&tc);
    tc.steps = atoi(argv[3]); tc.B = 8; tc.T = 32; tc.lr = 3e-3f; tc.min_lr = tc.lr / 10; tc.eval_every = 0;
    sk_loader_cfg lc = {.B = tc.B, .T = tc.T, .seed = tc.seed, .shuffle = tc.shuffle, .vocab_size = c.vocab_size};
    sk_model *m = NULL; sk_loader *L = NULL; sk_trainer *tr = NULL;
    const char *shard = argv[1];
    int rc = 1;
    if (sk_config_check(&c) || sk_loader_open(&L, &shard, 1, &lc) || sk_model_new(&m, &c, tc.seed) ||
        sk_trainer_new(&tr, m, &tc, L, NULL)) goto out;
    for (int i = 0; i < tc.steps; i++) {
        sk_step_info info;
        if (sk_trainer_step(tr, &info)) goto out;
        printf("step %d loss %.4f\n", info.step, info.loss);
    }
    if (sk_trainer_save(tr, argv[4], NULL)) goto out;
    rc = 0;
out:
    if (rc) fprintf(stderr, "train: %s\n", sk_last_error());
    sk_trainer_free(tr); sk_loader_free(L); sk_model_free(m);
    return rc;
}
