/* skiplm serve: an OpenAI-compatible HTTP server (docs/serving.md). Six parts:
 *   cmd_serve.c     the command: options, the model, signals, shutdown;
 *   serve_http.c    HTTP through libmicrohttpd: routes, the API key, bodies, server-sent events,
 *                   the access log;
 *   serve_api.c     OpenAI's request and response shapes: a request's JSON becomes a job, a
 *                   job's state becomes a response, a chunk, or an error object;
 *   serve_tools.c   tool calls: the formats models write them in, their grammar, reading them;
 *   chat.html       the chat page of GET / (compiled in);
 *   serve_head.c    a request head's Content-Length, checked before libmicrohttpd reads it;
 *   serve_engine.c  continuous batching: a queue, --parallel slots of one KV cache, one batched
 *                   decoding step for every running sequence, the prompt cache.
 * A job is shared by its connection's thread and the engine's thread; everything in it past
 * "the engine's part" is read and written under the engine's lock. */
#ifndef SK_SERVER_SERVE_H
#define SK_SERVER_SERVE_H
#include "generate.h"
#include <pthread.h>

#define SRV_MAX_STOP 4          /* stop strings, as OpenAI's API */
#define SRV_MAX_TOP 20          /* top_logprobs */
#define SRV_MAX_ALIAS 16        /* --alias, repeated */
#define SRV_MAX_SEQS 1024       /* sequences of one request: prompts x n */

typedef struct {
    const char *model, *host, *alias, *api_key, *tok_path, *chat_tpl, *device, *tool_format;
    const char *kv_memory;      /* --kv-memory: the slots' K/V budget, which sets --parallel */
    cli_model_opts mo;          /* --n_head, --n_skip_layer, --n_skip_head, --routing for a file that does not say */
    int port, parallel, ctx, bf16, q8, kv_bf16, queue, max_body, grace, quiet, use_cuda, prefill;
    const char *aliases[SRV_MAX_ALIAS];   /* every --alias (alias: the first), the names the API answers to */
    int n_alias, any_model;     /* --any-model: every model name is this model */
    int timeout;                /* --timeout: seconds a connection may stay silent (an upload that stalls) */
    const char *cors_headers;   /* --cors-headers: what a preflight allows when it names none */
    size_t kv_budget;           /* --kv-memory in bytes (0: not given) */
} serve_opts;

/* a sampled token's log-probability (log-softmax of the model's logits) and the most likely
 * alternatives; end: the byte length of the sequence's text after it */
typedef struct {
    int32_t id;
    float lp;
    int n_top;
    int32_t top_id[SRV_MAX_TOP];
    float top_lp[SRV_MAX_TOP];
    size_t end;
} srv_lp;

enum { SRV_GOING, SRV_STOP, SRV_LENGTH };              /* why a sequence ended */
enum { SRV_TOOLS_HERMES, SRV_TOOLS_LLAMA, SRV_TOOLS_MISTRAL };   /* how a model writes tool calls (serve_tools.c) */
enum { SRV_QUEUED, SRV_RUNNING, SRV_DONE };            /* a job's state */
enum { SRV_NONE, SRV_OPENED, SRV_FINISHED };           /* a sequence's stream */

/* One sequence of a job: a choice (n per prompt). */
typedef struct {
    int prompt, index;          /* its prompt; its index in the response's choices */
    int slot;                   /* its KV-cache sequence while it runs, else -1 */
    int32_t *ids;               /* the prompt's ids, then the new ones */
    size_t n, cap, n_prompt;
    uint64_t rng;
    int made, finish;
    char *text;                 /* the new tokens' text (special tokens left out of a chat reply) */
    size_t len, text_cap, sent; /* its bytes; those streamed */
    srv_lp *lps;                /* with logprobs: one per new token */
    int n_lp, lp_cap, lp_sent;
    int streamed;               /* a stream's progress: SRV_NONE, SRV_OPENED (the first chunk: a chat's role,
                                 * an echo's prompt), SRV_FINISHED (its finish_reason went out) */
    int ready;                  /* its prompt is decoded: it draws tokens */
    sk_jg_match *jm;            /* response_format's matcher: the tokens its reply may go on with */
    size_t pf;                  /* a prompt's leader: the prompt's positions in its cache */
    int admitted;               /* it was given a slot (a job's sequences are admitted as slots free, in order) */
    int lead;                   /* the index of the sequence that decodes its prompt for it (itself: a leader) */
    size_t *ends;               /* the text's length after each new token (the log counts the tokens sent) */
    int ends_cap, sent_tokens;
} srv_seq;

