/* skiplm sample: prompt -> streamed text, with a KV cache. */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif

/* The tokenizer named by --tokenizer, or the weights' own (cli_tokenizer_of). */
static int load_tokenizer(sk_tokenizer **tok, const char *given, const char *weights) {
    if (given) return sk_tok_load(tok, given);
    char path[4096];
    return cli_tokenizer_of(weights, path, sizeof path) || sk_tok_load(tok, path);
}

/* The KV cache and decoding of either device; sampling is the host's for both. */
typedef struct {
    sk_model *m;
    sk_kvcache *kv;                  /* CPU */
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm;               /* GPU (--device cuda) */
    sk_cuda_kvcache *gkv;
#endif
} decoder;

/* prec: 0 fp32, 1 TF32, 2 bf16 (sk_cuda_precision); n_seq sequences side by side (the CPU's;
 * the GPU decodes one) */
static int dec_new(decoder *d, sk_model *m, int use_cuda, int prec, int max_T, int quiet, int n_seq) {
    memset(d, 0, sizeof *d);
    d->m = m;
#ifdef SKIPLM_CUDA
    if (use_cuda) {
        char dev[256];
        if (n_seq != 1) return sk_error(SK_EINVAL, "the CUDA decoder runs one sequence at a time");
        if (sk_cuda_device_info(dev, sizeof dev) || sk_cuda_model_new_inference(&d->cm, m, (sk_cuda_precision)prec))
            return 1;
        if (!quiet) fprintf(stderr, "[device: cuda: %s, %s]\n", dev, sk_cuda_precision_name((sk_cuda_precision)prec));
        return sk_cuda_kvcache_new(&d->gkv, d->cm, max_T, 0);
    }
#endif
    (void)use_cuda; (void)quiet;
    return sk_kvcache_new_seqs(&d->kv, m, max_T, n_seq, prec == 2);   /* CPU --bf16: bf16 weights */
}
static int dec_run(decoder *d, const int32_t *tokens, int n, float *logits) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_prefill(d->cm, d->gkv, tokens, n, logits);
#endif
    return sk_model_decode(d->m, d->kv, tokens, n, logits);
}
/* sequence s of several (s = 0 on the GPU) */
static int dec_run_seq(decoder *d, int s, const int32_t *tokens, int n, float *logits) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_prefill(d->cm, d->gkv, tokens, n, logits);
#endif
    return sk_model_decode_seq(d->m, d->kv, s, tokens, n, logits);
}
static int dec_batch(decoder *d, const int *seqs, const int32_t *tokens, int n, float *logits) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_prefill(d->cm, d->gkv, tokens, 1, logits);   /* n = 1, seqs[0] = 0 */
#endif
    return sk_model_decode_batch(d->m, d->kv, seqs, tokens, n, logits);
}
static int dec_seq_pos(const decoder *d, int s) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_kvcache_pos(d->gkv);
#endif
    return sk_kvcache_seq_pos(d->kv, s);
}
static void dec_seq_truncate(decoder *d, int s, int n) {
#ifdef SKIPLM_CUDA
    if (d->cm) { sk_cuda_kvcache_truncate(d->gkv, n); return; }
#endif
    sk_kvcache_seq_truncate(d->kv, s, n);
}
static int dec_pos(const decoder *d) {
#ifdef SKIPLM_CUDA
    if (d->cm) return sk_cuda_kvcache_pos(d->gkv);
#endif
    return sk_kvcache_pos(d->kv);
}
static void dec_truncate(decoder *d, int n) {
#ifdef SKIPLM_CUDA
    if (d->cm) { sk_cuda_kvcache_truncate(d->gkv, n); return; }
#endif
    sk_kvcache_truncate(d->kv, n);
}
/* the cache's K/V bytes (and without SLA's saving), and their type */
static const char *dec_bytes(const decoder *d, size_t *bytes, size_t *full) {
#ifdef SKIPLM_CUDA
    if (d->cm) {
        *bytes = sk_cuda_kvcache_bytes(d->gkv); *full = sk_cuda_kvcache_bytes_full(d->gkv);
        return sk_cuda_kvcache_bf16(d->gkv) ? "bf16" : "fp32";
    }
#endif
    *bytes = sk_kvcache_bytes(d->kv); *full = sk_kvcache_bytes_full(d->kv);
    return sk_kvcache_bf16(d->kv) ? "fp32; weights in bf16" : "fp32";
}
static void dec_free(decoder *d) {
#ifdef SKIPLM_CUDA
    sk_cuda_kvcache_free(d->gkv);
    sk_cuda_model_free(d->cm);
#endif
    sk_kvcache_free(d->kv);
}

