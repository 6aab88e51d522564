/* What the subcommands share (cli.h): option parsing, errors, --device, files and folders,
 * the model and its tokenizer. */
#include "cli.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_fail(const char *cmd) {
    fprintf(stderr, "skiplm %s: %s\n", cmd, sk_last_error());
    return 1;
}

void cli_usage(const char *cmd, const char *synopsis, const cli_opt *opts, int has_cfg) {
    fprintf(stderr, "usage: skiplm %s %s\n\noptions:\n", cmd, synopsis);
    for (const cli_opt *o = opts; o && o->name; o++) {
        const char *arg = o->type == 'b' ? "" : o->type == 's' ? " STR" : o->type == 'f' ? " X" : " N";
        char left[64];
        snprintf(left, sizeof left, "--%s%s", o->name, arg);
        fprintf(stderr, "  %-24s %s\n", left, o->help);
    }
    if (has_cfg) {
        fprintf(stderr, "\nmodel options:\n"
                "  --preset NAME            gpt2 | gpt2-medium | gpt2-large | nano | small\n"
                "  --sla                    Skip-Layer Attention with the paper's 3/4 rule\n"
                "  --FIELD VALUE            any config field: n_layer n_head n_kv_head n_embd block_size\n"
                "                           vocab_size bias dropout gelu(erf|tanh) n_skip_layer n_skip_head\n"
                "                           family(gpt2|llama) norm_eps rope_theta ffn_hidden sinusoidal(0|1)\n"
                "                           relu(0|1) routing (general K/V table, e.g. \"9-11:6-11=-9\")\n"
                "                           rope_scaling(none|linear|llama3) rope_factor rope_low_freq_factor\n"
                "                           rope_high_freq_factor rope_original_ctx untied_head(0|1)\n"
                "                           qkv_bias(0|1)\n");
    }
}

static int set_opt(const cli_opt *o, const char *v) {
    char *end;
    errno = 0;
    switch (o->type) {
    case 's': *(const char **)o->dst = v; return 0;
    case 'i': {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < INT_MIN || x > INT_MAX) return -1;
        *(int *)o->dst = (int)x; return 0;
    }
    case 'u': {
        if (*v == '-') return -1;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end) return -1;
        *(uint64_t *)o->dst = x; return 0;
    }
    case 'f': {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x) || !isfinite((float)x)) return -1;   /* no nan/inf/overflow */
        *(float *)o->dst = (float)x; return 0;
    }
    }
    return -1;
}