typedef struct srv_job {
    /* the request (serve_api.c), fixed once submitted */
    int chat, stream, include_usage, echo;
    int responses;              /* POST /v1/responses: a chat answered in the Responses API's shapes */
    int embed, base64;          /* POST /v1/embeddings: each prompt's pooled hidden states (embeds, n_prompts x dim),
                                 * made by the engine's thread, no slot taken; base64: sent as float32 bytes */
    float *embeds;
    int dim;
    int events;                 /* a Responses stream's events so far (their sequence_number; its connection's alone) */
    int n_prompts, n;           /* prompts, and choices of each: n_prompts * n sequences */
    int32_t **prompts;
    size_t *prompt_n;
    char **prompt_text;         /* echo */
    sk_sampling sp;
    uint64_t seed;
    int max_tokens;
    char *stop[SRV_MAX_STOP];
    size_t stop_len[SRV_MAX_STOP];
    int n_stop;
    float presence, frequency;  /* OpenAI's penalties, on the new tokens' counts */
    int n_bias;                 /* logit_bias */
    int32_t *bias_id;
    float *bias;
    int logprobs;               /* -1: none; else the alternatives wanted (0..SRV_MAX_TOP) */
    sk_jg *grammar;             /* response_format json_object / json_schema: every reply is such JSON */
    int tools_on, tool_fmt;     /* tools given (tool_choice not "none"): replies are read for tool calls, in this format */
    int n_tools;
    char **tool_names, **tool_params;   /* each tool's name and its parameters' schema (JSON text) */
    srv_lp **prompt_lps;        /* echo with logprobs: each prompt's tokens' logprobs (the first has none: NaN), */
    int prompt_lps_ready;       /* made by the engine when it admits the job */
    char id[48];
    long created;
    /* the engine's part */
    int n_seq;
    srv_seq *seqs;
    int state, cancelled, failed;
    int in_queue;               /* some of its sequences still wait for slots */
    const char *err_code;       /* a failure's OpenAI code (NULL: none) */
    char err[256];
    long order;                 /* admission order (prompts are decoded first come, first served) */
    int prompt_tokens, completion_tokens, cached_tokens;   /* cached: prompt tokens the prompt cache kept */
    double t_submit, t_first;
    pthread_cond_t cv;          /* signalled when the job's output grows or it ends */
    int refs;                   /* the connection's and the engine's */
    struct srv_job *next;
} srv_job;

typedef struct srv_engine srv_engine;

/* The model, its text side and the engine, shared by every connection. Templates and the
 * tokenizer's encoder run under text_mu (the tokenizer caches as it encodes). */
typedef struct {
    serve_opts *o;
    const char *name;           /* the model's name in the API (--alias, else MODEL's last part) */
    sk_model *m;
    sk_tokenizer *tok;
    sk_chat *chat;              /* NULL: no chat template, /v1/chat/completions refuses */
    int32_t eos[GEN_MAX_EOS], chat_eos[GEN_MAX_EOS];
    int n_eos, n_chat_eos;
    int V, ctx;
    sk_jg_vocab *jv;            /* the tokens as bytes, for response_format's masks */
    int tool_fmt;               /* the format of tool calls, from the vocabulary's markers */
    pthread_mutex_t text_mu;
    srv_engine *eng;
    long started;
    int requests;               /* requests begun and not yet logged */
    int busy;                   /* of those, the ones holding a job (shutdown waits for them, up to --grace) */
    long n_requests, n_prompt, n_predicted;   /* GET /metrics: requests answered, their prompt and new tokens (atomic) */
} serve;