/* 1 if folder (or the folder of file) holds a chat_template.jinja or a tokenizer_config.json */
static int has_chat_files(const char *path, int is_file) {
    const char *slash = is_file ? strrchr(path, '/') : NULL;
    const int dl = is_file ? (slash ? (int)(slash - path) : 1) : (int)strlen(path);
    const char *dir = is_file && !slash ? "." : path;
    static const char *const names[] = {"chat_template.jinja", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%.*s/%s", dl, dir, names[i]);
        if (stat(p, &sb) == 0) return 1;
    }
    return 0;
}

/* The chat template and its special tokens: those of the model's folder, else those beside the
 * model's tokenizer when that lies elsewhere (a checkpoint fine-tuned from an instruct model's
 * folder: prepare copied its tokenizer_config.json beside the tokenizer.json the checkpoint
 * records); --chat-template replaces the template, not the special tokens. */
static int load_chat(sk_chat **ct, const char *model, const char *given, const char *tok_given) {
    char *file = sk_weights_file(model);
    if (!file) return sk_error(SK_ENOMEM, "out of memory");
    int here = has_chat_files(file, 1);
    free(file);
    char tp[4096];
    struct stat sb;
    if (!here && tok_given) snprintf(tp, sizeof tp, "%s", tok_given);
    else if (!here && cli_tokenizer_of(model, tp, sizeof tp)) here = 1;
    if (!here) {
        const int dir = stat(tp, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (has_chat_files(tp, !dir)) {
            if (!dir) { char *s = strrchr(tp, '/'); if (s) *s = 0; else snprintf(tp, sizeof tp, "."); }
            return sk_chat_load(ct, tp, given);
        }
    }
    return sk_chat_load(ct, model, given);
}

/* A chat model's turn ends at its template's eos_token (tokenizer_config.json) as well as at
 * generation_config.json's ids: SmolLM2-Instruct's <|im_end|>, Qwen2.5's, Llama 3's <|eot_id|>.
 * The text must be one token (an added token is matched whole); otherwise it is said and left. */
static void chat_eos(sk_tokenizer *tok, const sk_chat *ct, int32_t *eos, int *n_eos, int max, int quiet) {
    const char *e = sk_chat_eos_token(ct);
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    if (e && *e && !sk_tok_encode(tok, e, strlen(e), &ids, &n, &cap) && n == 1) {
        int have = 0;
        for (int i = 0; i < *n_eos; i++) have |= eos[i] == ids[0];
        if (!have && *n_eos < max) eos[(*n_eos)++] = ids[0];
    } else if (e && *e && !quiet) {
        fprintf(stderr, "[the eos_token \"%s\" of tokenizer_config.json is not one token of this tokenizer: replies stop "
                "only at generation_config.json's ids or --tokens]\n", e);
    }
    free(ids);
}

/* one of --samples: its token ids (prompt, then the new ones), random stream and state */
typedef struct {
    int32_t *ids;
    size_t n;
    uint64_t rng;
    int made, done;
    int32_t eos;                     /* the end-of-sequence token it stopped at, or -1 */
} sample_seq;

int cmd_sample(int argc, char **argv) {
    int n_head = 0;
    const char *prompt = NULL, *tok_path = NULL, *device = "cpu", *system = NULL, *chat_tpl = NULL, *msgs_file = NULL,
               *tools_file = NULL;
    int n_new = 256, top_k = 0, greedy = 0, quiet = 0, tf32 = 0, bf16 = 0, ignore_eos = 0, chat = 0, n_samples = 1;
    float temperature = 0.8f, top_p = 1.0f, min_p = 0.0f, rep_pen = 1.0f;
    uint64_t seed = 1337;
    cli_opt opts[] = {
        {"prompt", 's', &prompt, "text to continue (default: the tokenizer's end-of-text token, e.g. <|endoftext|>, else a newline)"},
        {"tokens", 'i', &n_new, "new tokens to generate (256)"},
        {"temperature", 'f', &temperature, "softmax temperature; 0 = greedy (0.8)"},
        {"top-k", 'i', &top_k, "sample among the k most likely tokens; 0 = all (0)"},
        {"top-p", 'f', &top_p, "nucleus: smallest set with this probability (1.0 = off)"},
        {"min-p", 'f', &min_p, "keep only tokens at least this fraction as likely as the most likely one, after top-k and top-p (0 = off)"},
        {"repetition-penalty", 'f', &rep_pen, "divide the logit of every token already in the context by this if positive, multiply if negative, as transformers (1 = off; 1.1-1.3 discourages loops)"},
        {"seed", 'u', &seed, "sampling seed (1337)"},
        {"samples", 'i', &n_samples, "continuations of the prompt, decoded side by side on the CPU (one pass over the weights per step for all); sample k draws with seed + k; printed when done, separated by lines of dashes (1)"},
        {"greedy", 'b', &greedy, "same as --temperature 0"},
        {"tokenizer", 's', &tok_path, "vocab.json (char), tokenizer.json, or a folder with encoder.json + vocab.bpe, tokenizer.json or vocab.json + merges.txt (default: from the checkpoint, or beside it)"},
        {"quiet", 'b', &quiet, "print only the generated text (no prompt, no statistics)"},
        {"device", 's', &device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &tf32, "with --device cuda: TF32 tensor-core GEMMs in the prefill"},
        {"bf16", 'b', &bf16, "bf16 copy of the weights for the matrix products, fp32 everything else (CPU or --device cuda)"},
        {"ignore-eos", 'b', &ignore_eos, "go on past the end-of-sequence token of a Hugging Face folder (eos_token_id)"},
        {"chat", 'b', &chat, "--prompt is a user's message: the model's chat template makes the prompt (printed before the reply unless --quiet; skiplm chat converses)"},
        {"system", 's', &system, "with --chat: a system message first"},
        {"chat-template", 's', &chat_tpl, "with --chat: a .jinja file or a tokenizer_config.json (default: the model folder's)"},
        {"messages", 's', &msgs_file, "a JSON file with the whole conversation, a list of messages (role, content, tool_calls, ...) as transformers takes them (implies --chat; not with --prompt)"},
        {"tools", 's', &tools_file, "with --chat: a JSON file with a list of tool (function) schemas, for templates that show them"},
        {"n_head", 'i', &n_head, CLI_N_HEAD_HELP},
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "sample", "WEIGHTS_OR_CHECKPOINT [options]", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1) { fprintf(stderr, "skiplm sample: give a weights file or checkpoint\n"); return 2; }
    if (greedy) temperature = 0.0f;
    if (n_samples < 1 || n_samples > SK_KV_MAX_SEQS) {
        fprintf(stderr, "skiplm sample: --samples must be in [1, %d]\n", SK_KV_MAX_SEQS);
        return 2;
    }
    if (n_new < 0 || temperature < 0.0f || !(top_p > 0.0f && top_p <= 1.0f) || top_k < 0 || !(min_p >= 0.0f && min_p <= 1.0f) ||
        !(rep_pen > 0.0f)) {
        fprintf(stderr, "skiplm sample: need --tokens >= 0, --temperature >= 0, --top-k >= 0, 0 < --top-p <= 1, 0 <= --min-p <= 1, "
                "--repetition-penalty > 0\n");
        return 2;
    }
    const sk_sampling sp = {temperature, top_k, top_p, min_p, rep_pen};
    int use_cuda = !strcmp(device, "cuda") || !strcmp(device, "gpu");
    if (!use_cuda && strcmp(device, "cpu")) { fprintf(stderr, "skiplm sample: --device must be cpu or cuda (got '%s')\n", device); return 2; }
    if (tf32 && bf16) { fprintf(stderr, "skiplm sample: --tf32 and --bf16 exclude each other\n"); return 2; }
    if (tf32 && !use_cuda) { fprintf(stderr, "skiplm sample: --tf32 needs --device cuda\n"); return 2; }
    if (msgs_file) chat = 1;
    if ((system || chat_tpl || tools_file) && !chat) {
        fprintf(stderr, "skiplm sample: --system, --chat-template and --tools go with --chat\n");
        return 2;
    }
    if (msgs_file && (prompt || system)) { fprintf(stderr, "skiplm sample: --messages holds the whole conversation: no --prompt or --system\n"); return 2; }
    if (chat && !prompt && !msgs_file) { fprintf(stderr, "skiplm sample: --chat needs the user's message in --prompt (or a conversation in --messages)\n"); return 2; }
#ifndef SKIPLM_CUDA
    if (use_cuda) {
        fprintf(stderr, "skiplm sample: --device cuda: this skiplm was built without CUDA (build it with `make cuda`, "
                "then run build-cuda/skiplm)\n");
        return 2;
    }
#endif
    /* a Hugging Face folder's end-of-sequence ids: generation stops there, as generate() does
     * (read first: a bad file is refused before anything is loaded) */
    int32_t eos[16];
    int n_eos = 0;
    if (!ignore_eos && sk_hf_eos_ids(pos[0], eos, 16, &n_eos)) return cli_fail("sample");
    /* --chat: the template's text is the prompt (made before anything is loaded, as above) */
    sk_chat *chat_t = NULL;
    char *chat_text = NULL;
    if (chat) {
        sk_chat_msg msgs[2];
        int nm = 0;
        if (system) msgs[nm++] = (sk_chat_msg){"system", system};
        if (prompt) msgs[nm++] = (sk_chat_msg){"user", prompt};
        char *mtext = NULL, *ttext = NULL;
        size_t len;
        int bad = (msgs_file && cli_read_file(msgs_file, &mtext, &len)) || (tools_file && cli_read_file(tools_file, &ttext, &len)) ||
                  load_chat(&chat_t, pos[0], chat_tpl, tok_path) ||
                  (mtext ? sk_chat_render_json(chat_t, mtext, ttext, 1, &chat_text, &len)
                         : sk_chat_render(chat_t, msgs, nm, ttext, 1, &chat_text, &len));
        free(mtext); free(ttext);
        if (bad) { sk_chat_free(chat_t); return cli_fail("sample"); }
        prompt = chat_text;
    }
    /* from here every way out goes through done: (nothing left for LeakSanitizer) */
    sk_model *m = NULL;
    sk_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    float *logits = NULL, *lgb = NULL;
    sample_seq *seqs = NULL;
    int *act = NULL;
    int32_t *nexts = NULL;
    char *text = NULL;
    decoder dec;
    memset(&dec, 0, sizeof dec);
    rc = 1;
    if (cli_load_model(&m, pos[0], n_head) || load_tokenizer(&tok, tok_path, pos[0])) goto fail;
    if (chat_t && !ignore_eos) chat_eos(tok, chat_t, eos, &n_eos, 16, quiet);
    const sk_config *c = sk_model_config(m);
    if (sk_tok_vocab_size(tok) > c->vocab_size) {
        sk_error(SK_EINVAL, "the tokenizer has %d tokens but the model only %d", sk_tok_vocab_size(tok), c->vocab_size);
        goto fail;
    }
    size_t n = 0, cap = 0;
    if (prompt && *prompt) {
        if (sk_tok_encode(tok, prompt, strlen(prompt), &ids, &n, &cap)) goto fail;
    } else {
        int32_t start = sk_tok_eot(tok);
        if (start < 0) { if (sk_tok_encode(tok, "\n", 1, &ids, &n, &cap)) goto fail; }
        else if ((ids = malloc(sizeof(int32_t) * 4))) ids[n++] = start;
        else { sk_error(SK_ENOMEM, "out of memory"); goto fail; }
    }
    size_t total = n + (size_t)n_new;
    /* a prompt longer than the context keeps its last block_size tokens; the cache holds what
     * this run can reach (a model with a 128k context sampled for 100 tokens does not reserve
     * 128k positions) */
    size_t start = n > (size_t)c->block_size ? n - c->block_size : 0;
    int ctx = total - start < (size_t)c->block_size ? (int)(total - start) : c->block_size;
    if (chat_t && start && !quiet)
        fprintf(stderr, "[the chat's prompt has %zu tokens: only its last %d (block_size) are read]\n", n, c->block_size);
    /* --samples: G sequences side by side in one cache (the CPU's; the GPU runs them one after
     * another), each its own token ids (prompt + new) and its own random stream, seed + k */
    const int V = c->vocab_size, G = use_cuda ? 1 : n_samples;
    if (sk_mem_check(sizeof(int32_t) * (total + 1) * G + sizeof(float) * 2 * (size_t)G * V, "the token ids and logits of --samples"))
        goto fail;
    seqs = calloc(G, sizeof *seqs);
    act = malloc(sizeof(int) * G);
    nexts = malloc(sizeof(int32_t) * G);
    logits = malloc(sizeof(float) * (size_t)G * V);
    lgb = malloc(sizeof(float) * (size_t)G * V);
    if (!seqs || !act || !nexts || !logits || !lgb) { sk_error(SK_ENOMEM, "out of memory"); goto fail; }
    for (int g = 0; g < G; g++)
        if (!(seqs[g].ids = malloc(sizeof(int32_t) * (total + 1)))) { sk_error(SK_ENOMEM, "out of memory for %zu token ids", total + 1); goto fail; }
    if (dec_new(&dec, m, use_cuda, bf16 ? 2 : tf32 ? 1 : 0, ctx, quiet, G)) goto fail;
    const int stream = n_samples == 1;                 /* one sample streams; several print when done */
    double t_prompt = 0, t_gen = 0;
    long made_all = 0;
    for (int k0 = 0; k0 < n_samples; k0 += G) {
        const int g_n = n_samples - k0 < G ? n_samples - k0 : G;
        for (int g = 0; g < g_n; g++) {
            memcpy(seqs[g].ids, ids, sizeof(int32_t) * n);
            seqs[g].n = n; seqs[g].made = 0; seqs[g].done = 0; seqs[g].eos = -1;
            seqs[g].rng = seed + (uint64_t)(k0 + g);
            dec_seq_truncate(&dec, g, 0);
        }
        if (stream && !quiet && prompt) fwrite(prompt, 1, strlen(prompt), stdout);
        /* the prompt once, copied to the group's other sequences */
        double t0 = sk_now();
        if (dec_run_seq(&dec, 0, ids + start, (int)(n - start), logits)) goto fail;
        for (int g = 1; g < g_n; g++) {
            if (sk_kvcache_seq_copy(dec.kv, g, 0)) goto fail;   /* g_n > 1: the CPU's cache */
            memcpy(logits + (size_t)g * V, logits, sizeof(float) * V);
        }
        double t1 = sk_now();
        for (int i = 0; i < n_new; i++) {
            int na = 0;
            for (int g = 0; g < g_n; g++) {
                sample_seq *q = &seqs[g];
                if (q->done) continue;
                int32_t next = sk_sample(logits + (size_t)g * V, V, &sp, q->ids, q->n, &q->rng);
                if (next >= sk_tok_vocab_size(tok)) next = 0;   /* padded rows of a wider model */
                for (int e = 0; e < n_eos; e++)
                    if (next == eos[e]) q->eos = next;
                if (q->eos >= 0) { q->done = 1; continue; }    /* not printed, as decode(skip_special_tokens) */
                q->ids[q->n++] = next;
                q->made++;
                if (stream) {
                    size_t len;
                    /* a chat reply leaves special tokens out, as decode(skip_special_tokens=True) */
                    const char *t = chat_t && sk_tok_is_special(tok, next) ? NULL : sk_tok_decode_one(tok, next, &len);
                    if (t) { fwrite(t, 1, len, stdout); fflush(stdout); }
                }
                act[na] = g; nexts[na++] = next;
            }
            if (i + 1 == n_new || na == 0) break;
            if (dec_seq_pos(&dec, act[0]) == ctx) {
                /* context full (ctx is block_size here; the group's sequences advance together):
                 * keep the newest half and rebuild each cache from it */
                int keep = c->block_size / 2;
                for (int j = 0; j < na; j++) {
                    sample_seq *q = &seqs[act[j]];
                    dec_seq_truncate(&dec, act[j], 0);
                    if (dec_run_seq(&dec, act[j], q->ids + q->n - keep, keep, logits + (size_t)act[j] * V)) goto fail;
                }
            } else {
                if (dec_batch(&dec, act, nexts, na, lgb)) goto fail;
                for (int j = 0; j < na; j++) memcpy(logits + (size_t)act[j] * V, lgb + (size_t)j * V, sizeof(float) * V);
            }
        }
        double t2 = sk_now();
        if (k0 == 0) t_prompt = t1 - t0;               /* the GPU decodes the prompt once per sample */
        t_gen += t2 - t1;
        for (int g = 0; g < g_n; g++) {
            sample_seq *q = &seqs[g];
            made_all += q->made;
            if (!stream) {
                /* the sample's text: decoded whole (special tokens left out of a chat reply) */
                size_t len = 0, w = 0;
                for (size_t j = n; j < q->n; j++)
                    if (!(chat_t && sk_tok_is_special(tok, q->ids[j]))) q->ids[n + w++] = q->ids[j];
                if (sk_tok_decode(tok, q->ids + n, w, &text, &len)) goto fail;
                if (k0 + g) fputs("---------------\n", stdout);
                if (!quiet && prompt) fwrite(prompt, 1, strlen(prompt), stdout);
                fwrite(text, 1, len, stdout);
                free(text); text = NULL;
            }
            fputs("\n", stdout);
            if (q->eos >= 0 && !quiet) {
                if (stream) fprintf(stderr, "[end-of-sequence token %d after %d new tokens; --ignore-eos goes on]\n", q->eos, q->made);
                else fprintf(stderr, "[sample %d: end-of-sequence token %d after %d new tokens]\n", k0 + g + 1, q->eos, q->made);
            }
        }
        fflush(stdout);
    }
    size_t kv_bytes, kv_full;
    const char *kv_type = dec_bytes(&dec, &kv_bytes, &kv_full);
    if (!quiet) {
        if (stream)
            fprintf(stderr, "[prompt %zu tokens in %.3f s; %ld new tokens at %.1f tok/s; KV cache (%s) %.2f MiB, %.2f MiB without SLA's saving]\n",
                    n - start, t_prompt, made_all, made_all / (t_gen > 0 ? t_gen : 1e-9), kv_type,
                    kv_bytes / 1048576.0, kv_full / 1048576.0);
        else
            fprintf(stderr, "[prompt %zu tokens in %.3f s; %d samples, %ld new tokens at %.1f tok/s (%d side by side); "
                    "KV cache (%s) %.2f MiB, %.2f MiB without SLA's saving]\n",
                    n - start, t_prompt, n_samples, made_all, made_all / (t_gen > 0 ? t_gen : 1e-9), G, kv_type,
                    kv_bytes / 1048576.0, kv_full / 1048576.0);
    }
    rc = 0;
    goto done;
fail:
    cli_fail("sample");
done:
    for (int g = 0; seqs && g < (use_cuda ? 1 : n_samples); g++) free(seqs[g].ids);
    free(seqs); free(act); free(nexts); free(lgb); free(text);
    free(ids); free(logits); free(chat_text);
    sk_chat_free(chat_t);
    dec_free(&dec);
    sk_tok_free(tok);
    sk_model_free(m);
    return rc;
}

/* ------------------------------------------------------------------ skiplm chat
 *
 * A conversation on stdin: each line is the user's message (a line ending in a backslash
 * goes on to the next), the reply streams to stdout. Every turn renders the whole
 * conversation with the chat template, and the KV cache keeps what it holds up to the first
 * token where the new prompt differs, so a turn costs its own tokens, not the history's. When
 * the conversation outgrows the context the oldest turns are dropped (the system message
 * stays). /reset starts over, /quit (or end of input) ends. */

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

int cmd_chat(int argc, char **argv) {
    int n_head = 0, n_new = 1024, top_k = 0, greedy = 0, quiet = 0, tf32 = 0, bf16 = 0, max_ctx = 4096;
    const char *tok_path = NULL, *device = "cpu", *system = NULL, *chat_tpl = NULL, *tools_file = NULL;
    float temperature = 0.7f, top_p = 1.0f, min_p = 0.0f, rep_pen = 1.0f;
    uint64_t seed = 1337;
    cli_opt opts[] = {
        {"system", 's', &system, "a system message that opens the conversation"},
        {"chat-template", 's', &chat_tpl, "a .jinja file or a tokenizer_config.json (default: the model folder's chat_template.jinja, else its tokenizer_config.json)"},
        {"tools", 's', &tools_file, "a JSON file with a list of tool (function) schemas, for templates that show them"},
        {"tokens", 'i', &n_new, "most new tokens in one reply (1024)"},
        {"ctx", 'i', &max_ctx, "positions of the KV cache, at most the model's block_size (4096); older turns are dropped beyond it"},
        {"temperature", 'f', &temperature, "softmax temperature; 0 = greedy (0.7)"},
        {"top-k", 'i', &top_k, "sample among the k most likely tokens; 0 = all (0)"},
        {"top-p", 'f', &top_p, "nucleus: smallest set with this probability (1.0 = off)"},
        {"min-p", 'f', &min_p, "keep only tokens at least this fraction as likely as the most likely one, after top-k and top-p (0 = off)"},
        {"repetition-penalty", 'f', &rep_pen, "divide the logit of every token already in the context by this if positive, multiply if negative, as transformers (1 = off; 1.1-1.3 discourages loops)"},
        {"seed", 'u', &seed, "sampling seed (1337)"},
        {"greedy", 'b', &greedy, "same as --temperature 0"},
        {"tokenizer", 's', &tok_path, "the tokenizer (default: beside the weights)"},
        {"quiet", 'b', &quiet, "no statistics after each reply"},
        {"device", 's', &device, "cpu, or cuda in a CUDA build (cpu)"},
        {"tf32", 'b', &tf32, "with --device cuda: TF32 tensor-core GEMMs in the prefill"},
        {"bf16", 'b', &bf16, "bf16 copy of the weights for the matrix products (CPU or --device cuda)"},
        {"n_head", 'i', &n_head, CLI_N_HEAD_HELP},
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "chat", "MODEL [options]   (one message per line on stdin; /reset, /quit)", opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np != 1) { fprintf(stderr, "skiplm chat: give a model (a Hugging Face folder with a chat template, or weights and --chat-template)\n"); return 2; }
    if (greedy) temperature = 0.0f;
    if (n_new < 1 || max_ctx < 2 || temperature < 0.0f || !(top_p > 0.0f && top_p <= 1.0f) || top_k < 0 ||
        !(min_p >= 0.0f && min_p <= 1.0f) || !(rep_pen > 0.0f)) {
        fprintf(stderr, "skiplm chat: need --tokens >= 1, --ctx >= 2, --temperature >= 0, --top-k >= 0, 0 < --top-p <= 1, "
                "0 <= --min-p <= 1, --repetition-penalty > 0\n");
        return 2;
    }
    const sk_sampling sp = {temperature, top_k, top_p, min_p, rep_pen};
    int use_cuda = !strcmp(device, "cuda") || !strcmp(device, "gpu");
    if (!use_cuda && strcmp(device, "cpu")) { fprintf(stderr, "skiplm chat: --device must be cpu or cuda (got '%s')\n", device); return 2; }
    if (tf32 && (bf16 || !use_cuda)) { fprintf(stderr, "skiplm chat: --tf32 needs --device cuda, without --bf16\n"); return 2; }
#ifndef SKIPLM_CUDA
    if (use_cuda) { fprintf(stderr, "skiplm chat: --device cuda: this skiplm was built without CUDA (make cuda)\n"); return 2; }
#endif
    int32_t eos[16];
    int n_eos = 0;
    sk_chat *ct = NULL;
    char *tools = NULL; size_t tlen;                 /* tools: the --tools file's JSON text */
    if (sk_hf_eos_ids(pos[0], eos, 16, &n_eos) || (tools_file && cli_read_file(tools_file, &tools, &tlen)) ||
        load_chat(&ct, pos[0], chat_tpl, tok_path)) {
        free(tools);
        return cli_fail("chat");
    }
    /* the template must take a system message and a first user turn before any weights load */
    chat_log h = {0};
    char *text = NULL;
    if (system && log_push(&h, "system", system, strlen(system))) goto fail_early;
    if (log_push(&h, "user", "", 0) || sk_chat_render(ct, h.v, h.n, tools, 1, &text, &tlen)) goto fail_early;
    log_drop(&h, h.n - 1, h.n);
    free(text); text = NULL;
    sk_model *m = NULL;
    sk_tokenizer *tok = NULL;
    if (cli_load_model(&m, pos[0], n_head) || load_tokenizer(&tok, tok_path, pos[0])) {
        rc = cli_fail("chat");
        sk_model_free(m); log_free(&h); sk_chat_free(ct); free(tools);
        return rc;
    }
    chat_eos(tok, ct, eos, &n_eos, 16, quiet);
    const sk_config *c = sk_model_config(m);
    const int V = c->vocab_size, ctx = max_ctx < c->block_size ? max_ctx : c->block_size;
    if (!quiet && n_eos == 0)
        fprintf(stderr, "[no end-of-sequence token known (generation_config.json, tokenizer_config.json's eos_token): "
                "each reply runs --tokens %d]\n", n_new);
    decoder dec;
    memset(&dec, 0, sizeof dec);
    float *logits = malloc(sizeof(float) * V);
    int32_t *cached = malloc(sizeof(int32_t) * ((size_t)ctx + 1)), *ids = NULL;
    size_t n_cached = 0, n = 0, cap = 0;
    char *line = NULL, *reply = NULL; size_t line_cap = 0, line_len;
    uint64_t rng = seed;
    int tty = isatty(0);
    /* err: 0, 1 (the library's message is still to print), 2 (printed) */
    int err = 0;
    sk_chat_msg *view = malloc(sizeof *view * 2);
    if (sk_tok_vocab_size(tok) > V) err = (sk_error(SK_EINVAL, "the tokenizer has %d tokens but the model only %d", sk_tok_vocab_size(tok), V), 1);
    else if (!logits || !cached || !view) err = (sk_error(SK_ENOMEM, "out of memory"), 1);
    else if (dec_new(&dec, m, use_cuda, bf16 ? 2 : tf32 ? 1 : 0, ctx, quiet, 1)) err = 1;
    if (!err && tty && !quiet)
        fprintf(stderr, "[%d positions of context; /reset starts over, /quit ends; end a line with \\ to go on]\n", ctx);
    /* older turns are dropped to leave a reply this much room */
    const int first = system ? 1 : 0, room = n_new < ctx / 4 ? n_new : ctx / 4 > 1 ? ctx / 4 : 1;
    int r = 0;
    while (!err && (r = read_message(&line, &line_cap, &line_len, tty)) > 0) {
        const char *lb, *le;
        trimmed(line, line_len, &lb, &le);
        if (lb == le) continue;                       /* an empty line is no message */
        if (is_command(lb, le, "/quit") || is_command(lb, le, "/exit")) break;
        if (is_command(lb, le, "/reset")) {
            log_drop(&h, first, h.n);          /* the cache stays: the next prompt reuses its common prefix (the system message) */
            if (!quiet) fprintf(stderr, "[conversation reset]\n");
            continue;
        }
        if (log_push(&h, "user", line, line_len)) { err = 1; break; }
        sk_chat_msg *nv = realloc(view, sizeof *view * (size_t)h.n);
        if (!nv) { err = (sk_error(SK_ENOMEM, "out of memory"), 1); break; }
        view = nv;
        /* the prompt: the whole conversation, less its oldest turns while it leaves the reply
         * less than `room` positions (the system message stays); rendered from a view so that
         * nothing is dropped for a message that does not fit even alone */
        int from = first, ok = 0;
        for (;;) {
            int nv_n = 0;
            if (system) view[nv_n++] = h.v[0];
            for (int k = from; k < h.n; k++) view[nv_n++] = h.v[k];
            free(text); text = NULL; n = 0;
            if (sk_chat_render(ct, view, nv_n, tools, 1, &text, &tlen) || sk_tok_encode(tok, text, tlen, &ids, &n, &cap)) break;
            if (n == 0) { sk_error(SK_EINVAL, "the chat template made an empty prompt"); break; }
            if (n + (size_t)room <= (size_t)ctx) { ok = 1; break; }
            if (from == h.n - 1) {                    /* nothing older to drop: any room will do */
                ok = n < (size_t)ctx;
                if (!ok) sk_error(SK_EINVAL, "this message makes a prompt of %zu tokens, and the context holds %d (--ctx)", n, ctx);
                break;
            }
            from++;                                   /* the oldest turn: up to the next user message */
            while (from < h.n - 1 && strcmp(h.v[from].role, "user")) from++;
        }
        if (!ok) {
            fprintf(stderr, "skiplm chat: %s\n", sk_last_error());
            log_drop(&h, h.n - 1, h.n);               /* the turn is refused; the conversation goes on */
            if (!tty) err = 2;
            continue;
        }
        if (from > first) {
            if (!quiet) fprintf(stderr, "[%d oldest messages dropped to fit the context]\n", from - first);
            log_drop(&h, first, from);
        }
        /* keep the cached prefix; at least the last prompt token runs, for its logits */
        size_t keep = common_prefix(cached, n_cached, ids, n);
        if (keep == n) keep--;
        if (keep < (size_t)dec_pos(&dec)) dec_truncate(&dec, (int)keep);
        double t0 = sk_now();
        if (dec_run(&dec, ids + keep, (int)(n - keep), logits)) { err = 1; break; }
        memcpy(cached, ids, sizeof(int32_t) * n);
        n_cached = n;
        double t1 = sk_now();
        /* the reply, streamed; its text (not the stop token) joins the conversation */
        const size_t r0 = n_cached;
        int stop = 0, full = 0, made = 0;
        while (made < n_new) {
            int32_t next = sk_sample(logits, V, &sp, cached, n_cached, &rng);
            if (next >= sk_tok_vocab_size(tok)) next = 0;
            for (int e = 0; e < n_eos; e++) stop |= next == eos[e];
            if (stop) break;
            made++;
            size_t len;
            const char *s = sk_tok_is_special(tok, next) ? NULL : sk_tok_decode_one(tok, next, &len);
            if (s) { fwrite(s, 1, len, stdout); fflush(stdout); }
            cached[n_cached++] = next;
            if (made == n_new) break;
            if (dec_pos(&dec) == ctx) { full = 1; break; }
            if (dec_run(&dec, &next, 1, logits)) { err = 1; break; }
        }
        double t2 = sk_now();
        fputs("\n", stdout);
        fflush(stdout);
        if (err) break;
        /* the reply's text without its special tokens joins the conversation (ids: the prompt's
         * buffer, free again) */
        size_t rlen, nr = 0;
        free(reply); reply = NULL;
        if (cap < n_cached - r0 + 1) {
            int32_t *g = realloc(ids, sizeof(int32_t) * (n_cached - r0 + 1));
            if (!g) { err = (sk_error(SK_ENOMEM, "out of memory"), 1); break; }
            ids = g; cap = n_cached - r0 + 1;
        }
        for (size_t k = r0; k < n_cached; k++)
            if (!sk_tok_is_special(tok, cached[k])) ids[nr++] = cached[k];
        if (sk_tok_decode(tok, ids, nr, &reply, &rlen) || log_push(&h, "assistant", reply, rlen)) { err = 1; break; }
        /* the last sampled token is not in the cache */
        if (n_cached > (size_t)dec_pos(&dec)) n_cached = (size_t)dec_pos(&dec);
        if (!quiet)
            fprintf(stderr, "[%zu prompt tokens, %zu new in %.2f s; %d tokens at %.1f tok/s%s]\n", n, n - keep, t1 - t0,
                    made, made / (t2 - t1 > 0 ? t2 - t1 : 1e-9),
                    full ? "; the context is full: the reply stops here" : stop ? "" : "; --tokens reached");
    }
    if (!err && r < 0) err = (sk_error(SK_ENOMEM, "out of memory for the message"), 1);
    if (!err && ferror(stdin)) err = (sk_error(SK_EIO, "reading stdin failed"), 1);
    if (err == 1) cli_fail("chat");
    free(line); free(reply); free(text); free(ids); free(logits); free(cached); free(view); free(tools);
    dec_free(&dec);
    sk_tok_free(tok);
    sk_model_free(m);
    log_free(&h);
    sk_chat_free(ct);
    return err ? 1 : 0;
fail_early:
    free(text); free(tools);
    log_free(&h);
    sk_chat_free(ct);
    return cli_fail("chat");
}