int cli_parse(int argc, char **argv, const char *cmd, const char *synopsis, const cli_opt *opts,
              char **pos, int max_pos, int *n_pos, sk_config *cfg, int *cfg_given) {
    int np = 0, preset_done = 0;
    if (cfg_given) *cfg_given = 0;
    /* the preset goes first so that the other fields override it */
    if (cfg)
        for (int i = 1; i < argc; i++) {
            const char *v = NULL;
            if (!strcmp(argv[i], "--preset") && i + 1 < argc) v = argv[i + 1];
            else if (!strncmp(argv[i], "--preset=", 9)) v = argv[i] + 9;
            if (v) {
                if (sk_config_preset(cfg, v)) { fprintf(stderr, "skiplm %s: %s\n", cmd, sk_last_error()); return 2; }
                preset_done = 1;
                if (cfg_given) *cfg_given = 1;
            }
        }
    (void)preset_done;
    int sla = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { cli_usage(cmd, synopsis, opts, cfg != NULL); return 1; }
        if (strncmp(a, "--", 2) || a[2] == 0) {
            if (np >= max_pos) {
                fprintf(stderr, "skiplm %s: unexpected argument '%s'\n", cmd, a);
                cli_usage(cmd, synopsis, opts, cfg != NULL);
                return 2;
            }
            pos[np++] = a;
            continue;
        }
        char name[64];
        const char *val = NULL, *eq = strchr(a + 2, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) nl = sizeof name - 1;
        memcpy(name, a + 2, nl); name[nl] = 0;
        if (eq) val = eq + 1;
        const cli_opt *o = NULL;
        for (const cli_opt *p = opts; p && p->name; p++) if (!strcmp(p->name, name)) o = p;
        if (o) {
            if (o->type == 'b') {
                if (val) { fprintf(stderr, "skiplm %s: --%s takes no value\n", cmd, name); return 2; }
                *(int *)o->dst = 1;
                continue;
            }
            if (!val) {
                if (i + 1 >= argc) { fprintf(stderr, "skiplm %s: --%s needs a value\n", cmd, name); return 2; }
                val = argv[++i];
            }
            if (set_opt(o, val)) {
                fprintf(stderr, "skiplm %s: --%s: '%s' is not a valid %s\n", cmd, name, val,
                        o->type == 'f' ? "number" : o->type == 'u' ? "non-negative integer" : "integer");
                return 2;
            }
            continue;
        }
        if (cfg) {
            if (!strcmp(name, "preset")) { if (!val) i++; continue; }
            if (!strcmp(name, "sla")) { sla = 1; if (cfg_given) *cfg_given = 1; continue; }
            for (char *p = name; *p; p++) if (*p == '-') *p = '_';
            if (!val) {
                if (i + 1 >= argc) { fprintf(stderr, "skiplm %s: --%s needs a value\n", cmd, name); return 2; }
                val = argv[++i];
            }
            if (sk_config_set(cfg, name, val)) {
                fprintf(stderr, "skiplm %s: %s\n", cmd, sk_last_error());
                if (strstr(sk_last_error(), "unknown field")) cli_usage(cmd, synopsis, opts, 1);
                return 2;
            }
            if (cfg_given) *cfg_given = 1;
            continue;
        }
        fprintf(stderr, "skiplm %s: unknown option --%s\n", cmd, name);
        cli_usage(cmd, synopsis, opts, 0);
        return 2;
    }
    if (sla && cfg) {
        /* fill what was not given with the paper's 3/4 rule */
        sk_config d = *cfg;
        sk_config_sla_default(&d);
        if (cfg->n_skip_layer == 0) cfg->n_skip_layer = d.n_skip_layer;
        if (cfg->n_skip_head == 0) cfg->n_skip_head = d.n_skip_head;
    }
    if (n_pos) *n_pos = np;
    return 0;
}

static void docs_push(cli_docs *l, const char *s) {
    if (l->n == l->cap) { l->cap = l->cap ? 2 * l->cap : 64; l->v = realloc(l->v, sizeof(char *) * l->cap); }
    l->v[l->n++] = strdup(s);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}
static int has_suffix(const char *name, const char *const *suffixes) {
    for (int i = 0; suffixes && suffixes[i]; i++) if (ends_with(name, suffixes[i])) return 1;
    return !suffixes;
}
/* regular files under dir, recursively: those with one of suffixes (NULL: all) */
static void list_files(const char *dir, cli_docs *out, const char *const *suffixes) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st)) continue;
        if (S_ISDIR(st.st_mode)) list_files(path, out, suffixes);
        else if (S_ISREG(st.st_mode) && has_suffix(e->d_name, suffixes)) docs_push(out, path);
    }
    closedir(d);
}

int cli_list_files(const char *input, const char *const *suffixes, int is_default, cli_docs *docs) {
    memset(docs, 0, sizeof *docs);
    struct stat st;
    if (stat(input, &st))
        return sk_error(SK_EIO, "%s: %s%s", input, strerror(errno),
                        is_default ? " (the default corpus: run scripts/setup.sh first)" : "");
    if (S_ISDIR(st.st_mode)) {
        list_files(input, docs, suffixes);
        if (docs->n == 0) list_files(input, docs, NULL);
        if (docs->n > 1) qsort(docs->v, docs->n, sizeof(char *), cmp_str);   /* no NULL to qsort */
    } else docs_push(docs, input);
    if (docs->n == 0) return sk_error(SK_EINVAL, "%s holds no files", input);
    return SK_OK;
}

int cli_list_docs(const char *input, int is_default, cli_docs *docs) {
    static const char *const txt[] = {".txt", NULL};
    return cli_list_files(input, txt, is_default, docs);
}

void cli_docs_free(cli_docs *docs) {
    for (int i = 0; i < docs->n; i++) free(docs->v[i]);
    free(docs->v);
    memset(docs, 0, sizeof *docs);
}

double cli_peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) { kib = strtol(line + 6, NULL, 10); break; }
    if (f) fclose(f);
    if (kib >= 0) return kib / 1024.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

