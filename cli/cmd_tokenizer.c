/* skiplm tokenizer train: learn a byte-level BPE vocabulary (GPT-2 layout: encoder.json +
 * vocab.bpe) from a text file or folder; see docs/tokenizer.md. Each file is a document (no
 * merge crosses two). Reports time and peak memory, then reloads the files with the GPT-2
 * loader and encodes the training text with them as a check (tokens per byte). */
#include "cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define MAX_SPECIALS 256

static const char *SYNOPSIS =
    "train [TEXT_FILE_OR_FOLDER] --vocab-size N --out DIR [--special TOKEN]...\n"
    "       (default input: the State of the Union corpus; <|endoftext|> is always added, as the last id)";

static int cmd_tokenizer_train(int argc, char **argv) {
    const char *out = NULL;
    int vocab = 0;
    const char *special_help = NULL;   /* --special is collected below; listed here for --help */
    cli_opt opts[] = {
        {"vocab-size", 'i', &vocab, "total vocabulary: 256 bytes + merges + special tokens (e.g. 4096)"},
        {"out", 's', &out, "output folder for encoder.json and vocab.bpe (created with its parents)"},
        {"special", 's', &special_help, "a reserved special token; repeat for more (ids before <|endoftext|>)"},
        {0},
    };
    /* --special may repeat: take every occurrence out before the common parser */
    const char *specials[MAX_SPECIALS];
    int n_specials = 0, n = 1;
    char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
    rest[0] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--special")) {
            if (i + 1 >= argc) { fprintf(stderr, "skiplm tokenizer train: --special needs a value\n"); free(rest); return 2; }
            v = argv[++i];
        } else if (!strncmp(argv[i], "--special=", 10)) v = argv[i] + 10;
        if (!v) { rest[n++] = argv[i]; continue; }
        if (n_specials == MAX_SPECIALS) { fprintf(stderr, "skiplm tokenizer train: more than %d special tokens\n", MAX_SPECIALS); free(rest); return 2; }
        specials[n_specials++] = v;
    }
    rest[n] = NULL;
    char *pos[1]; int np;
    int rc = cli_parse(n, rest, "tokenizer", SYNOPSIS, opts, pos, 1, &np, NULL, NULL);
    free(rest);
    if (rc) return rc == 1 ? 0 : rc;
    if (!out) { fprintf(stderr, "skiplm tokenizer train: --out DIR is required\n"); cli_usage("tokenizer", SYNOPSIS, opts, 0); return 2; }
    if (vocab <= 0) { fprintf(stderr, "skiplm tokenizer train: --vocab-size N is required (e.g. 4096)\n"); return 2; }

    double t0 = sk_now();
    const char *input = np ? pos[0] : CLI_DEFAULT_CORPUS;
    cli_docs files = {0};
    char **text = NULL;
    size_t *len = NULL, total = 0;
    int32_t *ids = NULL;
    sk_tokenizer *tok = NULL;
    rc = 1;
    if (cli_list_docs(input, !np, &files)) { cli_fail("tokenizer train"); goto done; }
    text = calloc(files.n, sizeof(char *));
    len = calloc(files.n, sizeof(size_t));
    for (int i = 0; i < files.n; i++) {
        if (cli_read_file(files.v[i], &text[i], &len[i])) { cli_fail("tokenizer train"); goto done; }
        total += len[i];
    }
    if (total == 0) { fprintf(stderr, "skiplm tokenizer train: %s: the training text is empty\n", input); goto done; }
    if (cli_mkdir_p(out)) { fprintf(stderr, "skiplm tokenizer train: %s: %s\n", out, strerror(errno)); goto done; }

    sk_bpe_stats s;
    if (sk_bpe_train((const char *const *)text, len, files.n, vocab, specials, n_specials, out, &s)) {
        cli_fail("tokenizer train");
        goto done;
    }
    double t1 = sk_now();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int n_sp = s.vocab_size - 256 - s.n_merges;
    printf("trained %s: vocabulary %d = 256 bytes + %d merges + %d special token%s, <|endoftext|> = %d\n",
           out, s.vocab_size, s.n_merges, n_sp, n_sp > 1 ? "s" : "", s.eot);
    if (s.vocab_size < vocab)
        printf("  note: the text ran out of pairs after %d merges (asked for %d tokens)\n", s.n_merges, vocab);
    printf("  text: %d file%s, %.2f MB, %zu pre-tokens, %zu distinct\n", files.n, files.n > 1 ? "s" : "",
           total / 1e6, s.pretokens, s.unique_words);
    printf("  time: %.2f s (reading %.2f s, counting %.2f s, %d merges %.2f s); peak memory %.1f MB (getrusage)\n",
           t1 - t0, t1 - t0 - s.seconds_count - s.seconds_merge, s.seconds_count, s.n_merges, s.seconds_merge,
           ru.ru_maxrss / 1024.0);
    if (s.vocab_size > 65536)
        printf("  note: more than 65536 tokens do not fit skiplm's uint16 token shards\n");

    /* check: the GPT-2 loader reads the files, and the text encodes with them */
    if (sk_tok_load_gpt2_dir(&tok, out)) { cli_fail("tokenizer train"); goto done; }
    size_t nid, cap = 0, tokens = 0;
    for (int i = 0; i < files.n; i++) {                  /* one document at a time, buffer reused */
        nid = 0;
        if (sk_tok_encode(tok, text[i], len[i], &ids, &nid, &cap)) { cli_fail("tokenizer train"); goto done; }
        tokens += nid;
    }
    printf("  check: reloaded by the GPT-2 loader; the text encodes to %zu tokens (%.4f tokens per byte, %.3f bytes per token)\n",
           tokens, (double)tokens / total, (double)total / tokens);
    printf("  use it: skiplm prepare %s%s--tokenizer gpt2 --vocab-dir %s --out DATA_DIR\n", np ? input : "", np ? " " : "", out);
    rc = 0;
done:
    free(ids);
    sk_tok_free(tok);
    for (int i = 0; text && i < files.n; i++) free(text[i]);
    cli_docs_free(&files);
    free(text); free(len);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "train")) return cmd_tokenizer_train(argc - 1, argv + 1);
    FILE *o = argc >= 2 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? stderr : stdout;
    if (o == stderr) fprintf(stderr, "skiplm tokenizer: unknown subcommand '%s'\n", argc >= 2 ? argv[1] : "");
    fprintf(o, "usage: skiplm tokenizer %s\n", SYNOPSIS);
    return o == stdout ? 0 : 2;
}
