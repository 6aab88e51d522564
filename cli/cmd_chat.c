/* skiplm chat: a conversation with a chat model on stdin. Each line is the user's message (a
 * line ending in a backslash goes on to the next); the reply streams to stdout. Every turn
 * renders the whole conversation with the model's chat template, and the KV cache keeps what
 * it holds up to the first token where the new prompt differs, so a turn costs its own tokens,
 * not the history's. When the conversation outgrows the context the oldest turns are dropped
 * (the system message stays). /reset starts over, /quit (or end of input) ends. */
#include "generate.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The command line. */
typedef struct {
    const char *model, *tok_path, *device, *system, *chat_tpl, *tools_file;
    cli_model_opts mo;
    int n_new, greedy, quiet, tf32, bf16, q8, kv_bf16, max_ctx, use_cuda;
    sk_sampling sp;
    uint64_t seed;
} chat_opts;

/* The conversation: its messages, and the strings they point to. */
typedef struct {
    sk_chat_msg *v;
    char **own;                     /* the strings, owned */
    int n, cap;
} chat_log;

static int log_push(chat_log *h, const char *role, const char *content, size_t len) {
    if (h->n == h->cap) {
        int nc = h->cap ? 2 * h->cap : 16;
        sk_chat_msg *v = realloc(h->v, sizeof *v * nc);
        if (v) h->v = v;
        char **o = realloc(h->own, sizeof *o * nc);
        if (o) h->own = o;
        if (!v || !o) return sk_error(SK_ENOMEM, "out of memory for the conversation");
        h->cap = nc;
    }
    char *s = malloc(len + 1);
    if (!s) return sk_error(SK_ENOMEM, "out of memory for the conversation");
    memcpy(s, content, len);
    s[len] = 0;
    h->own[h->n] = s;
    h->v[h->n++] = (sk_chat_msg){role, s};
    return SK_OK;
}
/* drop messages [from, to) */
static void log_drop(chat_log *h, int from, int to) {
    if (from >= to) return;
    for (int i = from; i < to; i++) free(h->own[i]);
    memmove(h->v + from, h->v + to, sizeof *h->v * (size_t)(h->n - to));
    memmove(h->own + from, h->own + to, sizeof *h->own * (size_t)(h->n - to));
    h->n -= to - from;
}
static void log_free(chat_log *h) {
    log_drop(h, 0, h->n);
    free(h->v); free(h->own);
}

/* one line of input (without its newline), joined with the next while it ends in '\' */
static int read_message(char **buf, size_t *cap, size_t *len, int tty) {
    *len = 0;
    char *line = NULL; size_t lcap = 0;
    ssize_t r;
    int got = 0;
    if (tty) { fputs("> ", stderr); fflush(stderr); }
    while ((r = getline(&line, &lcap, stdin)) >= 0) {
        got = 1;
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) r--;
        int more = r > 0 && line[r - 1] == '\\';
        if (more) line[--r] = '\n';        /* the backslash becomes the line break */
        if (*len + (size_t)r + 2 > *cap) {
            size_t nc = (*len + (size_t)r + 2) * 2;
            char *b = realloc(*buf, nc);
            if (!b) { free(line); return -1; }
            *buf = b; *cap = nc;
        }
        memcpy(*buf + *len, line, (size_t)r + more);
        *len += (size_t)r + more;
        if (!more) break;
        if (tty) { fputs(". ", stderr); fflush(stderr); }
    }
    free(line);
    if (r < 0 && *len && (*buf)[*len - 1] == '\n') (*len)--;   /* the input ended after a backslash */
    if (*buf) (*buf)[*len] = 0;
    return got ? 1 : 0;
}

/* s without its leading and trailing white space, as [*b, *e) */
static void trimmed(const char *s, size_t len, const char **b, const char **e) {
    *b = s; *e = s + len;
    while (*b < *e && (**b == ' ' || **b == '\t' || **b == '\n' || **b == '\r')) (*b)++;
    while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\n' || (*e)[-1] == '\r')) (*e)--;
}
static int is_command(const char *b, const char *e, const char *cmd) {
    return (size_t)(e - b) == strlen(cmd) && !memcmp(b, cmd, strlen(cmd));
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}


/* The session: the model, the conversation, and what the KV cache holds. */
typedef struct {
    sk_model *m;
    sk_tokenizer *tok;
    sk_chat *ct;
    char *tools;                     /* the --tools file's JSON text */
    int32_t eos[GEN_MAX_EOS];
    int n_eos;
    int V, ctx, tty;
    int first, room;                 /* the first message that may be dropped; the room a reply is left */
    chat_log h;
    sk_chat_msg *view;               /* the messages of a prompt */
    gen_decoder dec;
    float *logits;
    int32_t *cached, *ids;           /* the tokens in the cache (and the last one sampled); the prompt's */
    size_t n_cached, n, cap;
    char *text, *reply;              /* the prompt's text; the last reply's */
    uint64_t rng;
} chatter;