int cli_mkdir_p(const char *dir) {
    char buf[4096];
    struct stat st;
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) { errno = ENAMETOOLONG; return -1; }
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') { *p = 0; if (mkdir(buf, 0777) && errno != EEXIST) return -1; *p = '/'; }
    if (!mkdir(buf, 0777)) return 0;
    if (errno != EEXIST) return -1;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;   /* a file there: EEXIST */
}

int cli_device(const char *cmd, const char *device) {
    if (!strcmp(device, "cuda") || !strcmp(device, "gpu")) return 1;
    if (!strcmp(device, "cpu")) return 0;
    fprintf(stderr, "skiplm %s: --device must be cpu or cuda (got '%s')\n", cmd, device);
    return -1;
}

int cli_cuda_built(const char *cmd) {
#ifdef SKIPLM_CUDA
    (void)cmd;
    return 1;
#else
    fprintf(stderr, "skiplm %s: --device cuda: this skiplm was built without CUDA (build it with `make cuda`, "
            "then run build-cuda/skiplm)\n", cmd);
    return 0;
#endif
}

int cli_read_file(const char *path, char **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return sk_error(SK_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) { cap *= 2; char *nb = realloc(buf, cap); if (!nb) { free(buf); fclose(f); return sk_error(SK_ENOMEM, "%s: out of memory", path); } buf = nb; }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return sk_error(SK_EIO, "%s: read error", path); }
    buf[n] = 0;
    *data = buf; *len = n;
    return SK_OK;
}

int cli_read_docs(const char *cmd, const char *input, int is_default, cli_docs *docs, char ***text, size_t **len,
                  size_t *total) {
    if (cli_list_docs(input, is_default, docs)) return cli_fail(cmd);
    *text = calloc(docs->n, sizeof(char *));
    *len = calloc(docs->n, sizeof(size_t));
    if (!*text || !*len) { sk_error(SK_ENOMEM, "out of memory"); return cli_fail(cmd); }
    for (int i = 0; i < docs->n; i++) {
        if (cli_read_file(docs->v[i], &(*text)[i], &(*len)[i])) return cli_fail(cmd);
        *total += (*len)[i];
    }
    return 0;
}