/* ------------------------------------------------------------- serve_engine.c */
/* The engine's thread, its slots (gen_dec_new with --parallel sequences) and its queue. */
int srv_engine_start(serve *s);
/* Queues the job (its engine reference taken): 0; -1 when the queue is full, -2 when the
 * server stops (nothing taken). Its sequences take slots as they free, first come first
 * served: a request of more sequences than --parallel runs part by part. */
int srv_submit(serve *s, srv_job *j);
/* The caller's reference is dropped; the last one frees the job. */
void srv_release(serve *s, srv_job *j);
void srv_lock(serve *s);
void srv_unlock(serve *s);
/* Under the lock: waits up to ms milliseconds for the job to change. */
void srv_wait(serve *s, srv_job *j, int ms);
/* Under the lock: the job stops (a client gone); its slots free at the next step. */
void srv_cancel(serve *s, srv_job *j);
/* Under the lock: the new tokens made so far, and those whose text went out in a stream */
void srv_tokens(const srv_job *j, int *made, int *sent);
/* Under the lock: running sequences and queued jobs. */
void srv_load(serve *s, int *running, int *queued, int *slots);
/* Shutdown: queued jobs fail now, running ones get grace seconds to end (a second signal, or
 * grace 0, ends them at once), then the thread stops. */
void srv_engine_stop(serve *s, int grace);
void srv_engine_free(serve *s);
/* the KV cache's bytes (and without SLA's saving) and their kind, as gen_dec_bytes */
const char *srv_kv_bytes(serve *s, size_t *bytes, size_t *full);
/* A new job (one reference), or NULL; srv_job_size then gives it n_prompts prompts and n
 * choices of each (the sequences' arrays): 0, or 1 when out of memory (srv_job_free frees
 * what was taken). */
srv_job *srv_job_new(void);
int srv_job_size(srv_job *j, int n_prompts, int n);
void srv_job_free(srv_job *j);