/* what one reply did */
typedef struct { int made, stop, full; } reply_info;

/* 0, or the exit status (1 --help, then 0; 2 a bad option) */
static int parse_opts(chat_opts *o, int argc, char **argv) {
    *o = (chat_opts){.device = "cpu", .n_new = 1024, .max_ctx = 4096, .seed = 1337,
                     .sp = {.temperature = 0.7f, .top_p = 1.0f, .repetition_penalty = 1.0f}};
    cli_opt opts[] = {
        {"system", 's', &o->system, "a system message that opens the conversation"},
        {"chat-template", 's', &o->chat_tpl, "a .jinja file or a tokenizer_config.json (default: the model folder's chat_template.jinja, else its tokenizer_config.json)"},
        {"tools", 's', &o->tools_file, "a JSON file with a list of tool (function) schemas, for templates that show them"},
        {"tokens", 'i', &o->n_new, "most new tokens in one reply (1024)"},
        {"ctx", 'i', &o->max_ctx, "positions of the KV cache, at most the model's block_size (4096); older turns are dropped beyond it"},
        {"temperature", 'f', &o->sp.temperature, "softmax temperature; 0 = greedy (0.7)"},
        GEN_SAMPLING_OPTS(o->sp, o->seed),
        {"greedy", 'b', &o->greedy, "same as --temperature 0"},
        {"tokenizer", 's', &o->tok_path, "the tokenizer (default: the GGUF file's, or beside the weights)"},
        {"quiet", 'b', &o->quiet, "no statistics after each reply"},
        {"device", 's', &o->device, "cpu, or cuda in a CUDA build (cpu)"},
        {"tf32", 'b', &o->tf32, "with --device cuda: TF32 tensor-core GEMMs in the prefill"},
        {"bf16", 'b', &o->bf16, "bf16 copy of the weights for the matrix products (on the CPU their input rows rounded to bf16 too), fp32 everything else (CPU or --device cuda)"},
        {"q8", 'b', &o->q8, "8-bit weights (q8_0: int8 in blocks of 32, one fp16 scale each) for the matrix products, fp32 everything else but a long prompt's activations on a CPU with avx512_vnni (quantized per block for int8 dot products) (CPU; implied by a quantized file, skiplm quantize)"},
        {"kv-bf16", 'b', &o->kv_bf16, "K and V stored in bf16 in the KV cache (half its bytes; rounded to nearest even when written, read back as fp32) (CPU)"},
        CLI_MODEL_OPTS(&o->mo),
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "chat", "MODEL [options]   (one message per line on stdin; /reset, /quit)", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc;
    if (np != 1) { fprintf(stderr, "skiplm chat: give a model (a Hugging Face folder with a chat template, or weights and --chat-template)\n"); return 2; }
    o->model = pos[0];
    if (o->greedy) o->sp.temperature = 0.0f;
    if (o->n_new < 1 || o->max_ctx < 2 || !gen_sampling_ok(&o->sp)) {
        fprintf(stderr, "skiplm chat: need --tokens >= 1, --ctx >= 2, --temperature >= 0, --top-k >= 0, 0 < --top-p <= 1, "
                "0 <= --min-p <= 1, --repetition-penalty > 0\n");
        return 2;
    }
    if ((o->use_cuda = cli_device("chat", o->device)) < 0) return 2;
    if (o->tf32 && (o->bf16 || !o->use_cuda)) { fprintf(stderr, "skiplm chat: --tf32 needs --device cuda, without --bf16\n"); return 2; }
    if (o->q8 && (o->bf16 || o->use_cuda)) { fprintf(stderr, "skiplm chat: --q8 is for the CPU, without --bf16\n"); return 2; }
    if (o->kv_bf16 && o->use_cuda) { fprintf(stderr, "skiplm chat: --kv-bf16 is for the CPU (with --device cuda, --bf16 keeps K/V in bf16)\n"); return 2; }
    if (o->use_cuda && !cli_cuda_built("chat")) return 2;
    return 0;
}

/* The stop tokens, the template (which must take a system message and a first user turn) and
 * --tools, all before any weights load; then the model, its tokenizer and the KV cache. */
static int start(chatter *c, const chat_opts *o) {
    size_t tlen;
    if (sk_hf_eos_ids(o->model, c->eos, GEN_MAX_EOS, &c->n_eos) || (o->tools_file && cli_read_file(o->tools_file, &c->tools, &tlen)) ||
        gen_load_chat(&c->ct, o->model, o->chat_tpl, o->tok_path))
        return 1;
    if (o->system && log_push(&c->h, "system", o->system, strlen(o->system))) return 1;
    if (log_push(&c->h, "user", "", 0) || sk_chat_render(c->ct, c->h.v, c->h.n, c->tools, 1, &c->text, &tlen)) return 1;
    log_drop(&c->h, c->h.n - 1, c->h.n);
    free(c->text); c->text = NULL;
    if (gen_load(&c->m, &c->tok, o->model, &o->mo, o->tok_path)) return 1;
    gen_chat_eos(c->tok, c->ct, c->eos, &c->n_eos, GEN_MAX_EOS, o->quiet);
    const sk_config *cf = sk_model_config(c->m);
    c->V = cf->vocab_size;
    c->ctx = o->max_ctx < cf->block_size ? o->max_ctx : cf->block_size;
    if (!o->quiet && c->n_eos == 0)
        fprintf(stderr, "[no end-of-sequence token known (generation_config.json, tokenizer_config.json's eos_token): "
                "each reply runs --tokens %d]\n", o->n_new);
    c->logits = malloc(sizeof(float) * c->V);
    c->cached = malloc(sizeof(int32_t) * ((size_t)c->ctx + 1));
    c->rng = o->seed;
    c->tty = isatty(0);
    c->view = malloc(sizeof *c->view * 2);
    if (!c->logits || !c->cached || !c->view) return sk_error(SK_ENOMEM, "out of memory"), 1;
    if (gen_dec_new(&c->dec, c->m, o->use_cuda, o->q8 ? 3 : o->bf16 ? 2 : o->tf32 ? 1 : 0, o->kv_bf16, c->ctx, o->quiet, 1)) return 1;
    if (c->tty && !o->quiet)
        fprintf(stderr, "[%d positions of context; /reset starts over, /quit ends; end a line with \\ to go on]\n", c->ctx);
    /* older turns are dropped to leave a reply this much room */
    c->first = o->system ? 1 : 0;
    c->room = o->n_new < c->ctx / 4 ? o->n_new : c->ctx / 4 > 1 ? c->ctx / 4 : 1;
    return 0;
}

/* The prompt (c->ids[0..c->n)): the whole conversation, less its oldest turns while it leaves
 * the reply less than `room` positions (the system message stays); rendered from a view so that
 * nothing is dropped for a message that does not fit even alone. Returns the first message
 * kept after the system message, or -1 with the error set. */
static int fit_prompt(chatter *c) {
    const chat_log *h = &c->h;
    size_t tlen;
    for (int from = c->first;;) {
        int nv_n = 0;
        if (c->first) c->view[nv_n++] = h->v[0];
        for (int k = from; k < h->n; k++) c->view[nv_n++] = h->v[k];
        free(c->text); c->text = NULL; c->n = 0;
        if (sk_chat_render(c->ct, c->view, nv_n, c->tools, 1, &c->text, &tlen) || sk_tok_encode(c->tok, c->text, tlen, &c->ids, &c->n, &c->cap))
            return -1;
        if (c->n == 0) return sk_error(SK_EINVAL, "the chat template made an empty prompt"), -1;
        if (c->n + (size_t)c->room <= (size_t)c->ctx) return from;
        if (from == h->n - 1) {                       /* nothing older to drop: any room will do */
            if (c->n < (size_t)c->ctx) return from;
            return sk_error(SK_EINVAL, "this message makes a prompt of %zu tokens, and the context holds %d (--ctx)", c->n, c->ctx), -1;
        }
        from++;                                       /* the oldest turn: up to the next user message */
        while (from < h->n - 1 && strcmp(h->v[from].role, "user")) from++;
    }
}

/* The reply, sampled and streamed after the prompt's logits, into the cache behind the prompt. */
static int stream_reply(chatter *c, const chat_opts *o, reply_info *ri) {
    *ri = (reply_info){0};
    while (ri->made < o->n_new) {
        int32_t next = sk_sample(c->logits, c->V, &o->sp, c->cached, c->n_cached, &c->rng);
        if (next >= sk_tok_vocab_size(c->tok)) next = 0;
        for (int e = 0; e < c->n_eos; e++) ri->stop |= next == c->eos[e];
        if (ri->stop) break;
        ri->made++;
        size_t len;
        const char *s = sk_tok_is_special(c->tok, next) ? NULL : sk_tok_decode_one(c->tok, next, &len);
        if (s) { fwrite(s, 1, len, stdout); fflush(stdout); }
        c->cached[c->n_cached++] = next;
        if (ri->made == o->n_new) break;
        if (gen_dec_pos(&c->dec, 0) == c->ctx) { ri->full = 1; break; }
        if (gen_dec_run(&c->dec, 0, &next, 1, c->logits)) return 1;
    }
    return 0;
}

/* The reply's text without its special tokens (cached[r0..n_cached)) joins the conversation
 * (ids: the prompt's buffer, free again). */
static int keep_reply(chatter *c, size_t r0) {
    size_t rlen, nr = 0;
    free(c->reply); c->reply = NULL;
    if (c->cap < c->n_cached - r0 + 1) {
        int32_t *g = realloc(c->ids, sizeof(int32_t) * (c->n_cached - r0 + 1));
        if (!g) return sk_error(SK_ENOMEM, "out of memory"), 1;
        c->ids = g; c->cap = c->n_cached - r0 + 1;
    }
    for (size_t k = r0; k < c->n_cached; k++)
        if (!sk_tok_is_special(c->tok, c->cached[k])) c->ids[nr++] = c->cached[k];
    return sk_tok_decode(c->tok, c->ids, nr, &c->reply, &rlen) || log_push(&c->h, "assistant", c->reply, rlen);
}

/* One message of the user and the reply. 0, or 1 (the library's message is still to print),
 * or 2 (printed: a message that does not fit ends a conversation that is not at a terminal). */
static int chat_turn(chatter *c, const chat_opts *o, const char *line, size_t line_len) {
    if (log_push(&c->h, "user", line, line_len)) return 1;
    sk_chat_msg *nv = realloc(c->view, sizeof *c->view * (size_t)c->h.n);
    if (!nv) return sk_error(SK_ENOMEM, "out of memory"), 1;
    c->view = nv;
    const int from = fit_prompt(c);
    if (from < 0) {
        fprintf(stderr, "skiplm chat: %s\n", sk_last_error());
        log_drop(&c->h, c->h.n - 1, c->h.n);          /* the turn is refused; the conversation goes on */
        return c->tty ? 0 : 2;
    }
    if (from > c->first) {
        if (!o->quiet) fprintf(stderr, "[%d oldest messages dropped to fit the context]\n", from - c->first);
        log_drop(&c->h, c->first, from);
    }
    /* keep the cached prefix; at least the last prompt token runs, for its logits */
    const size_t n = c->n;
    size_t keep = common_prefix(c->cached, c->n_cached, c->ids, n);
    if (keep == n) keep--;
    if (keep < (size_t)gen_dec_pos(&c->dec, 0)) gen_dec_truncate(&c->dec, 0, (int)keep);
    double t0 = sk_now();
    if (gen_dec_run(&c->dec, 0, c->ids + keep, (int)(n - keep), c->logits)) return 1;
    memcpy(c->cached, c->ids, sizeof(int32_t) * n);
    c->n_cached = n;
    double t1 = sk_now();
    reply_info ri;
    int err = stream_reply(c, o, &ri);
    double t2 = sk_now();
    fputs("\n", stdout);
    fflush(stdout);
    if (err || keep_reply(c, n)) return 1;
    /* the last sampled token is not in the cache */
    if (c->n_cached > (size_t)gen_dec_pos(&c->dec, 0)) c->n_cached = (size_t)gen_dec_pos(&c->dec, 0);
    if (!o->quiet)
        fprintf(stderr, "[%zu prompt tokens, %zu new in %.2f s; %d tokens at %.1f tok/s%s]\n", n, n - keep, t1 - t0,
                ri.made, ri.made / (t2 - t1 > 0 ? t2 - t1 : 1e-9),
                ri.full ? "; the context is full: the reply stops here" : ri.stop ? "" : "; --tokens reached");
    return 0;
}

static void chatter_free(chatter *c) {
    free(c->reply); free(c->text); free(c->ids); free(c->logits); free(c->cached); free(c->view); free(c->tools);
    gen_dec_free(&c->dec);
    sk_tok_free(c->tok);
    sk_model_free(c->m);
    log_free(&c->h);
    sk_chat_free(c->ct);
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    chatter c;
    memset(&c, 0, sizeof c);
    /* err: 0, 1 (the library's message is still to print), 2 (printed) */
    int err = start(&c, &o), r = 0;
    char *line = NULL; size_t line_cap = 0, line_len;
    while (!err && (r = read_message(&line, &line_cap, &line_len, c.tty)) > 0) {
        const char *lb, *le;
        trimmed(line, line_len, &lb, &le);
        if (lb == le) continue;                       /* an empty line is no message */
        if (is_command(lb, le, "/quit") || is_command(lb, le, "/exit")) break;
        if (is_command(lb, le, "/reset")) {
            log_drop(&c.h, c.first, c.h.n);   /* the cache stays: the next prompt reuses its common prefix (the system message) */
            if (!o.quiet) fprintf(stderr, "[conversation reset]\n");
            continue;
        }
        err = chat_turn(&c, &o, line, line_len);
    }
    if (!err && r < 0) err = (sk_error(SK_ENOMEM, "out of memory for the message"), 1);
    if (!err && ferror(stdin)) err = (sk_error(SK_EIO, "reading stdin failed"), 1);
    if (err == 1) cli_fail("chat");
    free(line);
    chatter_free(&c);
    return err ? 1 : 0;
}
