/* skiplm tokenizer train: learn a byte-level BPE vocabulary (GPT-2 layout: encoder.json +
 * vocab.bpe) from a text file or folder; see docs/tokenizer.md. Each file is a document (no
 * merge crosses two). Reports time and peak memory, then reloads the files with the GPT-2
 * loader and encodes the training text with them as a check (tokens per byte). In order: the
 * command line (parse_opts, --special taken out by take_specials), the texts (read_texts), the
 * training (sk_bpe_train, print_stats), the check (check_tokenizer). */
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

/* The command line. */
typedef struct {
    const char *out, *input;
    int vocab, is_default;                 /* is_default: no input given */
    const char *specials[MAX_SPECIALS];
    int n_specials;
} bpe_opts;

/* A training: the documents and, for the check, the trained tokenizer and its token buffer
 * (bpe_free frees them). */
typedef struct {
    cli_docs files;
    char **text;
    size_t *len, total;
    sk_tokenizer *tok;
    int32_t *ids;
} bpe_run;

/* --special may repeat: every occurrence goes to o->specials, the rest of argv to rest (n of
 * them, NULL-terminated). 0, or 2 (said). */
static int take_specials(bpe_opts *o, int argc, char **argv, char **rest, int *n) {
    *n = 1;
    rest[0] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--special")) {
            if (i + 1 >= argc) { fprintf(stderr, "skiplm tokenizer train: --special needs a value\n"); return 2; }
            v = argv[++i];
        } else if (!strncmp(argv[i], "--special=", 10)) v = argv[i] + 10;
        if (!v) { rest[(*n)++] = argv[i]; continue; }
        if (o->n_specials == MAX_SPECIALS) {
            fprintf(stderr, "skiplm tokenizer train: more than %d special tokens\n", MAX_SPECIALS);
            return 2;
        }
        o->specials[o->n_specials++] = v;
    }
    rest[*n] = NULL;
    return 0;
}

/* The command line into o. cli_parse's status: 0, 1 (--help) or 2. */
static int parse_opts(bpe_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    const char *special_help = NULL;   /* --special is collected by take_specials; listed here for --help */
    cli_opt opts[] = {
        {"vocab-size", 'i', &o->vocab, "total vocabulary: 256 bytes + merges + special tokens (e.g. 4096)"},
        {"out", 's', &o->out, "output folder for encoder.json and vocab.bpe (created with its parents)"},
        {"special", 's', &special_help, "a reserved special token; repeat for more (ids before <|endoftext|>)"},
        {0},
    };
    char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
    char *pos[1]; int n, np;
    int rc = take_specials(o, argc, argv, rest, &n);
    if (!rc) rc = cli_parse(n, rest, "tokenizer", SYNOPSIS, opts, pos, 1, &np, NULL, NULL);
    free(rest);
    if (rc) return rc;
    if (!o->out) { fprintf(stderr, "skiplm tokenizer train: --out DIR is required\n"); cli_usage("tokenizer", SYNOPSIS, opts, 0); return 2; }
    if (o->vocab <= 0) { fprintf(stderr, "skiplm tokenizer train: --vocab-size N is required (e.g. 4096)\n"); return 2; }
    o->is_default = !np;
    o->input = np ? pos[0] : CLI_DEFAULT_CORPUS;
    return 0;
}

/* Every document of the input, and the output folder. 0, or 1 (said). */
static int read_texts(bpe_run *b, const bpe_opts *o) {
    if (cli_read_docs("tokenizer train", o->input, o->is_default, &b->files, &b->text, &b->len, &b->total)) return 1;
    if (b->total == 0) { fprintf(stderr, "skiplm tokenizer train: %s: the training text is empty\n", o->input); return 1; }
    if (cli_mkdir_p(o->out)) { fprintf(stderr, "skiplm tokenizer train: %s: %s\n", o->out, strerror(errno)); return 1; }
    return 0;
}

/* What the training made and what it took (t0: the start of the command). */
static void print_stats(const bpe_run *b, const bpe_opts *o, const sk_bpe_stats *s, double t0) {
    double t1 = sk_now();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int n_sp = s->vocab_size - 256 - s->n_merges;
    printf("trained %s: vocabulary %d = 256 bytes + %d merges + %d special token%s, <|endoftext|> = %d\n",
           o->out, s->vocab_size, s->n_merges, n_sp, n_sp > 1 ? "s" : "", s->eot);
    if (s->vocab_size < o->vocab)
        printf("  note: the text ran out of pairs after %d merges (asked for %d tokens)\n", s->n_merges, o->vocab);
    printf("  text: %d file%s, %.2f MB, %zu pre-tokens, %zu distinct\n", b->files.n, b->files.n > 1 ? "s" : "",
           b->total / 1e6, s->pretokens, s->unique_words);
    printf("  time: %.2f s (reading %.2f s, counting %.2f s, %d merges %.2f s); peak memory %.1f MB (getrusage)\n",
           t1 - t0, t1 - t0 - s->seconds_count - s->seconds_merge, s->seconds_count, s->n_merges, s->seconds_merge,
           ru.ru_maxrss / 1024.0);
    if (s->vocab_size > 65536)
        printf("  note: more than 65536 tokens do not fit skiplm's uint16 token shards\n");
}

/* The check: the GPT-2 loader reads the files, and the text encodes with them (one document
 * at a time, the buffer reused). 0, or 1 (said). */
static int check_tokenizer(bpe_run *b, const bpe_opts *o) {
    if (sk_tok_load_gpt2_dir(&b->tok, o->out)) return cli_fail("tokenizer train");
    size_t nid, cap = 0, tokens = 0;
    for (int i = 0; i < b->files.n; i++) {
        nid = 0;
        if (sk_tok_encode(b->tok, b->text[i], b->len[i], &b->ids, &nid, &cap)) return cli_fail("tokenizer train");
        tokens += nid;
    }
    printf("  check: reloaded by the GPT-2 loader; the text encodes to %zu tokens (%.4f tokens per byte, %.3f bytes per token)\n",
           tokens, (double)tokens / b->total, (double)b->total / tokens);
    const char *in = o->is_default ? "" : o->input;
    printf("  use it: skiplm prepare %s%s--tokenizer gpt2 --vocab-dir %s --out DATA_DIR\n", in, o->is_default ? "" : " ", o->out);
    return 0;
}

static void bpe_free(bpe_run *b) {
    free(b->ids);
    sk_tok_free(b->tok);
    for (int i = 0; b->text && i < b->files.n; i++) free(b->text[i]);
    cli_docs_free(&b->files);
    free(b->text); free(b->len);
}

static int cmd_tokenizer_train(int argc, char **argv) {
    bpe_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    double t0 = sk_now();
    bpe_run b = {0};
    sk_bpe_stats s;
    rc = read_texts(&b, &o);
    if (!rc && sk_bpe_train((const char *const *)b.text, b.len, b.files.n, o.vocab, o.specials, o.n_specials, o.out, &s))
        rc = cli_fail("tokenizer train");
    if (!rc) {
        print_stats(&b, &o, &s, t0);
        rc = check_tokenizer(&b, &o);
    }
    bpe_free(&b);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "train")) return cmd_tokenizer_train(argc - 1, argv + 1);
    FILE *o = argc >= 2 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? stderr : stdout;
    if (o == stderr) fprintf(stderr, "skiplm tokenizer: unknown subcommand '%s'\n", argc >= 2 ? argv[1] : "");
    fprintf(o, "usage: skiplm tokenizer %s\n", SYNOPSIS);
    return o == stdout ? 0 : 2;
}
