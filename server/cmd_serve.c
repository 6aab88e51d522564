/* skiplm serve: a model behind an OpenAI-compatible HTTP API (docs/serving.md): the
 * completions, chat completions and models endpoints, streamed or not, with continuous
 * batching of --parallel sequences and a prompt cache (serve.h has the parts). */
#include "serve.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 0, or the exit status (1 --help, then 0; 2 a bad option) */
static int parse_opts(serve_opts *o, int argc, char **argv) {
    *o = (serve_opts){.host = "127.0.0.1", .port = 8080, .queue = 256, .max_body = 4 << 20, .grace = 10, .device = "cpu",
                      .prefill = 256, .timeout = 600, .cors_headers = "Authorization, Content-Type"};
    cli_opt opts[] = {
        {"host", 's', &o->host, "address to listen on: a name, an IPv4 or an IPv6 address (127.0.0.1; 0.0.0.0 for every interface)"},
        {"port", 'i', &o->port, "TCP port; 0 picks a free one, said on stderr (8080)"},
        {"parallel", 'i', &o->parallel, "sequences decoded side by side, in one batch per step (the KV cache holds this many); more requests wait in the queue (4 on the CPU, 1 on a GPU; or set by --kv-memory)"},
        {"kv-memory", 's', &o->kv_memory, "memory for the K/V of the slots, e.g. 512M or 2G (K, M, G, T: powers of 1024): --parallel becomes as many slots of --ctx positions as fit, from the model's K/V bytes per position (which SLA, GQA and shared-K/V routing lower; --kv-bf16 halves) (CPU; not with --parallel)"},
        {"ctx", 'i', &o->ctx, "positions of each sequence's KV cache: prompt + reply, at most the model's block_size (block_size, at most 4096)"},
        {"bf16", 'b', &o->bf16, "bf16 copy of the weights for the matrix products (half the bytes a step reads), fp32 everything else"},
        {"q8", 'b', &o->q8, "8-bit weights (q8_0) for the matrix products, a quarter of fp32's bytes (CPU; implied by a quantized file, skiplm quantize)"},
        {"kv-bf16", 'b', &o->kv_bf16, "K and V stored in bf16 in the KV cache: half its bytes (rounded to nearest even when written, read back as fp32) (CPU)"},
        {"api-key", 's', &o->api_key, "requests must carry 'Authorization: Bearer KEY' (GET /health excepted); also read from SKIPLM_API_KEY"},
        {"alias", 's', &o->alias, "the model's name in the API (default: the last part of MODEL's path); repeat it for more names, the first shown"},
        {"any-model", 'b', &o->any_model, "accept every 'model' name a request gives (clients that insist on gpt-3.5-turbo)"},
        {"timeout", 'i', &o->timeout, "seconds a connection may stay silent: a request head or body that stalls is closed unanswered, and logged (600)"},
        {"cors-headers", 's', &o->cors_headers, "the headers a CORS preflight allows when it names none (a preflight that names some gets them) (Authorization, Content-Type)"},
        {"tokenizer", 's', &o->tok_path, "the tokenizer (default: the checkpoint's or GGUF file's, or beside the weights)"},
        {"chat-template", 's', &o->chat_tpl, "a .jinja file or a tokenizer_config.json for /v1/chat/completions (default: the model folder's)"},
        {"tool-format", 's', &o->tool_format, "how the model writes tool calls: hermes (<tool_call>{...}</tool_call>), llama (a JSON object) or mistral ([TOOL_CALLS][...]) (default: the one whose marker is a token of the vocabulary, else hermes)"},
        {"prefill-chunk", 'i', &o->prefill, "prompt tokens decoded between two decoding steps of the running requests, a multiple of 64: a long prompt delays the others by one such piece (256)"},
        {"queue", 'i', &o->queue, "requests that may wait for a slot; past it a request gets 503 (256)"},
        {"max-body", 'i', &o->max_body, "largest request body in bytes; past it 413 (4194304)"},
        {"grace", 'i', &o->grace, "seconds running requests get to end after SIGINT or SIGTERM (10)"},
        {"quiet", 'b', &o->quiet, "log only the requests that fail"},
        {"device", 's', &o->device, "cpu, or cuda in a CUDA build (one sequence at a time) (cpu)"},
        CLI_MODEL_OPTS(&o->mo),
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "serve", "MODEL [options]   (MODEL: a checkpoint, a weights file, a Hugging Face folder or a GGUF file)", opts, pos, 1,
                       &np, NULL, NULL);
    if (rc) return rc;
    for (int i = 1; i < argc; i++)                     /* --alias repeats: every name, in order */
        if (!strcmp(argv[i], "--alias") && i + 1 < argc) { if (o->n_alias < SRV_MAX_ALIAS) o->aliases[o->n_alias++] = argv[i + 1]; i++; }
        else if (!strncmp(argv[i], "--alias=", 8) && o->n_alias < SRV_MAX_ALIAS) o->aliases[o->n_alias++] = argv[i] + 8;
    if (o->n_alias) o->alias = o->aliases[0];
    if (np != 1) { fprintf(stderr, "skiplm serve: give a model (a checkpoint, a weights file or a Hugging Face folder)\n"); return 2; }
    o->model = pos[0];
    if (!o->api_key && getenv("SKIPLM_API_KEY") && *getenv("SKIPLM_API_KEY")) o->api_key = getenv("SKIPLM_API_KEY");
    if ((o->use_cuda = cli_device("serve", o->device)) < 0) return 2;
    if (o->use_cuda && !cli_cuda_built("serve")) return 2;
    if (o->kv_memory) {
        if (o->parallel || o->use_cuda) {
            fprintf(stderr, "skiplm serve: --kv-memory sets --parallel (give one of them), on the CPU\n");
            return 2;
        }
        if (sk_parse_bytes(o->kv_memory, &o->kv_budget)) { fprintf(stderr, "skiplm serve: --kv-memory: %s\n", sk_last_error()); return 2; }
        o->parallel = 1;                                /* until the model says how many fit (start) */
    }
    if (o->kv_bf16 && o->use_cuda) { fprintf(stderr, "skiplm serve: --kv-bf16 is for the CPU (with --device cuda, --bf16 keeps K/V in bf16)\n"); return 2; }
    if (!o->parallel) o->parallel = o->use_cuda ? 1 : 4;
    if (o->port < 0 || o->port > 65535 || o->parallel < 1 || o->parallel > SK_KV_MAX_SEQS || o->ctx < 0 || o->queue < 0 ||
        o->max_body < 1 || o->grace < 0 || o->timeout < 1 || o->prefill < SK_DECODE_CHUNK || o->prefill % SK_DECODE_CHUNK) {
        fprintf(stderr, "skiplm serve: need 0 <= --port <= 65535, 1 <= --parallel <= %d, --ctx >= 0, --queue >= 0, --max-body >= 1, "
                "--grace >= 0, --timeout >= 1, --prefill-chunk a multiple of %d\n", SK_KV_MAX_SEQS, SK_DECODE_CHUNK);
        return 2;
    }
    if (o->q8 && (o->bf16 || o->use_cuda)) { fprintf(stderr, "skiplm serve: --q8 is for the CPU, without --bf16\n"); return 2; }
    if (o->use_cuda && o->parallel != 1) { fprintf(stderr, "skiplm serve: --device cuda decodes one sequence at a time: --parallel 1\n"); return 2; }
    if (o->api_key && !*o->api_key) { fprintf(stderr, "skiplm serve: --api-key is empty\n"); return 2; }
    if (o->tool_format && strcmp(o->tool_format, "hermes") && strcmp(o->tool_format, "llama") && strcmp(o->tool_format, "mistral")) {
        fprintf(stderr, "skiplm serve: --tool-format is hermes, llama or mistral\n");
        return 2;
    }
    return 0;
}

