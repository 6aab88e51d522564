/* skiplm sample: a prompt (or, with --chat, a user's message rendered by the model's chat
 * template) continued by a model with a KV cache, on the CPU or (build-cuda/skiplm --device
 * cuda) the GPU. One sample streams to stdout as it is made; --samples N decodes N of them
 * side by side in one cache (sample k draws with seed + k) and prints each when done. Stops at
 * --tokens or at a Hugging Face folder's end-of-sequence ids; statistics go to stderr. */
#include "generate.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The command line. */
typedef struct {
    const char *weights, *prompt, *tok_path, *device, *system, *chat_tpl, *msgs_file, *tools_file, *schema_file;
    cli_model_opts mo;
    int n_new, greedy, quiet, tf32, bf16, q8, kv_bf16, ignore_eos, chat, n_samples, use_cuda, json;
    sk_sampling sp;
    uint64_t seed;
} sample_opts;

/* one of --samples: its token ids (prompt, then the new ones), random stream and state */
typedef struct {
    int32_t *ids;
    size_t n;
    uint64_t rng;
    int made, done;
    int32_t eos;                     /* the end-of-sequence token it stopped at, or -1 */
} sample_seq;

/* The run: the model, the prompt, and G sequences decoded side by side. */
typedef struct {
    sk_model *m;
    sk_tokenizer *tok;
    sk_chat *chat;                   /* --chat's template, or NULL */
    char *chat_text;                 /* the prompt it made */
    const char *prompt;              /* --prompt, or chat_text */
    int32_t eos[GEN_MAX_EOS];
    int n_eos;
    int32_t *ids;                    /* the prompt's token ids */
    size_t n, start;                 /* their number; the first one read (the last block_size) */
    int ctx, V, G;                   /* cache positions, vocabulary, sequences side by side */
    gen_decoder dec;
    sample_seq *seqs;
    int *act;                        /* the sequences still going, and their next tokens */
    int32_t *nexts;
    float *logits, *lgb;             /* G x V: each sequence's next-token logits; the batch's */
    sk_jg *jg;                       /* --json-schema / --json: the grammar, the tokens as bytes, */
    sk_jg_vocab *jv;                 /* each sequence's matcher and a token mask */
    sk_jg_match **jm;
    unsigned char *allow;
    double t_prompt, t_gen;
    long made, decoded;       /* new tokens; tokens run through the model in t_gen (the first of each sample comes from the prompt's pass) */
} sampler;

