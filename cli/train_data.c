/* skiplm train's data (train.h): the shards, the tokenizer and vocabulary, the loaders. */
#include "train.h"
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* "skiplm train: MESSAGE" on stderr; 1 */
int train_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("skiplm train: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* The data: --data DIR's train and val shards and tokenizer, or --train, --val and --tokenizer,
 * or (resuming without them) those the checkpoint records; then the shards they name. */
int train_find_data(train_run *r, const train_opts *o) {
    r->train_path = o->train; r->val_path = o->val; r->tok_path = o->tokenizer;
    if (o->data) {
        if (r->train_path) return train_fail("give --data DIR or --train FILE, not both");
        if (!is_dir(o->data)) return train_fail("--data %s: no such directory", o->data);
        r->train_path = o->data;
        if (!r->val_path) r->val_path = o->data;
        const char *cand[] = {"tokenizer.json", "vocab.json", "encoder.json"};
        for (int i = 0; i < 3 && !r->tok_path; i++) {
            snprintf(r->tokb, sizeof r->tokb, "%s/%s", o->data, cand[i]);
            if (file_exists(r->tokb)) {
                if (i == 2) snprintf(r->tokb, sizeof r->tokb, "%s", o->data);   /* GPT-2: the directory */
                r->tok_path = r->tokb;
            }
        }
    } else if (!r->train_path && !r->resume) {
        return train_fail("give --data DIR (train and val shards) or --train FILE");
    }
    if (!r->train_path && r->resume) {
        const char *d = sk_st_meta(&r->ck, "train.data_train");
        if (!d) return train_fail("give the training data (--data or --train) to resume");
        snprintf(r->trb, sizeof r->trb, "%s", d); r->train_path = r->trb;
        const char *v = sk_st_meta(&r->ck, "train.data_val");
        if (v && !r->val_path) { snprintf(r->vab, sizeof r->vab, "%s", v); r->val_path = r->vab; }
        const char *t = sk_st_meta(&r->ck, "tokenizer");
        if (t && !r->tok_path) { snprintf(r->tokb, sizeof r->tokb, "%s", t); r->tok_path = r->tokb; }
    }
    if (cli_find_shards(r->train_path, "train", &r->trs, r->tr_rec, sizeof r->tr_rec)) return cli_fail("train");
    if (r->val_path && cli_find_shards(r->val_path, "val", &r->vas, r->va_rec, sizeof r->va_rec)) return cli_fail("train");
    return 0;
}

/* The tokenizer, and the vocabulary: the model's, else the tokenizer's, else the data's
 * largest id + 1; then the whole config is checked. */
int train_load_vocab(train_run *r) {
    sk_config *cfg = &r->cfg;
    if (r->tok_path && sk_tok_load(&r->tok, r->tok_path)) return cli_fail("train");
    if (cfg->vocab_size <= 0) {
        if (r->tok) cfg->vocab_size = sk_tok_vocab_size(r->tok);
        else {
            sk_shard s;
            long maxid = -1;
            for (int i = 0; i < r->trs.n + r->vas.n; i++) {
                if (sk_shard_open(&s, i < r->trs.n ? r->trs.v[i] : r->vas.v[i - r->trs.n])) return cli_fail("train");
                for (size_t k = 0; k < s.n; k++) if ((long)sk_shard_at(&s, k) > maxid) maxid = (long)sk_shard_at(&s, k);
                sk_shard_close(&s);
            }
            if (maxid >= INT32_MAX) return train_fail("token id %ld in the data is too large for a vocabulary", maxid);
            cfg->vocab_size = (int)maxid + 1;
            fprintf(stderr, "skiplm train: no tokenizer given: vocab_size %d from the data (largest token id + 1)\n", cfg->vocab_size);
        }
    } else if (r->tok && sk_tok_vocab_size(r->tok) > cfg->vocab_size) {
        return train_fail("the tokenizer has %d tokens but the model's vocab_size is %d", sk_tok_vocab_size(r->tok), cfg->vocab_size);
    }
    return sk_config_check(cfg) ? cli_fail("train") : 0;
}

/* The training and validation loaders: each must hold one batch over all ranks. */
int train_open_loaders(train_run *r) {
    const sk_train_cfg *tc = &r->tc;
    sk_loader_cfg lc = {.B = tc->B, .T = tc->T, .seed = tc->seed, .shuffle = tc->shuffle, .vocab_size = r->cfg.vocab_size,
                        .rank = r->rank, .world_size = r->world};
    const long gB = r->gB = (long)tc->B * r->world;
    if (sk_loader_open(&r->Ltr, (const char *const *)r->trs.v, r->trs.n, &lc)) return cli_fail("train");
    if (sk_loader_n_windows(r->Ltr) < (uint64_t)gB)
        return train_fail("%s holds %" PRIu64 " windows of %d tokens, fewer than one batch of %ld (lower --batch or --seq)",
                    r->train_path, sk_loader_n_windows(r->Ltr), tc->T + 1, gB);
    if (sk_loader_n_short(r->Ltr) && r->r0p)
        fprintf(stderr, "skiplm train: note: %d of the %d training shards are shorter than one window of %d tokens and "
                "give none\n", sk_loader_n_short(r->Ltr), r->trs.n, tc->T + 1);
    if (r->val_path) {
        sk_loader_cfg vc = lc;
        vc.shuffle = 0;
        if (sk_loader_open(&r->Lval, (const char *const *)r->vas.v, r->vas.n, &vc)) return cli_fail("train");
        uint64_t nw = sk_loader_n_windows(r->Lval);
        if (nw < (uint64_t)gB)
            return train_fail("%s holds %" PRIu64 " windows of %d tokens, fewer than one batch of %ld (lower --batch or --seq)",
                        r->val_path, nw, tc->T + 1, gB);
        if (nw / gB < (uint64_t)tc->eval_batches && r->r0p)
            fprintf(stderr, "skiplm train: note: %s has %" PRIu64 " batches, fewer than --eval-batches %d: using them all\n",
                    r->val_path, nw / gB, tc->eval_batches);
    }
    return 0;
}