/* the name the API shows: --alias, else the model path's last part, without ".safetensors";
 * for a run's ckpt.safetensors or a folder's model.safetensors, the folder's name */
static const char *model_name(const serve_opts *o) {
    if (o->alias) return o->alias;
    static char name[256];
    const char *p = o->model, *e = p + strlen(p);
    while (e > p + 1 && e[-1] == '/') e--;
    const char *b = e;
    while (b > p && b[-1] != '/') b--;
    const size_t n = (size_t)(e - b), sl = strlen(".safetensors");
    const int st = n > sl && !memcmp(e - sl, ".safetensors", sl);
    if (st && b > p + 1 && ((n == strlen("ckpt.safetensors") && !memcmp(b, "ckpt", 4)) || (n == strlen("model.safetensors") && !memcmp(b, "model", 5)))) {
        e = b - 1;                                      /* the folder holding it */
        while (e > p + 1 && e[-1] == '/') e--;
        b = e;
        while (b > p && b[-1] != '/') b--;
        snprintf(name, sizeof name, "%.*s", (int)(e - b), b);
    } else {
        snprintf(name, sizeof name, "%.*s", (int)(st ? n - sl : n), b);
    }
    return name;
}

/* --kv-memory: as many slots of s->ctx positions as the budget holds K/V for (at most
 * SK_KV_MAX_SEQS), from the model's K/V bytes per position (only the heads some layer reads,
 * sk_kvcache_bytes_per_token); said on stderr, refused when not even one fits */