int cli_tokenizer_of(const char *weights, char *out, size_t n) {
    char *file = sk_weights_file(weights);
    if (file && cli_is_gguf(file)) {         /* a GGUF file holds its tokenizer */
        snprintf(out, n, "%s", file);
        free(file);
        return SK_OK;
    }
    sk_safetensors st;
    if (!file || sk_st_read(file, &st)) { free(file); return 1; }
    const char *p = sk_st_meta(&st, "tokenizer_path");
    if (!p) p = sk_st_meta(&st, "tokenizer");
    int rc = SK_OK;
    if (p) snprintf(out, n, "%s", p);
    else {
        const char *slash = strrchr(file, '/');
        snprintf(out, n, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
        static const char *const beside[] = {"merges.txt", "vocab.bpe", "tokenizer.json"};
        int found = 0;
        for (int i = 0; i < 3 && !found; i++) {
            char b[4200];
            struct stat sb;
            snprintf(b, sizeof b, "%s/%s", out, beside[i]);
            found = stat(b, &sb) == 0;
        }
        if (!found)
            rc = sk_error(SK_EINVAL, "%s records no tokenizer and has none beside it: give --tokenizer (a vocab.json, "
                          "a tokenizer.json, or a folder with encoder.json and vocab.bpe, or vocab.json and merges.txt)", file);
    }
    sk_st_free(&st);
    free(file);
    return rc;
}

static int copy_file(const char *from, const char *to) {
    char *data; size_t len;
    if (cli_read_file(from, &data, &len)) return 1;
    int rc = sk_write_atomic(to, data, len);
    free(data);
    return rc;
}

int cli_copy_tokenizer(const sk_tokenizer *tok, const char *src, const char *out, int hf_names) {
    char a[4200], b[4200];
    struct stat sb;
    const char *kind = sk_tok_kind(tok);
    int is_dir = stat(src, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (!strcmp(kind, "char")) {
        if (hf_names) return 2;
        snprintf(b, sizeof b, "%s/vocab.json", out);
        return sk_tok_save_char(tok, b);
    }
    if (!strcmp(kind, "hf")) {
        if (is_dir) snprintf(a, sizeof a, "%s/tokenizer.json", src);
        else snprintf(a, sizeof a, "%s", src);
        snprintf(b, sizeof b, "%s/tokenizer.json", out);
        if (!strcmp(a, b)) return 0;
        if (copy_file(a, b)) return 1;
        /* the chat template and special tokens travel with it: a model fine-tuned from an
         * instruct model's folder, or exported, keeps its conversation format */
        const char *slash = strrchr(a, '/');
        static const char *const with[] = {"tokenizer_config.json", "chat_template.jinja"};
        for (int i = 0; i < 2; i++) {
            char c[4200];
            snprintf(c, sizeof c, "%.*s/%s", slash ? (int)(slash - a) : 1, slash ? a : ".", with[i]);
            snprintf(b, sizeof b, "%s/%s", out, with[i]);
            if (stat(c, &sb) == 0 && S_ISREG(sb.st_mode)) {
                if (copy_file(c, b)) return 1;
            } else if (unlink(b) && errno != ENOENT) {    /* not another tokenizer's left behind */
                return sk_error(SK_EIO, "%s: %s", b, strerror(errno)), 1;
            }
        }
        return 0;
    }
    /* GPT-2: encoder.json + vocab.bpe, or the same files under Hugging Face's names */
    static const char *const names[][2] = {{"encoder.json", "vocab.json"}, {"vocab.bpe", "merges.txt"}};
    snprintf(a, sizeof a, "%s/encoder.json", src);
    int src_hf = stat(a, &sb) != 0;
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", src, names[i][src_hf]);
        snprintf(b, sizeof b, "%s/%s", out, names[i][hf_names]);
        if (strcmp(a, b) && copy_file(a, b)) return 1;
    }
    return 0;
}

static int load_model(sk_model **m, const char *path, const cli_model_opts *mo);

int cli_load_model(sk_model **m, const char *path, const cli_model_opts *mo) {
    int rc = load_model(m, path, mo);
    if (rc || !mo || !mo->lora) return rc;
    sk_lora *l;
    if ((rc = sk_lora_load(&l, *m, mo->lora)) || (rc = sk_lora_merge(l, *m))) {
        sk_model_free(*m);
        *m = NULL;
    }
    sk_lora_free(l);
    if (!rc) fprintf(stderr, "skiplm: LoRA adapter %s merged into %s\n", mo->lora, path);
    return rc;
}

static int load_model(sk_model **m, const char *path, const cli_model_opts *mo) {
    static const cli_model_opts none = {0};
    if (!mo) mo = &none;
    if (mo->n_head < 0) return sk_error(SK_EINVAL, "--n_head must be positive (got %d)", mo->n_head);
    if (mo->n_skip_layer < 0 || mo->n_skip_head < 0)
        return sk_error(SK_EINVAL, "--n_skip_layer and --n_skip_head must be >= 0");
    sk_config o;
    memset(&o, 0, sizeof o);          /* only the non-zero fields of an override count */
    o.n_head = mo->n_head; o.n_skip_layer = mo->n_skip_layer; o.n_skip_head = mo->n_skip_head;
    if (mo->routing && sk_config_set(&o, "routing", mo->routing)) return SK_EINVAL;
    char *file = sk_weights_file(path);
    if (!file) return sk_error(SK_ENOMEM, "out of memory");
    if (cli_is_gguf(file)) {
        int rc = sk_model_load(m, file, &o);
        free(file);
        return rc;
    }
    sk_safetensors st;
    int rc = sk_st_read(file, &st);
    if (!rc) {
        const char *keys[8];
        int n = sk_meta_unknown_keys(&st, keys, 8);
        for (int i = 0; i < n && i < 8; i++)
            fprintf(stderr, "skiplm: warning: %s: metadata key '%s' (= '%s') is not a config field skiplm knows; "
                    "it is ignored\n", file, keys[i], sk_st_meta(&st, keys[i]));
        if (n > 8) fprintf(stderr, "skiplm: warning: %s: %d more such keys\n", file, n - 8);
        rc = sk_model_load_st(m, &st, file, &o);
        sk_st_free(&st);
    }
    free(file);
    return rc;
}