/* -------------------------------------------------------------- serve_api.c */
/* An API error: HTTP status, OpenAI's type and code, the parameter, a message. */
typedef struct {
    int status;
    const char *type, *code;
    char param[64], msg[512];
} api_err;
int api_fail(api_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* A request body (JSON text) for /v1/completions (chat 0) or /v1/chat/completions (chat 1)
 * as a job ready to submit: 0, or 1 with the error in *e. */
int api_job(serve *s, int chat, const char *body, size_t len, srv_job **out, api_err *e);
/* A request body for POST /v1/responses (OpenAI's Responses API: input, instructions,
 * max_output_tokens, text.format, ...) as a chat job answered in that API's shapes: 0, or 1 with
 * the error in *e. */
int api_responses_job(serve *s, const char *body, size_t len, srv_job **out, api_err *e);
/* A request body for POST /v1/embeddings (input: a string, strings, token ids or lists of
 * them; encoding_format float or base64) as a job: 0, or 1 with the error in *e. */
int api_embeddings_job(serve *s, const char *body, size_t len, srv_job **out, api_err *e);
/* Once the job is done (the engine no longer touches it: no lock needed): the whole response
 * (JSON). */
int api_response(serve *s, const srv_job *j, char **buf, size_t *len);
/* A stream's outbox: what the job made since the last take (its text, logprobs, the finishes,
 * usage, the end), copied out of the job under the engine's lock by api_stream_take and made
 * into server-sent events by api_stream_format outside it, so that building the JSON holds up
 * neither the engine nor the other connections. */
typedef struct {
    int index, prompt, opening, first, content;  /* content: a chunk with text or logprobs */
    char *text;                                  /* the new text, text_len bytes */
    size_t text_len;
    srv_lp *lps;                                 /* logprobs [lp_from, lp_to), after the one before lp_from if any */
    int lp_from, lp_to;
    const srv_lp *prompt_lps;                    /* with echo, on the opening chunk: the prompt's logprobs */
    size_t prompt_n;                             /*   (the job's, fixed once ready), prompt_n of them */
    int finish;                                  /* a finish chunk with this reason (SRV_STOP, SRV_LENGTH) */
    char *calls;                                 /* with the finish: the reply's tool calls as JSON, sent in one */
    int calls_opening;                           /*   chunk before it (calls_opening: it opens the message) */
} api_piece;
typedef struct {
    api_piece *p;
    int n, cap;
    int prompt_tokens, completion_tokens, cached_tokens;
    int done, failed, cancelled;                 /* done: the events end here ("data: [DONE]") */
    const char *err_code;
    char err[256];
} api_outbox;
/* Under the engine's lock: the job's new output into box (emptied first; marks it taken).
 * 0, or -1 out of memory. */
int api_stream_take(srv_job *j, api_outbox *box);
int api_outbox_empty(const api_outbox *box);
/* Without the lock (the job's fields it reads do not change while it runs): box's events
 * appended to buf. 1 when they end the stream, 0 if more follow, -1 out of memory. */
int api_stream_format(serve *s, srv_job *j, const api_outbox *box, char **buf, size_t *len, size_t *cap);
void api_outbox_free(api_outbox *box);
/* {"error": {...}} */
int api_error_body(const api_err *e, char **buf, size_t *len);
/* GET /v1/models, GET /v1/models/ID (NULL when id is not this model), GET /health */
char *api_models(serve *s, const char *id);
/* a name the request may give as 'model': an --alias, the model's name, any with --any-model */
int api_model_known(const serve *s, const char *name);
char *api_health(serve *s);
/* llama-server's utilities: POST /tokenize ({"content", "with_pieces"} -> {"tokens"}), POST
 * /detokenize ({"tokens"} -> {"content"}), POST /apply-template ({"messages", "tools"} ->
 * {"prompt"}): 0 with the response's JSON in *out, or 1 with the error in *e. */
int api_tokenize(serve *s, const char *body, size_t len, char **out, api_err *e);
int api_detokenize(serve *s, const char *body, size_t len, char **out, api_err *e);
int api_apply_template(serve *s, const char *body, size_t len, char **out, api_err *e);
/* GET /metrics: Prometheus' text format */
char *api_metrics(serve *s);

/* a parsed JSON value written back as compact JSON text, appended to buf */
struct sk_json;
void srv_json_dump(char **buf, size_t *len, size_t *cap, const struct sk_json *v);

/* ------------------------------------------------------------- serve_tools.c */
/* The format of tool calls: the one whose marker is a token of the vocabulary, else hermes. */
int tools_format(sk_tokenizer *tok);
/* tool_choice "required" (only < 0) or a named function (its index): the job's grammar makes
 * the reply one call of those tools in the job's format. 0, or 1 (said). */
int tools_grammar(srv_job *j, int only);
/* The calls in a reply, in the job's tools: their number (0: none, the reply is content; -1
 * out of memory), *calls a JSON list of OpenAI's tool_calls (stream: with their index), and
 * *content_end the length of the content before them. */
int tools_parse(const srv_job *j, const char *text, size_t len, size_t *content_end, char **calls, int stream);
/* How much of a reply so far can be streamed as content: none of what may become a call. */
size_t tools_hold(const srv_job *j, const char *text, size_t len);

/* -------------------------------------------------------------- serve_head.c */
enum { SRV_LEN_OK, SRV_LEN_BAD, SRV_LEN_HUGE };
/* A request head's (len bytes) first Content-Length header that libmicrohttpd would refuse:
 * SRV_LEN_BAD (not digits only) or SRV_LEN_HUGE (past 2^64), its value trimmed in *v, *n; else
 * SRV_LEN_OK. */
int srv_head_length(const char *h, size_t len, const char **v, size_t *n);

/* GET /: the chat page (server/chat.html, made a C array at build time by scripts/embed.sh) */
extern const unsigned char srv_chat_html[];
extern const unsigned long srv_chat_html_len;

/* -------------------------------------------------------------- serve_http.c */
/* Listens on --host:--port until SIGINT or SIGTERM; then stops as srv_engine_stop says. 0, or
 * 1 with the error said. */
int serve_http(serve *s);
#endif