static int kv_slots(serve *s, serve_opts *o) {
    const size_t per_tok = sk_kvcache_bytes_per_token(s->m, o->kv_bf16 ? SK_KV_BF16 : SK_KV_F32);
    if (!per_tok) return sk_error(SK_ENOMEM, "out of memory");
    const size_t per_slot = per_tok * (size_t)s->ctx, n = o->kv_budget / per_slot;
    if (n < 1)
        return sk_error(SK_EINVAL, "--kv-memory %s (%zu bytes) holds no slot: one sequence of --ctx %d positions needs %zu bytes of K/V "
                        "(%zu per position%s); give at least %.1f MiB, a smaller --ctx%s", o->kv_memory, o->kv_budget, s->ctx, per_slot,
                        per_tok, o->kv_bf16 ? ", bf16" : ", fp32", per_slot / 1048576.0, o->kv_bf16 ? "" : " or --kv-bf16");
    o->parallel = n > SK_KV_MAX_SEQS ? SK_KV_MAX_SEQS : (int)n;
    if (!o->quiet)
        fprintf(stderr, "[--kv-memory %s: K/V of %zu bytes per position (%s), %.2f MiB per slot of %d positions: --parallel %d%s]\n",
                o->kv_memory, per_tok, o->kv_bf16 ? "bf16" : "fp32", per_slot / 1048576.0, s->ctx, o->parallel,
                n > SK_KV_MAX_SEQS ? " (the most a cache holds)" : "");
    return SK_OK;
}

/* the stop tokens and the chat template before the weights (a bad file is refused first),
 * then the model, its tokenizer and the engine */
static int start(serve *s, serve_opts *o) {
    if (sk_hf_eos_ids(o->model, s->eos, GEN_MAX_EOS, &s->n_eos)) return 1;
    if (gen_load_chat(&s->chat, o->model, o->chat_tpl, o->tok_path)) {
        if (o->chat_tpl) return 1;
        if (!o->quiet) fprintf(stderr, "[no chat template (%s): /v1/chat/completions refuses; give --chat-template]\n", sk_last_error());
        s->chat = NULL;
    }
    if (gen_load(&s->m, &s->tok, o->model, &o->mo, o->tok_path)) return 1;
    memcpy(s->chat_eos, s->eos, sizeof s->eos);
    s->n_chat_eos = s->n_eos;
    if (s->chat) gen_chat_eos(s->tok, s->chat, s->chat_eos, &s->n_chat_eos, GEN_MAX_EOS, o->quiet);
    const sk_config *c = sk_model_config(s->m);
    s->V = c->vocab_size;
    const int dflt = c->block_size < 4096 ? c->block_size : 4096;
    if (o->ctx > c->block_size) {
        fprintf(stderr, "[--ctx %d is past the model's block_size: %d]\n", o->ctx, c->block_size);
        o->ctx = c->block_size;
    }
    s->ctx = o->ctx ? o->ctx : dflt;
    if (s->ctx < 2) return sk_error(SK_EINVAL, "--ctx %d leaves no room for a prompt and a reply", s->ctx);
    if (o->kv_budget && kv_slots(s, o)) return 1;
    if (sk_jg_vocab_from_tok(&s->jv, s->tok, s->V)) return 1;
    s->tool_fmt = !o->tool_format ? tools_format(s->tok) : !strcmp(o->tool_format, "llama") ? SRV_TOOLS_LLAMA
                : !strcmp(o->tool_format, "mistral") ? SRV_TOOLS_MISTRAL : SRV_TOOLS_HERMES;
    s->name = model_name(o);
    s->started = (long)time(NULL);
    pthread_mutex_init(&s->text_mu, NULL);
    if (srv_engine_start(s)) return 1;
    size_t kv, full;
    const char *kind = srv_kv_bytes(s, &kv, &full);
    if (!o->quiet)
        fprintf(stderr, "[model %s: %s, %d layers, vocabulary %d; KV cache (%s) %.1f MiB for %d x %d positions, %.1f MiB without SLA's saving%s]\n",
                s->name, c->family == SK_LLAMA ? "llama" : "gpt2", c->n_layer, s->V, kind, kv / 1048576.0, o->parallel, s->ctx,
                full / 1048576.0, s->chat ? "; chat template loaded" : "");
    return 0;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
#ifndef SK_HAVE_MHD
    fprintf(stderr, "skiplm serve: this skiplm was built without libmicrohttpd: install it (apt-get install libmicrohttpd-dev, "
            "or bash scripts/install_deps.sh) and rebuild (make)\n");
    return 1;
#endif
    serve s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    /* SIGINT and SIGTERM go to serve_http's sigwait: blocked before any thread starts, so every
     * thread inherits the mask; a client gone mid-write is an error, not SIGPIPE */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = start(&s, &o) || serve_http(&s);
    if (rc) cli_fail("serve");
    srv_engine_free(&s);
    if (s.name) pthread_mutex_destroy(&s.text_mu);
    sk_chat_free(s.chat);
    sk_jg_vocab_free(s.jv);
    sk_tok_free(s.tok);
    sk_model_free(s.m);
    return rc ? 1 : 0;
}