/* 0, or the exit status (1 --help, then 0; 2 a bad option) */
static int parse_opts(sample_opts *o, int argc, char **argv) {
    *o = (sample_opts){.device = "cpu", .n_new = 256, .n_samples = 1, .seed = 1337,
                       .sp = {.temperature = 0.8f, .top_p = 1.0f, .repetition_penalty = 1.0f}};
    cli_opt opts[] = {
        {"prompt", 's', &o->prompt, "text to continue (default: the tokenizer's end-of-text token, e.g. <|endoftext|>, else a newline)"},
        {"tokens", 'i', &o->n_new, "new tokens to generate (256)"},
        {"temperature", 'f', &o->sp.temperature, "softmax temperature; 0 = greedy (0.8)"},
        GEN_SAMPLING_OPTS(o->sp, o->seed),
        {"samples", 'i', &o->n_samples, "continuations of the prompt, decoded side by side on the CPU (one pass over the weights per step for all); sample k draws with seed + k; printed when done, separated by lines of dashes (1)"},
        {"greedy", 'b', &o->greedy, "same as --temperature 0"},
        {"tokenizer", 's', &o->tok_path, "vocab.json (char), tokenizer.json, a GGUF file, or a folder with encoder.json + vocab.bpe, tokenizer.json or vocab.json + merges.txt (default: from the checkpoint, the GGUF file, or beside it)"},
        {"quiet", 'b', &o->quiet, "print only the generated text (no prompt, no statistics)"},
        {"device", 's', &o->device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &o->tf32, "with --device cuda: TF32 tensor-core GEMMs in the prefill"},
        {"bf16", 'b', &o->bf16, "bf16 copy of the weights for the matrix products (on the CPU their input rows rounded to bf16 too, for the CPU's bf16 dot products), fp32 everything else (CPU or --device cuda)"},
        {"q8", 'b', &o->q8, "8-bit weights (q8_0: int8 in blocks of 32, one fp16 scale each) for the matrix products, fp32 everything else but a long prompt's activations on a CPU with avx512_vnni (quantized per block for int8 dot products) (CPU; implied by a quantized file, skiplm quantize)"},
        {"kv-bf16", 'b', &o->kv_bf16, "K and V stored in bf16 in the KV cache (half its bytes; rounded to nearest even when written, read back as fp32), with any weights (CPU)"},
        {"ignore-eos", 'b', &o->ignore_eos, "go on past the end-of-sequence token of a Hugging Face folder (eos_token_id)"},
        {"chat", 'b', &o->chat, "--prompt is a user's message: the model's chat template makes the prompt (printed before the reply unless --quiet; skiplm chat converses)"},
        {"system", 's', &o->system, "with --chat: a system message first"},
        {"chat-template", 's', &o->chat_tpl, "with --chat: a .jinja file or a tokenizer_config.json (default: the model folder's)"},
        {"messages", 's', &o->msgs_file, "a JSON file with the whole conversation, a list of messages (role, content, tool_calls, ...) as transformers takes them (implies --chat; not with --prompt)"},
        {"tools", 's', &o->tools_file, "with --chat: a JSON file with a list of tool (function) schemas, for templates that show them"},
        {"json-schema", 's', &o->schema_file, "a JSON Schema file: the text is JSON valid against it (constrained decoding; it closes within --tokens when the vocabulary has single-byte tokens; docs/serving.md lists the keywords)"},
        {"json", 'b', &o->json, "the text is a JSON object (any), as response_format json_object"},
        CLI_MODEL_OPTS(&o->mo),
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "sample", "WEIGHTS_OR_CHECKPOINT [options]", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc;
    if (np != 1) { fprintf(stderr, "skiplm sample: give a weights file or checkpoint\n"); return 2; }
    o->weights = pos[0];
    if (o->greedy) o->sp.temperature = 0.0f;
    if (o->n_samples < 1 || o->n_samples > SK_KV_MAX_SEQS) {
        fprintf(stderr, "skiplm sample: --samples must be in [1, %d]\n", SK_KV_MAX_SEQS);
        return 2;
    }
    if (o->n_new < 0 || !gen_sampling_ok(&o->sp)) {
        fprintf(stderr, "skiplm sample: need --tokens >= 0, --temperature >= 0, --top-k >= 0, 0 < --top-p <= 1, 0 <= --min-p <= 1, "
                "--repetition-penalty > 0\n");
        return 2;
    }
    if ((o->use_cuda = cli_device("sample", o->device)) < 0) return 2;
    if (o->tf32 && o->bf16) { fprintf(stderr, "skiplm sample: --tf32 and --bf16 exclude each other\n"); return 2; }
    if (o->tf32 && !o->use_cuda) { fprintf(stderr, "skiplm sample: --tf32 needs --device cuda\n"); return 2; }
    if (o->q8 && (o->bf16 || o->use_cuda)) { fprintf(stderr, "skiplm sample: --q8 is for the CPU, without --bf16\n"); return 2; }
    if (o->kv_bf16 && o->use_cuda) { fprintf(stderr, "skiplm sample: --kv-bf16 is for the CPU (with --device cuda, --bf16 keeps K/V in bf16)\n"); return 2; }
    if (o->msgs_file) o->chat = 1;
    if ((o->system || o->chat_tpl || o->tools_file) && !o->chat) {
        fprintf(stderr, "skiplm sample: --system, --chat-template and --tools go with --chat\n");
        return 2;
    }
    if (o->msgs_file && (o->prompt || o->system)) { fprintf(stderr, "skiplm sample: --messages holds the whole conversation: no --prompt or --system\n"); return 2; }
    if (o->chat && !o->prompt && !o->msgs_file) { fprintf(stderr, "skiplm sample: --chat needs the user's message in --prompt (or a conversation in --messages)\n"); return 2; }
    if (o->use_cuda && !cli_cuda_built("sample")) return 2;
    if (o->json && o->schema_file) { fprintf(stderr, "skiplm sample: --json and --json-schema exclude each other\n"); return 2; }
    return 0;
}

/* --json-schema / --json: the grammar, the vocabulary as bytes, one matcher per sequence */
static int setup_json(sampler *s, const sample_opts *o) {
    char *schema = NULL;
    size_t len = 0;
    if (o->schema_file && cli_read_file(o->schema_file, &schema, &len)) return 1;
    int rc = sk_jg_compile(&s->jg, schema, len);
    free(schema);
    if (rc) return sk_error(SK_EINVAL, "%s: %s", o->schema_file ? o->schema_file : "--json", sk_last_error());
    if (sk_jg_vocab_from_tok(&s->jv, s->tok, s->V)) return 1;
    s->jm = calloc(s->G, sizeof *s->jm);
    s->allow = malloc((size_t)s->V);
    if (!s->jm || !s->allow) return sk_error(SK_ENOMEM, "out of memory");
    return 0;
}

/* The JSON's mask on sequence g's logits, with n tokens left: 0; 1 when nothing may follow
 * (the JSON is whole, and no end-of-sequence token); -1 when no token can continue it. */
static int json_mask(sampler *s, int g, float *lg, long left) {
    sk_jg_match *m = s->jm[g];
    int n = sk_jg_match_mask(m, s->allow, left);
    if (n < 0) return sk_error(SK_ENOMEM, "out of memory"), -1;
    if (sk_jg_match_complete(m))
        for (int e = 0; e < s->n_eos; e++)
            if (s->eos[e] >= 0 && s->eos[e] < s->V && !s->allow[s->eos[e]]) { s->allow[s->eos[e]] = 1; n++; }
    if (!n) {
        if (sk_jg_match_complete(m)) return 1;
        return sk_error(SK_EINVAL, "no token of the vocabulary can continue the JSON"), -1;
    }
    for (int v = 0; v < s->V; v++) if (!s->allow[v]) lg[v] = -INFINITY;
    return 0;
}

/* --chat: the template's text of --system and --prompt, or of --messages (with --tools) */
static int chat_prompt(sampler *s, const sample_opts *o) {
    sk_chat_msg msgs[2];
    int nm = 0;
    if (o->system) msgs[nm++] = (sk_chat_msg){"system", o->system};
    if (o->prompt) msgs[nm++] = (sk_chat_msg){"user", o->prompt};
    char *mtext = NULL, *ttext = NULL;
    size_t len;
    int bad = (o->msgs_file && cli_read_file(o->msgs_file, &mtext, &len)) || (o->tools_file && cli_read_file(o->tools_file, &ttext, &len)) ||
              gen_load_chat(&s->chat, o->weights, o->chat_tpl, o->tok_path) ||
              (mtext ? sk_chat_render_json(s->chat, mtext, ttext, 1, &s->chat_text, &len)
                     : sk_chat_render(s->chat, msgs, nm, ttext, 1, &s->chat_text, &len));
    free(mtext); free(ttext);
    return bad;
}

/* The model and tokenizer, the prompt's ids, and the cache and buffers of G sequences. */
static int setup(sampler *s, const sample_opts *o) {
    if (gen_load(&s->m, &s->tok, o->weights, &o->mo, o->tok_path)) return 1;
    if (s->chat && !o->ignore_eos) gen_chat_eos(s->tok, s->chat, s->eos, &s->n_eos, GEN_MAX_EOS, o->quiet);
    const sk_config *c = sk_model_config(s->m);
    size_t cap = 0;
    if (s->prompt && *s->prompt) {
        if (sk_tok_encode(s->tok, s->prompt, strlen(s->prompt), &s->ids, &s->n, &cap)) return 1;
    } else {
        int32_t start = sk_tok_eot(s->tok);
        if (start < 0) { if (sk_tok_encode(s->tok, "\n", 1, &s->ids, &s->n, &cap)) return 1; }
        else if ((s->ids = malloc(sizeof(int32_t) * 4))) s->ids[s->n++] = start;
        else return sk_error(SK_ENOMEM, "out of memory");
    }
    const size_t n = s->n, total = n + (size_t)o->n_new;
    /* a prompt longer than the context keeps its last block_size tokens; the cache holds what
     * this run can reach (a model with a 128k context sampled for 100 tokens does not reserve
     * 128k positions) */
    s->start = n > (size_t)c->block_size ? n - c->block_size : 0;
    s->ctx = total - s->start < (size_t)c->block_size ? (int)(total - s->start) : c->block_size;
    if (s->chat && s->start && !o->quiet)
        fprintf(stderr, "[the chat's prompt has %zu tokens: only its last %d (block_size) are read]\n", n, c->block_size);
    /* --samples: G sequences side by side in one cache (the CPU's; the GPU runs them one after
     * another), each its own token ids (prompt + new) and its own random stream, seed + k */
    const int V = s->V = c->vocab_size, G = s->G = o->use_cuda ? 1 : o->n_samples;
    if (sk_mem_check(sizeof(int32_t) * (total + 1) * G + sizeof(float) * 2 * (size_t)G * V, "the token ids and logits of --samples"))
        return 1;
    s->seqs = calloc(G, sizeof *s->seqs);
    s->act = malloc(sizeof(int) * G);
    s->nexts = malloc(sizeof(int32_t) * G);
    s->logits = malloc(sizeof(float) * (size_t)G * V);
    s->lgb = malloc(sizeof(float) * (size_t)G * V);
    if (!s->seqs || !s->act || !s->nexts || !s->logits || !s->lgb) return sk_error(SK_ENOMEM, "out of memory");
    for (int g = 0; g < G; g++)
        if (!(s->seqs[g].ids = malloc(sizeof(int32_t) * (total + 1)))) return sk_error(SK_ENOMEM, "out of memory for %zu token ids", total + 1);
    return gen_dec_new(&s->dec, s->m, o->use_cuda, o->q8 ? 3 : o->bf16 ? 2 : o->tf32 ? 1 : 0, o->kv_bf16, s->ctx, o->quiet, G);
}

/* One token for each of the first g_n sequences still going; those that go on are listed in
 * act/nexts (their number returned). One sample streams its token. */
static int sample_step(sampler *s, const sample_opts *o, int g_n, int stream) {
    int na = 0;
    for (int g = 0; g < g_n; g++) {
        sample_seq *q = &s->seqs[g];
        if (q->done) continue;
        if (s->jg) {
            const int r = json_mask(s, g, s->logits + (size_t)g * s->V, (long)o->n_new - q->made);
            if (r < 0) return -1;
            if (r) { q->done = 1; continue; }
        }
        int32_t next = sk_sample(s->logits + (size_t)g * s->V, s->V, &o->sp, q->ids, q->n, &q->rng);
        if (next >= sk_tok_vocab_size(s->tok)) next = 0;   /* padded rows of a wider model */
        for (int e = 0; e < s->n_eos; e++)
            if (next == s->eos[e]) q->eos = next;
        if (q->eos >= 0) { q->done = 1; continue; }    /* not printed, as decode(skip_special_tokens) */
        if (s->jg && sk_jg_match_feed_token(s->jm[g], next)) return sk_error(SK_EINVAL, "token %d does not continue the JSON", next), -1;
        q->ids[q->n++] = next;
        q->made++;
        if (s->jg && sk_jg_match_done(s->jm[g])) q->done = 1;   /* the JSON is whole */
        if (stream) {
            size_t len;
            /* a chat reply leaves special tokens out, as decode(skip_special_tokens=True) */
            const char *t = s->chat && sk_tok_is_special(s->tok, next) ? NULL : sk_tok_decode_one(s->tok, next, &len);
            if (t) { fwrite(t, 1, len, stdout); fflush(stdout); }
        }
        if (!q->done) { s->act[na] = g; s->nexts[na++] = next; }
    }
    return na;
}

/* The logits after the na tokens of sample_step. */
static int decode_step(sampler *s, int na) {
    const int V = s->V;
    if (gen_dec_pos(&s->dec, s->act[0]) == s->ctx) {
        /* context full (ctx is block_size here; the group's sequences advance together):
         * keep the newest half and rebuild each cache from it */
        int keep = sk_model_config(s->m)->block_size / 2;
        for (int j = 0; j < na; j++) {
            sample_seq *q = &s->seqs[s->act[j]];
            gen_dec_truncate(&s->dec, s->act[j], 0);
            if (gen_dec_run(&s->dec, s->act[j], q->ids + q->n - keep, keep, s->logits + (size_t)s->act[j] * V)) return 1;
        }
        return 0;
    }
    if (gen_dec_batch(&s->dec, s->act, s->nexts, na, s->lgb)) return 1;
    for (int j = 0; j < na; j++) memcpy(s->logits + (size_t)s->act[j] * V, s->lgb + (size_t)j * V, sizeof(float) * V);
    return 0;
}

/* Samples k0 .. k0 + g_n - 1 side by side: the prompt once, copied to the group's other
 * sequences, then up to --tokens new tokens each. */
static int sample_group(sampler *s, const sample_opts *o, int k0, int g_n) {
    const int V = s->V, stream = o->n_samples == 1;   /* one sample streams; several print when done */
    for (int g = 0; g < g_n; g++) {
        sample_seq *q = &s->seqs[g];
        memcpy(q->ids, s->ids, sizeof(int32_t) * s->n);
        q->n = s->n; q->made = 0; q->done = 0; q->eos = -1;
        q->rng = o->seed + (uint64_t)(k0 + g);
        gen_dec_truncate(&s->dec, g, 0);
        if (s->jg) {
            sk_jg_match_free(s->jm[g]);
            if (!(s->jm[g] = sk_jg_match_new(s->jg, s->jv))) return sk_error(SK_ENOMEM, "out of memory");
        }
    }
    if (stream && !o->quiet && s->prompt) fwrite(s->prompt, 1, strlen(s->prompt), stdout);
    double t0 = sk_now();
    if (gen_dec_run(&s->dec, 0, s->ids + s->start, (int)(s->n - s->start), s->logits)) return 1;
    for (int g = 1; g < g_n; g++) {
        if (sk_kvcache_seq_copy(s->dec.kv, g, 0)) return 1;   /* g_n > 1: the CPU's cache */
        memcpy(s->logits + (size_t)g * V, s->logits, sizeof(float) * V);
    }
    double t1 = sk_now();
    for (int i = 0; i < o->n_new; i++) {
        int na = sample_step(s, o, g_n, stream);
        if (na < 0) return 1;
        if (i + 1 == o->n_new || na == 0) break;
        if (decode_step(s, na)) return 1;
        s->decoded += na;
    }
    double t2 = sk_now();
    if (k0 == 0) s->t_prompt = t1 - t0;               /* the GPU decodes the prompt once per sample */
    s->t_gen += t2 - t1;
    return 0;
}

/* The group's samples, each decoded whole when they were not streamed, and why each stopped. */
static int print_group(sampler *s, const sample_opts *o, int k0, int g_n) {
    const int stream = o->n_samples == 1;
    for (int g = 0; g < g_n; g++) {
        sample_seq *q = &s->seqs[g];
        s->made += q->made;
        if (!stream) {
            /* the sample's text: decoded whole (special tokens left out of a chat reply) */
            size_t len = 0, w = 0;
            char *text;
            for (size_t j = s->n; j < q->n; j++)
                if (!(s->chat && sk_tok_is_special(s->tok, q->ids[j]))) q->ids[s->n + w++] = q->ids[j];
            if (sk_tok_decode(s->tok, q->ids + s->n, w, &text, &len)) return 1;
            if (k0 + g) fputs("---------------\n", stdout);
            if (!o->quiet && s->prompt) fwrite(s->prompt, 1, strlen(s->prompt), stdout);
            fwrite(text, 1, len, stdout);
            free(text);
        }
        fputs("\n", stdout);
        if (q->eos >= 0 && !o->quiet) {
            if (stream) fprintf(stderr, "[end-of-sequence token %d after %d new tokens; --ignore-eos goes on]\n", q->eos, q->made);
            else fprintf(stderr, "[sample %d: end-of-sequence token %d after %d new tokens]\n", k0 + g + 1, q->eos, q->made);
        }
    }
    fflush(stdout);
    return 0;
}

static void print_stats(sampler *s, const sample_opts *o) {
    size_t kv_bytes, kv_full;
    const char *kv_type = gen_dec_bytes(&s->dec, &kv_bytes, &kv_full);
    if (o->quiet) return;
    /* the rate of the decoding steps alone: each sample's first new token comes from the
     * prompt's pass, so N new tokens took N - 1 steps */
    const double rate = s->decoded / (s->t_gen > 0 ? s->t_gen : 1e-9);
    if (o->n_samples == 1)
        fprintf(stderr, "[prompt %zu tokens in %.3f s; %ld new tokens at %.1f tok/s (%ld decoding steps in %.3f s); "
                "KV cache (%s) %.2f MiB, %.2f MiB without SLA's saving]\n",
                s->n - s->start, s->t_prompt, s->made, rate, s->decoded, s->t_gen, kv_type, kv_bytes / 1048576.0, kv_full / 1048576.0);
    else
        fprintf(stderr, "[prompt %zu tokens in %.3f s; %d samples, %ld new tokens at %.1f tok/s (%d side by side; %ld tokens "
                "decoded in %.3f s); KV cache (%s) %.2f MiB, %.2f MiB without SLA's saving]\n",
                s->n - s->start, s->t_prompt, o->n_samples, s->made, rate, s->G, s->decoded, s->t_gen, kv_type,
                kv_bytes / 1048576.0, kv_full / 1048576.0);
}

static void sampler_free(sampler *s) {
    for (int g = 0; s->seqs && g < s->G; g++) free(s->seqs[g].ids);
    for (int g = 0; s->jm && g < s->G; g++) sk_jg_match_free(s->jm[g]);
    free(s->jm); free(s->allow);
    sk_jg_vocab_free(s->jv);
    sk_jg_free(s->jg);
    free(s->seqs); free(s->act); free(s->nexts); free(s->lgb);
    free(s->ids); free(s->logits); free(s->chat_text);
    sk_chat_free(s->chat);
    gen_dec_free(&s->dec);
    sk_tok_free(s->tok);
    sk_model_free(s->m);
}

int cmd_sample(int argc, char **argv) {
    sample_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    sampler s;
    memset(&s, 0, sizeof s);
    s.prompt = o.prompt;
    /* a Hugging Face folder's end-of-sequence ids: generation stops there, as generate() does;
     * they and --chat's prompt are read before anything is loaded (a bad file is refused first) */
    if ((!o.ignore_eos && sk_hf_eos_ids(o.weights, s.eos, GEN_MAX_EOS, &s.n_eos)) || (o.chat && chat_prompt(&s, &o))) {
        rc = cli_fail("sample");
        sampler_free(&s);
        return rc;
    }
    if (o.chat) s.prompt = s.chat_text;
    rc = setup(&s, &o) || ((o.json || o.schema_file) && setup_json(&s, &o));
    for (int k0 = 0; !rc && k0 < o.n_samples; k0 += s.G) {
        const int g_n = o.n_samples - k0 < s.G ? o.n_samples - k0 : s.G;
        rc = sample_group(&s, &o, k0, g_n) || print_group(&s, &o, k0, g_n);
    }
    if (rc) cli_fail("sample");
    else print_stats(&s, &o);
    sampler_free(&s);
    return rc ? 1 : 0;
}
