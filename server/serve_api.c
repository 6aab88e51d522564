/* skiplm serve's API (serve.h): OpenAI's request and response shapes. A request's JSON is
 * checked field by field (a wrong type or value names the field) and becomes a job: its
 * prompts tokenized (a chat's messages rendered by the model's chat template first), its
 * sampling options, stop strings and limits. A job's state becomes a response, or server-sent
 * events as it grows. The JSON reader is the library's own (src/base/json.h). */
#include "serve.h"
#include "base/json.h"
#include "base/utf8.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int api_fail(api_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    e->status = status; e->type = type; e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return 1;
}
#define BAD(e, param, ...) api_fail(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* ------------------------------------------------------------ writing JSON */

typedef struct { char *s; size_t len, cap; int oom; } jbuf;

static void jraw(jbuf *b, const char *s, size_t n) {
    if (!b->oom && sk_json_write_raw(&b->s, &b->len, &b->cap, s, n)) b->oom = 1;
}
static void jputs(jbuf *b, const char *s) { jraw(b, s, strlen(s)); }
__attribute__((format(printf, 2, 3))) static void jprintf(jbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) jraw(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
/* s as a JSON string, each ill-formed UTF-8 subpart as U+FFFD (a token may end inside a
 * character) */
static void jstr(jbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (sk_utf8_valid(s, n, NULL)) { if (sk_json_write_str(&b->s, &b->len, &b->cap, s, n)) b->oom = 1; return; }
    char *t = malloc(n * 3 + 1);
    if (!t) { b->oom = 1; return; }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = sk_utf8_decode(s + i, n - i, &cp);
        if (k) { memcpy(t + o, s + i, k); o += k; i += k; }
        else { memcpy(t + o, "\xEF\xBF\xBD", 3); o += 3; i += sk_utf8_subpart(s + i, n - i); }
    }
    if (sk_json_write_str(&b->s, &b->len, &b->cap, t, o)) b->oom = 1;
    free(t);
}
static void jcstr(jbuf *b, const char *s) { jstr(b, s, strlen(s)); }
static void jnum(jbuf *b, double v) {
    if (!isfinite(v)) v = v < 0 ? -9999.0 : 9999.0;      /* JSON has no infinities (OpenAI's floor is -9999) */
    jprintf(b, "%.7g", v);
}

/* a parsed value written back as JSON text (messages and tools go to the chat template so) */
static void jdump(jbuf *b, const sk_json *v) {
    switch (v->type) {
    case SK_JSON_NULL: jputs(b, "null"); break;
    case SK_JSON_BOOL: jputs(b, v->boolean ? "true" : "false"); break;
    case SK_JSON_NUM:
        if (v->num == floor(v->num) && fabs(v->num) < 9.007199254740992e15) jprintf(b, "%.0f", v->num);
        else jprintf(b, "%.17g", v->num);
        break;
    case SK_JSON_STR: jstr(b, v->str, v->str_len); break;
    case SK_JSON_ARR:
        jputs(b, "[");
        for (int i = 0; i < v->n; i++) { if (i) jputs(b, ","); jdump(b, &v->items[i]); }
        jputs(b, "]");
        break;
    case SK_JSON_OBJ:
        jputs(b, "{");
        for (int i = 0; i < v->n; i++) {
            if (i) jputs(b, ",");
            jstr(b, v->keys[i], v->key_lens[i]);
            jputs(b, ":");
            jdump(b, &v->items[i]);
        }
        jputs(b, "}");
        break;
    }
}

void srv_json_dump(char **buf, size_t *len, size_t *cap, const sk_json *v) {
    jbuf b = {*buf, *len, *cap, 0};
    jdump(&b, v);
    *buf = b.s; *len = b.len; *cap = b.cap;
}

int api_error_body(const api_err *e, char **buf, size_t *len) {
    jbuf b = {0};
    jputs(&b, "{\"error\":{\"message\":");
    jcstr(&b, e->msg);
    jputs(&b, ",\"type\":");
    jcstr(&b, e->type ? e->type : "invalid_request_error");
    jputs(&b, ",\"param\":");
    if (e->param[0]) jcstr(&b, e->param); else jputs(&b, "null");
    jputs(&b, ",\"code\":");
    if (e->code) jcstr(&b, e->code); else jputs(&b, "null");
    jputs(&b, "}}");
    if (b.oom) { free(b.s); return 1; }
    *buf = b.s; *len = b.len;
    return 0;
}

int api_model_known(const serve *s, const char *name) {
    if (s->o->any_model || !strcmp(name, s->name)) return 1;
    for (int i = 0; i < s->o->n_alias; i++) if (!strcmp(name, s->o->aliases[i])) return 1;
    return 0;
}

char *api_models(serve *s, const char *id) {
    if (id && !api_model_known(s, id)) return NULL;
    jbuf b = {0};
    if (!id) jputs(&b, "{\"object\":\"list\",\"data\":[");
    const int n = id || !s->o->n_alias ? 1 : s->o->n_alias;
    for (int i = 0; i < n; i++) {
        jputs(&b, i ? ",{\"id\":" : "{\"id\":");
        jcstr(&b, id ? id : s->o->n_alias ? s->o->aliases[i] : s->name);
        jprintf(&b, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"skiplm\",\"context_length\":%d}", s->started, s->ctx);
    }
    if (!id) jputs(&b, "]}");
    if (b.oom) { free(b.s); return NULL; }
    return b.s;
}

char *api_health(serve *s) {
    int running, queued, slots;
    srv_lock(s);
    srv_load(s, &running, &queued, &slots);
    srv_unlock(s);
    jbuf b = {0};
    jputs(&b, "{\"status\":\"ok\",\"model\":");
    jcstr(&b, s->name);
    jprintf(&b, ",\"slots\":%d,\"slots_busy\":%d,\"queued\":%d}", slots, running, queued);
    if (b.oom) { free(b.s); return NULL; }
    return b.s;
}

/* ------------------------------------------------------------ reading a request */

/* the member, or NULL when absent or null */
static const sk_json *field(const sk_json *o, const char *k) {
    const sk_json *v = sk_json_get(o, k);
    return v && v->type != SK_JSON_NULL ? v : NULL;
}

static int get_num(const sk_json *o, const char *k, double lo, double hi, float *out, api_err *e) {
    const sk_json *v = field(o, k);
    if (!v) return 0;
    if (v->type != SK_JSON_NUM) return BAD(e, k, "'%s' must be a number, not %s", k, sk_json_type_name(v->type));
    if (!(v->num >= lo && v->num <= hi)) return BAD(e, k, "'%s' must be in [%g, %g] (got %g)", k, lo, hi, v->num);
    *out = (float)v->num;
    return 0;
}

static int get_int(const sk_json *o, const char *k, double lo, double hi, long long *out, api_err *e) {
    const sk_json *v = field(o, k);
    if (!v) return 0;
    if (v->type != SK_JSON_NUM || v->num != floor(v->num))
        return BAD(e, k, "'%s' must be an integer, not %s", k, v->type == SK_JSON_NUM ? "a fraction" : sk_json_type_name(v->type));
    if (!(v->num >= lo && v->num <= hi)) return BAD(e, k, "'%s' must be in [%.0f, %.0f] (got %.0f)", k, lo, hi, v->num);
    *out = (long long)v->num;
    return 0;
}

static int get_bool(const sk_json *o, const char *k, int *out, api_err *e) {
    const sk_json *v = field(o, k);
    if (!v) return 0;
    if (v->type != SK_JSON_BOOL) return BAD(e, k, "'%s' must be true or false, not %s", k, sk_json_type_name(v->type));
    *out = v->boolean;
    return 0;
}

/* stop: a string or a list of up to 4 */
static int get_stop(const sk_json *o, srv_job *j, api_err *e) {
    const sk_json *v = field(o, "stop");
    if (!v) return 0;
    const int arr = v->type == SK_JSON_ARR, n = arr ? v->n : 1;
    if (!arr && v->type != SK_JSON_STR) return BAD(e, "stop", "'stop' must be a string or a list of strings, not %s", sk_json_type_name(v->type));
    if (n > SRV_MAX_STOP) return BAD(e, "stop", "'stop' holds at most %d strings (got %d)", SRV_MAX_STOP, n);
    for (int i = 0; i < n; i++) {
        const sk_json *t = arr ? &v->items[i] : v;
        if (t->type != SK_JSON_STR) return BAD(e, "stop", "'stop' must hold strings, not %s", sk_json_type_name(t->type));
        if (!t->str_len) return BAD(e, "stop", "a stop string must not be empty");
        if (!(j->stop[j->n_stop] = malloc(t->str_len + 1))) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(j->stop[j->n_stop], t->str, t->str_len + 1);
        j->stop_len[j->n_stop++] = t->str_len;
    }
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]} */
static int get_bias(const sk_json *o, srv_job *j, int V, api_err *e) {
    const sk_json *v = field(o, "logit_bias");
    if (!v) return 0;
    if (v->type != SK_JSON_OBJ) return BAD(e, "logit_bias", "'logit_bias' must be an object of token ids and biases");
    j->bias_id = malloc(sizeof(int32_t) * (v->n ? v->n : 1));
    j->bias = malloc(sizeof(float) * (v->n ? v->n : 1));
    if (!j->bias_id || !j->bias) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int i = 0; i < v->n; i++) {
        char *end;
        long id = strtol(v->keys[i], &end, 10);
        if (!v->keys[i][0] || *end || id < 0 || id >= V)
            return BAD(e, "logit_bias", "logit_bias: '%s' is not a token id in [0, %d)", v->keys[i], V);
        const sk_json *b = &v->items[i];
        if (b->type != SK_JSON_NUM || !(b->num >= -100 && b->num <= 100))
            return BAD(e, "logit_bias", "logit_bias: the bias of token %ld must be a number in [-100, 100]", id);
        j->bias_id[j->n_bias] = (int32_t)id;
        j->bias[j->n_bias++] = (float)b->num;
    }
    return 0;
}

static unsigned long long seed_counter;

/* what both endpoints take */
static int common_fields(serve *s, const sk_json *o, srv_job *j, int *n_out, long long *max_tokens, api_err *e) {
    const sk_json *model = field(o, "model");
    if (model && model->type != SK_JSON_STR) return BAD(e, "model", "'model' must be a string");
    if (model && !api_model_known(s, model->str))
        return api_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.200s' does not exist: this server serves '%s' (GET /v1/models; skiplm serve --alias, --any-model)",
                        model->str, s->name);
    j->sp = (sk_sampling){.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
    long long n = 1, seed = -1, top_k = 0;
    const sk_json *so = field(o, "stream_options");
    if (so && so->type != SK_JSON_OBJ) return BAD(e, "stream_options", "'stream_options' must be an object");
    if (get_bool(o, "stream", &j->stream, e) || (so && get_bool(so, "include_usage", &j->include_usage, e)) ||
        get_num(o, "temperature", 0, 1e6, &j->sp.temperature, e) || get_num(o, "top_p", 0, 1, &j->sp.top_p, e) ||
        get_int(o, "top_k", 0, 1e9, &top_k, e) || get_num(o, "min_p", 0, 1, &j->sp.min_p, e) ||
        get_num(o, "repetition_penalty", 1e-6, 1e6, &j->sp.repetition_penalty, e) ||
        get_num(o, "presence_penalty", -2, 2, &j->presence, e) || get_num(o, "frequency_penalty", -2, 2, &j->frequency, e) ||
        get_int(o, "n", 1, 128, &n, e) || get_int(o, "seed", -9.0e15, 9.0e15, &seed, e) ||
        get_int(o, "max_tokens", 0, 1e9, max_tokens, e) || get_stop(o, j, e) || get_bias(o, j, s->V, e))
        return 1;
    if (j->sp.top_p == 0.0f) j->sp.temperature = 0.0f;  /* the nucleus of one token: the most likely, as OpenAI's and llama-server's */
    j->sp.top_k = (int)top_k;
    const sk_json *sd = field(o, "seed");
    if (sd) j->seed = sd->num < 0 ? (uint64_t)(long long)sd->num : (uint64_t)sd->num;
    else j->seed = (uint64_t)time(NULL) * 1000003ull + __atomic_add_fetch(&seed_counter, 1, __ATOMIC_RELAXED) * 7919ull;
    *n_out = (int)n;
    return 0;
}

/* the prompt's ids and their checks; under text_mu */
static int encode(serve *s, const char *text, size_t len, int32_t **ids, size_t *n, api_err *e) {
    size_t cap = 0;
    *ids = NULL; *n = 0;
    pthread_mutex_lock(&s->text_mu);
    int rc = sk_tok_encode(s->tok, text, len, ids, n, &cap);
    pthread_mutex_unlock(&s->text_mu);
    if (rc) return BAD(e, "prompt", "the text cannot be tokenized: %s", sk_last_error());
    return 0;
}

/* the job sized for n_prompts prompts and n choices of each (more than --parallel run part by
 * part, as slots free) */
static int size_job(serve *s, srv_job *j, int n_prompts, int n, api_err *e) {
    (void)s;
    if ((long long)n_prompts * n > SRV_MAX_SEQS)
        return BAD(e, "n", "%d prompts x n = %d make %lld sequences, and a request may have at most %d", n_prompts, n,
                   (long long)n_prompts * n, SRV_MAX_SEQS);
    if (srv_job_size(j, n_prompts, n)) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* a completion's prompt: a string, a list of strings, a list of token ids or of such lists;
 * the job is sized for them and n choices of each */
static int completion_prompts(serve *s, const sk_json *o, srv_job *j, int n, api_err *e) {
    const sk_json *p = field(o, "prompt");
    static const sk_json empty = {.type = SK_JSON_STR, .str = "", .str_len = 0};
    if (!p) p = &empty;
    const sk_json *items = p;
    int count = 1, tokens = 0;
    if (p->type == SK_JSON_ARR) {
        if (!p->n) return BAD(e, "prompt", "'prompt' is an empty list");
        tokens = p->items[0].type == SK_JSON_NUM;
        if (tokens) count = 1;
        else { items = p->items; count = p->n; }
    } else if (p->type != SK_JSON_STR) {
        return BAD(e, "prompt", "'prompt' must be a string, a list of strings or a list of token ids, not %s", sk_json_type_name(p->type));
    }
    if (size_job(s, j, count, n, e)) return 1;
    int32_t **ids = j->prompts;
    size_t *ns = j->prompt_n;
    char **texts = j->prompt_text;
    for (int i = 0; i < count; i++) {
        const sk_json *t = tokens ? p : &items[i];
        if (t->type == SK_JSON_ARR) {                 /* token ids */
            if (!t->n) return BAD(e, "prompt", "prompt %d is an empty list of token ids", i);
            if (!(ids[i] = malloc(sizeof(int32_t) * t->n))) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            for (int k = 0; k < t->n; k++) {
                const sk_json *x = &t->items[k];
                if (x->type != SK_JSON_NUM || x->num != floor(x->num) || x->num < 0 || x->num >= s->V)
                    return BAD(e, "prompt", "prompt %d: item %d is not a token id in [0, %d)", i, k, s->V);
                ids[i][k] = (int32_t)x->num;
            }
            ns[i] = (size_t)t->n;
            int32_t *tk = ids[i];
            char *txt; size_t len;
            if (sk_tok_decode(s->tok, tk, ns[i], &txt, &len))
                return BAD(e, "prompt", "prompt %d: %s", i, sk_last_error());
            texts[i] = txt;
            continue;
        }
        if (t->type != SK_JSON_STR) return BAD(e, "prompt", "prompt %d must be a string or a list of token ids, not %s", i, sk_json_type_name(t->type));
        if (!(texts[i] = malloc(t->str_len + 1))) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(texts[i], t->str, t->str_len + 1);
        if (t->str_len) {
            if (encode(s, t->str, t->str_len, &ids[i], &ns[i], e)) return 1;
        } else {                                       /* as skiplm sample: the end-of-text token, else a newline */
            int32_t eot = sk_tok_eot(s->tok);
            if (eot >= 0) {
                if (!(ids[i] = malloc(sizeof(int32_t)))) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
                ids[i][0] = eot; ns[i] = 1;
            } else if (encode(s, "\n", 1, &ids[i], &ns[i], e)) {
                return 1;
            }
        }
        if (!ns[i]) return BAD(e, "prompt", "prompt %d makes no tokens", i);
    }
    return 0;
}

/* a message's content: a string, or a list of text parts (joined) */
static int chat_content(const sk_json *c, int i, jbuf *b, api_err *e) {
    if (c->type == SK_JSON_STR || c->type == SK_JSON_NULL) { jdump(b, c); return 0; }
    if (c->type != SK_JSON_ARR) return BAD(e, "messages", "messages[%d].content must be a string or a list of parts, not %s", i, sk_json_type_name(c->type));
    jbuf t = {0};
    for (int k = 0; k < c->n; k++) {
        const sk_json *part = &c->items[k], *ty = part->type == SK_JSON_OBJ ? field(part, "type") : NULL;
        const sk_json *tx = part->type == SK_JSON_OBJ ? field(part, "text") : NULL;
        if (!ty || ty->type != SK_JSON_STR || strcmp(ty->str, "text") || !tx || tx->type != SK_JSON_STR) {
            free(t.s);
            return BAD(e, "messages", "messages[%d].content[%d]: only text parts ({\"type\": \"text\", \"text\": ...}) are supported", i, k);
        }
        jraw(&t, tx->str, tx->str_len);
    }
    jstr(b, t.s ? t.s : "", t.len);
    free(t.s);
    return 0;
}

/* an assistant message's tool_calls for the chat template: each function's arguments, a JSON
 * string in OpenAI's format, as the object it holds (templates write them with tojson) */
static void dump_tool_calls(jbuf *b, const sk_json *tc) {
    if (tc->type != SK_JSON_ARR) { jdump(b, tc); return; }
    jputs(b, "[");
    for (int i = 0; i < tc->n; i++) {
        const sk_json *c = &tc->items[i];
        if (i) jputs(b, ",");
        if (c->type != SK_JSON_OBJ) { jdump(b, c); continue; }
        jputs(b, "{");
        for (int k = 0; k < c->n; k++) {
            const sk_json *f = &c->items[k];
            if (k) jputs(b, ",");
            jstr(b, c->keys[k], c->key_lens[k]);
            jputs(b, ":");
            if (strcmp(c->keys[k], "function") || f->type != SK_JSON_OBJ) { jdump(b, f); continue; }
            jputs(b, "{");
            for (int m = 0; m < f->n; m++) {
                const sk_json *a = &f->items[m];
                sk_json parsed;
                char err[8];
                if (m) jputs(b, ",");
                jstr(b, f->keys[m], f->key_lens[m]);
                jputs(b, ":");
                if (!strcmp(f->keys[m], "arguments") && a->type == SK_JSON_STR && !sk_json_parse(a->str, a->str_len, &parsed, err, sizeof err)) {
                    jdump(b, &parsed);
                    sk_json_free(&parsed);
                } else {
                    jdump(b, a);
                }
            }
            jputs(b, "}");
        }
        jputs(b, "}");
    }
    jputs(b, "]");
}

/* tools and tool_choice: the tools' names and parameters; "required" or a named function
 * compiles the grammar of a call */
static int tool_fields(serve *s, const sk_json *o, srv_job *j, api_err *e) {
    const sk_json *tools = field(o, "tools"), *tc = field(o, "tool_choice");
    int only = -2;                                     /* -2 auto, -1 required, else the named tool */
    const char *named = NULL;
    if (tc && tc->type == SK_JSON_STR) {
        if (!strcmp(tc->str, "none")) return 0;
        if (!strcmp(tc->str, "required")) only = -1;
        else if (strcmp(tc->str, "auto")) return BAD(e, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (tc) {
        const sk_json *f = tc->type == SK_JSON_OBJ ? field(tc, "function") : NULL, *nm = f && f->type == SK_JSON_OBJ ? field(f, "name") : NULL;
        if (!nm || nm->type != SK_JSON_STR) return BAD(e, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        named = nm->str;
    }
    if (!tools || !tools->n) {
        if (only == -1 || named) return BAD(e, "tool_choice", "'tool_choice' asks for a tool call, and there are no 'tools'");
        return 0;
    }
    if (!(j->tool_names = calloc(tools->n, sizeof(char *))) || !(j->tool_params = calloc(tools->n, sizeof(char *))))
        return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    j->n_tools = tools->n;
    for (int k = 0; k < tools->n; k++) {
        const sk_json *t = &tools->items[k], *ty = t->type == SK_JSON_OBJ ? field(t, "type") : NULL;
        const sk_json *f = t->type == SK_JSON_OBJ ? field(t, "function") : NULL;
        const sk_json *nm = f && f->type == SK_JSON_OBJ ? field(f, "name") : NULL, *pa = f && f->type == SK_JSON_OBJ ? field(f, "parameters") : NULL;
        if ((ty && (ty->type != SK_JSON_STR || strcmp(ty->str, "function"))) || !nm || nm->type != SK_JSON_STR)
            return BAD(e, "tools", "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}", k);
        if (pa && pa->type != SK_JSON_OBJ) return BAD(e, "tools", "tools[%d].function.parameters must be a JSON Schema (an object)", k);
        jbuf pb = {0};
        if (pa) jdump(&pb, pa); else jputs(&pb, "{\"type\":\"object\"}");
        if (pb.oom || !(j->tool_names[k] = strdup(nm->str))) { free(pb.s); return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }
        j->tool_params[k] = pb.s;
        if (named && !strcmp(named, nm->str)) only = k;
    }
    if (named && only < 0) return BAD(e, "tool_choice", "'tool_choice' names '%.100s', which is not among the tools", named);
    j->tools_on = 1;
    j->tool_fmt = s->tool_fmt;
    if (only == -2) return 0;
    if (j->grammar) return BAD(e, "tool_choice", "'tool_choice' %s with a JSON 'response_format' is not supported", named ? "naming a function" : "required");
    for (int k = 0; k < j->n_tools; k++) {             /* each tool's parameters alone first: an error names the tool */
        sk_jg *g = NULL;
        if ((only < 0 || k == only) && sk_jg_compile(&g, j->tool_params[k], strlen(j->tool_params[k])))
            return BAD(e, "tools", "tools[%d] (%.100s): its parameters: %s", k, j->tool_names[k], sk_last_error());
        sk_jg_free(g);
    }
    if (tools_grammar(j, only)) return BAD(e, "tools", "the tools' parameters: %s", sk_last_error());
    return 0;
}

/* a chat's text: the messages (content parts joined) and tools through the chat template */
static int chat_render(serve *s, const sk_json *o, char **text, size_t *len, api_err *e) {
    if (!s->chat)
        return BAD(e, "messages", "this model has no chat template (give skiplm serve --chat-template, or use /v1/completions)");
    const sk_json *m = field(o, "messages"), *tools = field(o, "tools");
    if (!m || m->type != SK_JSON_ARR || !m->n) return BAD(e, "messages", "'messages' must be a non-empty list of messages");
    if (tools && tools->type != SK_JSON_ARR) return BAD(e, "tools", "'tools' must be a list of tool schemas");
    jbuf b = {0}, tb = {0};
    jputs(&b, "[");
    for (int i = 0; i < m->n; i++) {
        const sk_json *msg = &m->items[i], *role = msg->type == SK_JSON_OBJ ? field(msg, "role") : NULL;
        if (!role || role->type != SK_JSON_STR) { free(b.s); return BAD(e, "messages", "messages[%d] must be an object with a 'role' string", i); }
        jputs(&b, i ? ",{" : "{");
        for (int k = 0; k < msg->n; k++) {
            if (k) jputs(&b, ",");
            jstr(&b, msg->keys[k], msg->key_lens[k]);
            jputs(&b, ":");
            if (!strcmp(msg->keys[k], "content")) { if (chat_content(&msg->items[k], i, &b, e)) { free(b.s); return 1; } }
            else if (!strcmp(msg->keys[k], "tool_calls")) dump_tool_calls(&b, &msg->items[k]);
            else jdump(&b, &msg->items[k]);
        }
        jputs(&b, "}");
    }
    jputs(&b, "]");
    if (tools) jdump(&tb, tools);
    if (b.oom || tb.oom) { free(b.s); free(tb.s); return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }
    pthread_mutex_lock(&s->text_mu);
    int rc = sk_chat_render_json(s->chat, b.s, tools ? tb.s : NULL, 1, text, len);
    char why[400];
    if (rc) snprintf(why, sizeof why, "%s", sk_last_error());
    pthread_mutex_unlock(&s->text_mu);
    free(b.s); free(tb.s);
    if (rc) return BAD(e, "messages", "the chat template refused the messages: %s", why);
    return 0;
}

/* a chat's prompt: the template's text, tokenized */
static int chat_prompt(serve *s, const sk_json *o, srv_job *j, api_err *e) {
    char *text = NULL;
    size_t len = 0;
    if (chat_render(s, o, &text, &len, e)) return 1;
    j->prompt_text[0] = text;
    if (encode(s, text, len, &j->prompts[0], &j->prompt_n[0], e)) return 1;
    if (!j->prompt_n[0]) return BAD(e, "messages", "the chat template made an empty prompt");
    return 0;
}

/* response_format: text (nothing), json_object (any JSON object) or json_schema (its schema
 * compiled to the grammar every reply follows) */
static int response_format(const sk_json *o, srv_job *j, api_err *e) {
    const sk_json *rf = field(o, "response_format");
    if (!rf) return 0;
    const sk_json *t = rf->type == SK_JSON_OBJ ? field(rf, "type") : NULL;
    if (!t || t->type != SK_JSON_STR)
        return BAD(e, "response_format", "'response_format' must be an object with a 'type': text, json_object or json_schema");
    if (!strcmp(t->str, "text")) return 0;
    jbuf b = {0};
    if (!strcmp(t->str, "json_schema")) {
        const sk_json *js = field(rf, "json_schema");
        if (!js || js->type != SK_JSON_OBJ)
            return BAD(e, "response_format", "response_format json_schema needs a 'json_schema' object ({\"name\", \"schema\", \"strict\"})");
        const sk_json *nm = field(js, "name"), *sc = field(js, "schema"), *st = field(js, "strict");
        if (nm && nm->type != SK_JSON_STR) return BAD(e, "response_format", "'response_format.json_schema.name' must be a string");
        if (st && st->type != SK_JSON_BOOL) return BAD(e, "response_format", "'response_format.json_schema.strict' must be true or false");
        if (sc && sc->type != SK_JSON_OBJ && sc->type != SK_JSON_BOOL)
            return BAD(e, "response_format", "'response_format.json_schema.schema' must be a JSON Schema (an object)");
        if (sc) jdump(&b, sc);
        if (b.oom) { free(b.s); return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }
    } else if (strcmp(t->str, "json_object")) {
        return BAD(e, "response_format", "response_format type '%.100s' is not one of text, json_object, json_schema", t->str);
    }
    int rc = sk_jg_compile(&j->grammar, b.s, b.len);
    free(b.s);
    if (rc) return BAD(e, "response_format", "response_format's schema: %s", sk_last_error());
    return 0;
}

static void job_id(srv_job *j, const char *prefix) {
    static unsigned long long counter;
    unsigned long long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    j->created = (long)time(NULL);
    snprintf(j->id, sizeof j->id, "%s-%lx%04llx", prefix, (unsigned long)j->created, k);
}

int api_job(serve *s, int chat, const char *body, size_t len, srv_job **out, api_err *e) {
    sk_json o;
    char perr[200];
    *out = NULL;
    if (sk_json_parse(body, len, &o, perr, sizeof perr)) return BAD(e, NULL, "the body is not valid JSON: %s", perr);
    if (o.type != SK_JSON_OBJ) { sk_json_free(&o); return BAD(e, NULL, "the body must be a JSON object"); }
    int n = 1, rc = 1, lp_on = 0;
    long long max_tokens = -1, logprobs = -1, top = 0, best_of = 1;
    srv_job *j = srv_job_new();
    if (!j) { api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); goto out; }
    j->chat = chat;
    if (common_fields(s, &o, j, &n, &max_tokens, e) || response_format(&o, j, e)) goto out;
    if (chat) {
        long long mct = -1;
        if (get_int(&o, "max_completion_tokens", 0, 1e9, &mct, e) || get_bool(&o, "logprobs", &lp_on, e) ||
            get_int(&o, "top_logprobs", 0, SRV_MAX_TOP, &top, e))
            goto out;
        if (mct >= 0) max_tokens = mct;
        if (field(&o, "top_logprobs") && !lp_on) { BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true"); goto out; }
        logprobs = lp_on ? top : -1;
        if (size_job(s, j, 1, n, e) || chat_prompt(s, &o, j, e) || tool_fields(s, &o, j, e)) goto out;
    } else {
        const sk_json *sfx = field(&o, "suffix");
        if (get_bool(&o, "echo", &j->echo, e) || get_int(&o, "logprobs", 0, 5, &logprobs, e) || get_int(&o, "best_of", 1, 128, &best_of, e))
            goto out;
        if (sfx && (sfx->type != SK_JSON_STR || sfx->str_len)) { BAD(e, "suffix", "'suffix' (insertion) is not supported"); goto out; }
        if (best_of != 1 && best_of != n) { BAD(e, "best_of", "'best_of' other than 'n' is not supported"); goto out; }
        if (completion_prompts(s, &o, j, n, e)) goto out;
    }
    j->logprobs = (int)logprobs;
    if (j->echo && logprobs >= 0 && !(j->prompt_lps = calloc(j->n_prompts, sizeof *j->prompt_lps))) {
        api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    /* the context: every prompt, and the reply's room */
    size_t longest = 0;
    for (int p = 0; p < j->n_prompts; p++) longest = j->prompt_n[p] > longest ? j->prompt_n[p] : longest;
    if (longest >= (size_t)s->ctx) {
        api_fail(e, 400, "invalid_request_error", "context_length_exceeded", chat ? "messages" : "prompt",
                 "the prompt has %zu tokens, and the context holds %d (--ctx): nothing is left for a reply", longest, s->ctx);
        goto out;
    }
    const long long room = (long long)s->ctx - (long long)longest;
    if (max_tokens > room) {
        api_fail(e, 400, "invalid_request_error", "context_length_exceeded", chat && field(&o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                 "the context holds %d tokens (--ctx), and %lld were asked for (%zu in the prompt, %lld for the reply)", s->ctx,
                 (long long)longest + max_tokens, longest, max_tokens);
        goto out;
    }
    j->max_tokens = (int)(max_tokens >= 0 ? max_tokens : chat ? room : room < 16 ? room : 16);   /* OpenAI's defaults */
    job_id(j, chat ? "chatcmpl" : "cmpl");
    *out = j; j = NULL;
    rc = 0;
out:
    srv_job_free(j);
    sk_json_free(&o);
    return rc;
}

/* ------------------------------------------------------------ responses */

static const char *finish_name(int f) { return f == SRV_STOP ? "\"stop\"" : f == SRV_LENGTH ? "\"length\"" : "null"; }

static void token_bytes(jbuf *b, serve *s, int32_t id) {
    size_t len = 0;
    const char *t = sk_tok_decode_one(s->tok, id, &len);
    jputs(b, "\"bytes\":[");
    for (size_t i = 0; t && i < len; i++) jprintf(b, i ? ",%u" : "%u", (unsigned char)t[i]);
    jputs(b, "]");
}
static void token_str(jbuf *b, serve *s, int32_t id) {
    size_t len = 0;
    const char *t = sk_tok_decode_one(s->tok, id, &len);
    jstr(b, t ? t : "", t ? len : 0);
}

/* logprobs of tokens [from, to) of q: the chat shape ({"content": [...]}) or the completions
 * one (tokens, token_logprobs, top_logprobs, text_offset; base: the text's offset), after those
 * of the prompt's np tokens pl (echo: the first one's logprob and alternatives are null) */
static void logprobs_json(jbuf *b, serve *s, const srv_job *j, const srv_seq *q, int from, int to, size_t base,
                          const srv_lp *pl, size_t np) {
    if (j->logprobs < 0) { jputs(b, "null"); return; }
    if (j->chat) {
        jputs(b, "{\"content\":[");
        for (int i = from; i < to; i++) {
            const srv_lp *l = &q->lps[i];
            jputs(b, i > from ? ",{\"token\":" : "{\"token\":");
            token_str(b, s, l->id);
            jputs(b, ",\"logprob\":"); jnum(b, l->lp); jputs(b, ",");
            token_bytes(b, s, l->id);
            jputs(b, ",\"top_logprobs\":[");
            for (int k = 0; k < l->n_top; k++) {
                jputs(b, k ? ",{\"token\":" : "{\"token\":");
                token_str(b, s, l->top_id[k]);
                jputs(b, ",\"logprob\":"); jnum(b, l->top_lp[k]); jputs(b, ",");
                token_bytes(b, s, l->top_id[k]);
                jputs(b, "}");
            }
            jputs(b, "]}");
        }
        jputs(b, "],\"refusal\":null}");
        return;
    }
    jputs(b, "{\"tokens\":[");
    for (size_t i = 0; i < np; i++) { if (i) jputs(b, ","); token_str(b, s, pl[i].id); }
    for (int i = from; i < to; i++) { if (i > from || np) jputs(b, ","); token_str(b, s, q->lps[i].id); }
    jputs(b, "],\"token_logprobs\":[");
    for (size_t i = 0; i < np; i++) { if (i) jputs(b, ","); if (isnan(pl[i].lp)) jputs(b, "null"); else jnum(b, pl[i].lp); }
    for (int i = from; i < to; i++) { if (i > from || np) jputs(b, ","); jnum(b, q->lps[i].lp); }
    jputs(b, "],\"top_logprobs\":[");
    for (size_t i = 0; i < np; i++) {
        if (i) jputs(b, ",");
        if (isnan(pl[i].lp)) { jputs(b, "null"); continue; }
        jputs(b, "{");
        for (int k = 0; k < pl[i].n_top; k++) {
            if (k) jputs(b, ",");
            token_str(b, s, pl[i].top_id[k]);
            jputs(b, ":"); jnum(b, pl[i].top_lp[k]);
        }
        jputs(b, "}");
    }
    for (int i = from; i < to; i++) {
        const srv_lp *l = &q->lps[i];
        jputs(b, i > from || np ? ",{" : "{");
        for (int k = 0; k < l->n_top; k++) {
            if (k) jputs(b, ",");
            token_str(b, s, l->top_id[k]);
            jputs(b, ":"); jnum(b, l->top_lp[k]);
        }
        jputs(b, "}");
    }
    jputs(b, "],\"text_offset\":[");
    for (size_t i = 0; i < np; i++) jprintf(b, i ? ",%zu" : "%zu", i ? pl[i - 1].end : 0);
    for (int i = from; i < to; i++) jprintf(b, i > from || np ? ",%zu" : "%zu", base + (i ? q->lps[i - 1].end : 0));
    jputs(b, "]}");
}

static void usage_json(jbuf *b, const srv_job *j) {
    jprintf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
            "\"prompt_tokens_details\":{\"cached_tokens\":%d}}", j->prompt_tokens, j->completion_tokens,
            j->prompt_tokens + j->completion_tokens, j->cached_tokens);
}

static void head_json(jbuf *b, serve *s, const srv_job *j, const char *object) {
    jputs(b, "{\"id\":");
    jcstr(b, j->id);
    jprintf(b, ",\"object\":\"%s\",\"created\":%ld,\"model\":", object, j->created);
    jcstr(b, s->name);
    jputs(b, ",\"system_fingerprint\":\"skiplm\",\"choices\":[");
}

static void resp_object(jbuf *b, serve *s, const srv_job *j, const char *text, size_t len, int finish, int pt, int ct, int cached);

static void embeddings_json(jbuf *b, serve *s, const srv_job *j);

int api_response(serve *s, const srv_job *j, char **buf, size_t *len) {
    jbuf b = {0};
    if (j->embed) {
        embeddings_json(&b, s, j);
        if (b.oom) { free(b.s); return 1; }
        *buf = b.s; *len = b.len;
        return 0;
    }
    if (j->responses) {
        const srv_seq *q = &j->seqs[0];
        resp_object(&b, s, j, q->text ? q->text : "", q->len, q->finish, j->prompt_tokens, j->completion_tokens, j->cached_tokens);
        if (b.oom) { free(b.s); return 1; }
        *buf = b.s; *len = b.len;
        return 0;
    }
    head_json(&b, s, j, j->chat ? "chat.completion" : "text_completion");
    for (int i = 0; i < j->n_seq; i++) {
        const srv_seq *q = &j->seqs[i];
        const char *pt = j->prompt_text[q->prompt];
        jprintf(&b, "%s{\"index\":%d,", i ? "," : "", q->index);
        char *calls = NULL;
        size_t cend = q->len;
        const int nc = j->chat && q->finish == SRV_STOP ? tools_parse(j, q->text, q->len, &cend, &calls, 0) : 0;
        if (nc < 0) b.oom = 1;
        if (j->chat) {
            jputs(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
            int blank = 1;
            for (size_t k = 0; k < cend && blank; k++) blank = q->text[k] == ' ' || q->text[k] == '\n' || q->text[k] == '\t' || q->text[k] == '\r';
            if (nc > 0 && blank) jputs(&b, "null");
            else jstr(&b, q->text ? q->text : "", cend);
            if (nc > 0) { jputs(&b, ",\"tool_calls\":"); jputs(&b, calls); }
            jputs(&b, "},");
        } else {
            jputs(&b, "\"text\":");
            if (j->echo && pt) {
                jbuf t = {0};
                jraw(&t, pt, strlen(pt));
                jraw(&t, q->text ? q->text : "", q->len);
                jstr(&b, t.s ? t.s : "", t.len);
                b.oom |= t.oom;
                free(t.s);
            } else {
                jstr(&b, q->text ? q->text : "", q->len);
            }
            jputs(&b, ",");
        }
        jputs(&b, "\"logprobs\":");
        const srv_lp *pl = j->prompt_lps ? j->prompt_lps[q->prompt] : NULL;
        logprobs_json(&b, s, j, q, 0, q->n_lp, j->echo && pt ? strlen(pt) : 0, pl, pl ? j->prompt_n[q->prompt] : 0);
        jprintf(&b, ",\"finish_reason\":%s}", nc > 0 ? "\"tool_calls\"" : finish_name(q->finish));
        free(calls);
    }
    jputs(&b, "],");
    usage_json(&b, j);
    jputs(&b, "}");
    if (b.oom) { free(b.s); return 1; }
    *buf = b.s; *len = b.len;
    return 0;
}

/* the bytes of q's text that can go out now: all once it ended; before, none that a stop
 * string might still claim, and no character cut in two */
static size_t sendable(const srv_job *j, const srv_seq *q) {
    if (q->finish) {
        size_t cend = q->len;
        char *calls = NULL;
        if (q->finish == SRV_STOP && tools_parse(j, q->text, q->len, &cend, &calls, 1) > 0 && cend < q->sent) cend = q->sent;
        free(calls);
        return cend;
    }
    size_t hold = 0;
    for (int k = 0; k < j->n_stop; k++)
        for (size_t m = j->stop_len[k] - 1; m > hold; m--)
            if (m <= q->len && !memcmp(q->text + q->len - m, j->stop[k], m)) { hold = m; break; }
    size_t end = q->len - hold;
    const size_t tool = tools_hold(j, q->text, q->len);   /* nothing that may become a tool call */
    if (tool < end) end = tool < q->sent ? q->sent : tool;
    for (size_t back = 1; back <= 3 && back <= end; back++) {
        unsigned char c = (unsigned char)q->text[end - back];
        if ((c & 0xC0) == 0x80) continue;              /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > back) end -= back;                  /* an incomplete character waits */
        break;
    }
    return end;
}

static void chunk(jbuf *b, serve *s, const srv_job *j) {
    jputs(b, "data: ");
    head_json(b, s, j, j->chat ? "chat.completion.chunk" : "text_completion");
}

static api_piece *piece(api_outbox *box, const srv_seq *q) {
    if (box->n == box->cap) {
        int cap = box->cap ? 2 * box->cap : 4;
        api_piece *p = realloc(box->p, sizeof *p * (size_t)cap);
        if (!p) return NULL;
        box->p = p; box->cap = cap;
    }
    api_piece *p = &box->p[box->n++];
    memset(p, 0, sizeof *p);
    p->index = q->index; p->prompt = q->prompt;
    return p;
}

void api_outbox_free(api_outbox *box) {
    for (int i = 0; i < box->n; i++) { free(box->p[i].text); free(box->p[i].lps); free(box->p[i].calls); }
    free(box->p);
    memset(box, 0, sizeof *box);
}

int api_outbox_empty(const api_outbox *box) { return box->n == 0 && !box->done; }

int api_stream_take(srv_job *j, api_outbox *box) {
    api_outbox_free(box);
    int all_sent = 1;
    for (int i = 0; i < j->n_seq; i++) {
        srv_seq *q = &j->seqs[i];
        const size_t end = sendable(j, q);
        int lp_to = q->lp_sent;
        while (lp_to < q->n_lp && q->lps[lp_to].end <= end) lp_to++;
        if (q->finish) lp_to = q->n_lp;
        const int opening = q->streamed == SRV_NONE, first = j->chat && opening;
        if (opening && j->prompt_lps && !j->prompt_lps_ready && j->state != SRV_DONE) { all_sent = 0; continue; }   /* echo waits for the prompt's logprobs */
        const srv_lp *pl = opening && j->prompt_lps_ready ? j->prompt_lps[q->prompt] : NULL;
        const int text = end > q->sent || lp_to > q->lp_sent || (j->echo && opening);
        const int finish = q->finish && j->state == SRV_DONE && !j->failed && q->streamed != SRV_FINISHED;
        if (first || text || finish) {
            api_piece *p = piece(box, q);
            if (!p) return -1;
            if (first || text) {
                const int lp0 = q->lp_sent > 0 ? q->lp_sent - 1 : 0;   /* the one before: its end is the text offset */
                p->content = 1; p->opening = opening; p->first = first;
                p->text_len = end - q->sent;
                p->text = malloc(p->text_len + 1);
                p->lps = lp_to > lp0 ? malloc(sizeof *p->lps * (size_t)(lp_to - lp0)) : NULL;
                if (!p->text || (lp_to > lp0 && !p->lps)) return -1;
                if (p->text_len) memcpy(p->text, q->text + q->sent, p->text_len);
                if (lp_to > lp0) memcpy(p->lps, q->lps + lp0, sizeof *p->lps * (size_t)(lp_to - lp0));
                p->lp_from = q->lp_sent - lp0; p->lp_to = lp_to - lp0;
                p->prompt_lps = pl; p->prompt_n = pl ? j->prompt_n[q->prompt] : 0;
                q->streamed = SRV_OPENED;
                q->sent = end; q->lp_sent = lp_to;
                while (q->ends && q->sent_tokens < q->made && q->ends[q->sent_tokens] <= q->sent) q->sent_tokens++;
            }
            if (finish) {
                size_t cend;
                const int nc = j->chat && q->finish == SRV_STOP ? tools_parse(j, q->text, q->len, &cend, &p->calls, 1) : 0;
                if (nc < 0) return -1;
                if (nc == 0) { free(p->calls); p->calls = NULL; }
                p->calls_opening = q->streamed == SRV_NONE;
                p->finish = q->finish;
                q->streamed = SRV_FINISHED;
            }
        }
        all_sent &= q->streamed == SRV_FINISHED;
    }
    box->prompt_tokens = j->prompt_tokens; box->completion_tokens = j->completion_tokens; box->cached_tokens = j->cached_tokens;
    if (j->state == SRV_DONE && (all_sent || j->failed)) {
        box->done = 1; box->failed = j->failed; box->cancelled = j->cancelled; box->err_code = j->err_code;
        snprintf(box->err, sizeof box->err, "%s", j->err);
    }
    return 0;
}

static void usage_box(jbuf *b, const api_outbox *box) {
    srv_job u;
    memset(&u, 0, sizeof u);
    u.prompt_tokens = box->prompt_tokens; u.completion_tokens = box->completion_tokens; u.cached_tokens = box->cached_tokens;
    usage_json(b, &u);
}

static void resp_stream(jbuf *b, serve *s, srv_job *j, const api_outbox *box);

int api_stream_format(serve *s, srv_job *j, const api_outbox *box, char **buf, size_t *len, size_t *cap) {
    jbuf b = {*buf, *len, *cap, 0};
    if (j->responses) {
        resp_stream(&b, s, j, box);
        *buf = b.s; *len = b.len; *cap = b.cap;
        return b.oom ? -1 : box->done;
    }
    for (int i = 0; i < box->n; i++) {
        const api_piece *p = &box->p[i];
        if (p->content) {
            srv_seq q;                                  /* the piece's logprobs as logprobs_json reads them */
            memset(&q, 0, sizeof q);
            q.lps = p->lps;
            chunk(&b, s, j);
            jprintf(&b, "{\"index\":%d,", p->index);
            if (j->chat) {
                jputs(&b, p->first ? "\"delta\":{\"role\":\"assistant\",\"content\":" : "\"delta\":{\"content\":");
                jstr(&b, p->text, p->text_len);
                jputs(&b, "},");
            } else {
                jbuf t = {0};
                const char *pt = j->prompt_text[p->prompt];
                if (j->echo && p->opening && pt) jraw(&t, pt, strlen(pt));
                jraw(&t, p->text, p->text_len);
                jputs(&b, "\"text\":");
                jstr(&b, t.s ? t.s : "", t.len);
                b.oom |= t.oom;
                free(t.s);
                jputs(&b, ",");
            }
            jputs(&b, "\"logprobs\":");
            logprobs_json(&b, s, j, &q, p->lp_from, p->lp_to, 0, p->prompt_lps, p->prompt_n);
            jputs(&b, ",\"finish_reason\":null}]}\n\n");
        }
        if (p->finish) {
            if (p->calls) {                             /* the calls, whole, in one chunk */
                chunk(&b, s, j);
                jprintf(&b, "{\"index\":%d,\"delta\":{%s\"tool_calls\":", p->index, p->calls_opening ? "\"role\":\"assistant\"," : "");
                jputs(&b, p->calls);
                jputs(&b, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            }
            chunk(&b, s, j);
            jprintf(&b, "{\"index\":%d,%s\"logprobs\":null,\"finish_reason\":%s}],", p->index, j->chat ? "\"delta\":{}," : "\"text\":\"\",",
                    p->calls ? "\"tool_calls\"" : finish_name(p->finish));
            usage_box(&b, box);
            jputs(&b, "}\n\n");
        }
    }
    if (box->done) {
        if (box->failed) {
            api_err e;
            char *eb; size_t el;
            api_fail(&e, box->cancelled ? 499 : 503, "server_error", box->err_code, NULL, "%s", box->err);
            if (!api_error_body(&e, &eb, &el)) { jputs(&b, "data: "); jraw(&b, eb, el); jputs(&b, "\n\n"); free(eb); }
        } else if (j->include_usage) {
            chunk(&b, s, j);
            jputs(&b, "],");
            usage_box(&b, box);
            jputs(&b, "}\n\n");
        }
        jputs(&b, "data: [DONE]\n\n");
    }
    *buf = b.s; *len = b.len; *cap = b.cap;
    return b.oom ? -1 : box->done;
}

/* ------------------------------------------------------------ the Responses API */

/* an error about field `from` names `to` instead (param, and the message's 'from') */
static void rename_field(api_err *e, const char *from, const char *to) {
    if (strcmp(e->param, from)) return;
    snprintf(e->param, sizeof e->param, "%s", to);
    char quoted[40], *at;
    snprintf(quoted, sizeof quoted, "'%s'", from);
    if ((at = strstr(e->msg, quoted))) {
        char rest[sizeof e->msg];
        snprintf(rest, sizeof rest, "%s", at + strlen(quoted));
        snprintf(at, sizeof e->msg - (size_t)(at - e->msg), "'%s'%s", to, rest);
    }
}

static int body_object(const char *body, size_t len, sk_json *o, api_err *e);

/* an input item's content: a string, or a list of text parts (input_text, output_text, text) */
static int resp_content(const sk_json *c, int i, jbuf *b, api_err *e) {
    if (c->type == SK_JSON_STR) { jdump(b, c); return 0; }
    if (c->type != SK_JSON_ARR) return BAD(e, "input", "input[%d].content must be a string or a list of text parts, not %s", i, sk_json_type_name(c->type));
    jbuf t = {0};
    for (int k = 0; k < c->n; k++) {
        const sk_json *part = &c->items[k], *ty = part->type == SK_JSON_OBJ ? field(part, "type") : NULL;
        const sk_json *tx = part->type == SK_JSON_OBJ ? field(part, "text") : NULL;
        if (!ty || ty->type != SK_JSON_STR || (strcmp(ty->str, "input_text") && strcmp(ty->str, "output_text") && strcmp(ty->str, "text")) ||
            !tx || tx->type != SK_JSON_STR) {
            free(t.s);
            return BAD(e, "input", "input[%d].content[%d]: only text parts ({\"type\": \"input_text\", \"text\": ...}) are supported", i, k);
        }
        jraw(&t, tx->str, tx->str_len);
    }
    jstr(b, t.s ? t.s : "", t.len);
    free(t.s);
    return 0;
}

/* copies member k of o into b as "name": value (when present) */
static void resp_copy(jbuf *b, const sk_json *o, const char *k, const char *name) {
    const sk_json *v = field(o, k);
    if (!v) return;
    jputs(b, ",");
    jcstr(b, name);
    jputs(b, ":");
    jdump(b, v);
}

int api_responses_job(serve *s, const char *body, size_t len, srv_job **out, api_err *e) {
    sk_json o;
    *out = NULL;
    if (body_object(body, len, &o, e)) return 1;
    jbuf b = {0};
    int rc = 1;
    const sk_json *in = field(&o, "input"), *ins = field(&o, "instructions"), *tx = field(&o, "text"), *tools = field(&o, "tools");
    const sk_json *fmt = tx && tx->type == SK_JSON_OBJ ? field(tx, "format") : NULL;
    if (tools && (tools->type != SK_JSON_ARR || tools->n)) { BAD(e, "tools", "'tools' on /v1/responses are not supported (POST /v1/chat/completions takes them)"); goto done; }
    if (field(&o, "previous_response_id")) { BAD(e, "previous_response_id", "'previous_response_id' is not supported: the server keeps no responses (send the whole conversation as input)"); goto done; }
    if (ins && ins->type != SK_JSON_STR) { BAD(e, "instructions", "'instructions' must be a string"); goto done; }
    if (!in || (in->type != SK_JSON_STR && in->type != SK_JSON_ARR) || (in->type == SK_JSON_ARR && !in->n)) {
        BAD(e, "input", "'input' must be a string or a non-empty list of messages");
        goto done;
    }
    if (tx && tx->type != SK_JSON_OBJ) { BAD(e, "text", "'text' must be an object ({\"format\": ...})"); goto done; }
    if (fmt && fmt->type != SK_JSON_OBJ) { BAD(e, "text.format", "'text.format' must be an object"); goto done; }
    /* the same request as a chat completion's */
    jputs(&b, "{\"messages\":[");
    int nm = 0;
    if (ins) { jputs(&b, "{\"role\":\"system\",\"content\":"); jdump(&b, ins); jputs(&b, "}"); nm++; }
    if (in->type == SK_JSON_STR) {
        jputs(&b, nm++ ? ",{\"role\":\"user\",\"content\":" : "{\"role\":\"user\",\"content\":");
        jdump(&b, in);
        jputs(&b, "}");
    }
    for (int i = 0; in->type == SK_JSON_ARR && i < in->n; i++) {
        const sk_json *it = &in->items[i], *ty = it->type == SK_JSON_OBJ ? field(it, "type") : NULL;
        const sk_json *role = it->type == SK_JSON_OBJ ? field(it, "role") : NULL, *c = it->type == SK_JSON_OBJ ? field(it, "content") : NULL;
        if ((ty && (ty->type != SK_JSON_STR || strcmp(ty->str, "message"))) || !role || role->type != SK_JSON_STR || !c) {
            BAD(e, "input", "input[%d] must be a message ({\"role\", \"content\"}): %s items are not supported", i,
                ty && ty->type == SK_JSON_STR ? ty->str : "other");
            goto done;
        }
        jputs(&b, nm++ ? ",{\"role\":" : "{\"role\":");
        jcstr(&b, !strcmp(role->str, "developer") ? "system" : role->str);   /* OpenAI's developer messages are system ones */
        jputs(&b, ",\"content\":");
        if (resp_content(c, i, &b, e)) goto done;
        jputs(&b, "}");
    }
    jputs(&b, "]");
    resp_copy(&b, &o, "model", "model");
    resp_copy(&b, &o, "stream", "stream");
    resp_copy(&b, &o, "max_output_tokens", "max_tokens");
    static const char *same[] = {"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "stop", "presence_penalty",
                                 "frequency_penalty"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) resp_copy(&b, &o, same[k], same[k]);
    if (fmt) {                                         /* text.format is response_format, flattened */
        const sk_json *ft = field(fmt, "type");
        if (!ft || ft->type != SK_JSON_STR) { BAD(e, "text.format", "'text.format' needs a 'type': text, json_object or json_schema"); goto done; }
        jputs(&b, ",\"response_format\":{\"type\":");
        jdump(&b, ft);
        if (!strcmp(ft->str, "json_schema")) {
            jputs(&b, ",\"json_schema\":{\"name\":\"r\"");
            resp_copy(&b, fmt, "name", "name");
            resp_copy(&b, fmt, "schema", "schema");
            resp_copy(&b, fmt, "strict", "strict");
            jputs(&b, "}");
        }
        jputs(&b, "}");
    }
    jputs(&b, "}");
    if (b.oom) { api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); goto done; }
    if (api_job(s, 1, b.s, b.len, out, e)) {          /* an error names the Responses API's field */
        static const char *names[][2] = {{"max_tokens", "max_output_tokens"}, {"response_format", "text.format"}, {"messages", "input"}};
        for (size_t k = 0; k < sizeof names / sizeof *names; k++) rename_field(e, names[k][0], names[k][1]);
        goto done;
    }
    (*out)->responses = 1;
    job_id(*out, "resp");
    (*out)->id[4] = '_';                               /* resp_..., as OpenAI's */
    rc = 0;
done:
    free(b.s);
    sk_json_free(&o);
    return rc;
}

static void resp_usage(jbuf *b, int pt, int ct, int cached) {
    jprintf(b, "\"usage\":{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},\"output_tokens\":%d,"
            "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%d}", pt, cached, ct, pt + ct);
}

/* the output message (text NULL: in progress, no content yet) */
static void resp_message(jbuf *b, const srv_job *j, const char *text, size_t len) {
    jprintf(b, "{\"type\":\"message\",\"id\":\"msg_%s\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", j->id + 5,
            text ? "completed" : "in_progress");
    if (text) { jputs(b, "{\"type\":\"output_text\",\"text\":"); jstr(b, text, len); jputs(b, ",\"annotations\":[],\"logprobs\":[]}"); }
    jputs(b, "]}");
}

/* the response object: in progress (text NULL), or ended with finish and the usage */
static void resp_object(jbuf *b, serve *s, const srv_job *j, const char *text, size_t len, int finish, int pt, int ct, int cached) {
    const char *status = !text ? "in_progress" : finish == SRV_LENGTH ? "incomplete" : "completed";
    jputs(b, "{\"id\":");
    jcstr(b, j->id);
    jprintf(b, ",\"object\":\"response\",\"created_at\":%ld,\"status\":\"%s\",\"error\":null,\"incomplete_details\":%s,\"model\":", j->created,
            status, text && finish == SRV_LENGTH ? "{\"reason\":\"max_output_tokens\"}" : "null");
    jcstr(b, s->name);
    jputs(b, ",\"output\":[");
    if (text) resp_message(b, j, text, len);
    jprintf(b, "],\"parallel_tool_calls\":false,\"tool_choice\":\"none\",\"tools\":[],\"max_output_tokens\":%d,\"temperature\":", j->max_tokens);
    jnum(b, j->sp.temperature);
    jputs(b, ",\"top_p\":");
    jnum(b, j->sp.top_p);
    jprintf(b, ",\"text\":{\"format\":{\"type\":\"%s\"}},", j->grammar ? "json_schema" : "text");
    if (text) resp_usage(b, pt, ct, cached); else jputs(b, "\"usage\":null");
    jputs(b, "}");
}

/* one server-sent event of a Responses stream: "event: TYPE" and its data, numbered */
static void resp_event(jbuf *b, srv_job *j, const char *type) {
    jprintf(b, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type, j->events++);
}

static void resp_stream(jbuf *b, serve *s, srv_job *j, const api_outbox *box) {
    char item[64];
    snprintf(item, sizeof item, "\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0", j->id + 5);
    for (int i = 0; i < box->n; i++) {
        const api_piece *p = &box->p[i];
        if (p->index) continue;                        /* one choice */
        if (p->content && p->opening) {
            resp_event(b, j, "response.created");
            jputs(b, ",\"response\":"); resp_object(b, s, j, NULL, 0, 0, 0, 0, 0); jputs(b, "}\n\n");
            resp_event(b, j, "response.in_progress");
            jputs(b, ",\"response\":"); resp_object(b, s, j, NULL, 0, 0, 0, 0, 0); jputs(b, "}\n\n");
            resp_event(b, j, "response.output_item.added");
            jputs(b, ",\"output_index\":0,\"item\":"); resp_message(b, j, NULL, 0); jputs(b, "}\n\n");
            resp_event(b, j, "response.content_part.added");
            jprintf(b, ",%s,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}\n\n", item);
        }
        if (p->content && p->text_len) {
            resp_event(b, j, "response.output_text.delta");
            jprintf(b, ",%s,\"delta\":", item);
            jstr(b, p->text, p->text_len);
            jputs(b, ",\"logprobs\":[]}\n\n");
        }
        if (p->finish) {                               /* the job is done: its text no longer changes */
            const srv_seq *q = &j->seqs[0];
            const char *t = q->text ? q->text : "";
            resp_event(b, j, "response.output_text.done");
            jprintf(b, ",%s,\"text\":", item);
            jstr(b, t, q->len);
            jputs(b, ",\"logprobs\":[]}\n\n");
            resp_event(b, j, "response.content_part.done");
            jprintf(b, ",%s,\"part\":{\"type\":\"output_text\",\"text\":", item);
            jstr(b, t, q->len);
            jputs(b, ",\"annotations\":[]}}\n\n");
            resp_event(b, j, "response.output_item.done");
            jputs(b, ",\"output_index\":0,\"item\":"); resp_message(b, j, t, q->len); jputs(b, "}\n\n");
            resp_event(b, j, p->finish == SRV_LENGTH ? "response.incomplete" : "response.completed");
            jputs(b, ",\"response\":");
            resp_object(b, s, j, t, q->len, p->finish, box->prompt_tokens, box->completion_tokens, box->cached_tokens);
            jputs(b, "}\n\n");
        }
    }
    if (box->done && box->failed) {
        resp_event(b, j, "error");
        jputs(b, ",\"code\":");
        jcstr(b, box->err_code ? box->err_code : "server_error");
        jputs(b, ",\"message\":");
        jcstr(b, box->err);
        jputs(b, ",\"param\":null}\n\n");
    }
}

/* ------------------------------------------------------------ embeddings */

int api_embeddings_job(serve *s, const char *body, size_t len, srv_job **out, api_err *e) {
    sk_json o;
    *out = NULL;
    if (body_object(body, len, &o, e)) return 1;
    int rc = 1;
    srv_job *j = srv_job_new();
    if (!j) { api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); goto done; }
    const sk_json *model = field(&o, "model"), *in = field(&o, "input"), *ef = field(&o, "encoding_format"), *dims = field(&o, "dimensions");
    if (model && model->type != SK_JSON_STR) { BAD(e, "model", "'model' must be a string"); goto done; }
    if (model && !api_model_known(s, model->str)) {
        api_fail(e, 404, "invalid_request_error", "model_not_found", "model", "The model '%.200s' does not exist: this server serves '%s'", model->str, s->name);
        goto done;
    }
    if (ef && (ef->type != SK_JSON_STR || (strcmp(ef->str, "float") && strcmp(ef->str, "base64")))) {
        BAD(e, "encoding_format", "'encoding_format' must be float or base64");
        goto done;
    }
    const int C = sk_model_config(s->m)->n_embd;
    if (dims && (dims->type != SK_JSON_NUM || dims->num != C)) {
        BAD(e, "dimensions", "'dimensions' must be the model's width, %d: the embeddings are not shortened", C);
        goto done;
    }
    if (!in) { BAD(e, "input", "'input' must be a string, a list of strings, a list of token ids or a list of such lists"); goto done; }
    j->base64 = ef && !strcmp(ef->str, "base64");
    j->embed = 1;
    if (in->type == SK_JSON_ARR && !in->n) { BAD(e, "input", "'input' is an empty list"); goto done; }
    {
        /* the prompts as for /v1/completions: the same shapes, the same checks */
        const char *keys[1] = {"prompt"};
        size_t klen[1] = {6};
        sk_json p = {.type = SK_JSON_OBJ, .n = 1, .keys = (char **)keys, .key_lens = klen, .items = (sk_json *)in};
        if (completion_prompts(s, &p, j, 1, e)) {
            rename_field(e, "prompt", "input");
            goto done;
        }
    }
    for (int p = 0; p < j->n_prompts; p++)
        if (j->prompt_n[p] > (size_t)s->ctx) {
            api_fail(e, 400, "invalid_request_error", "context_length_exceeded", "input", "input %d has %zu tokens, and the context holds %d (--ctx)", p,
                     j->prompt_n[p], s->ctx);
            goto done;
        }
    job_id(j, "embd");
    *out = j; j = NULL;
    rc = 0;
done:
    srv_job_free(j);
    sk_json_free(&o);
    return rc;
}

static void embeddings_json(jbuf *b, serve *s, const srv_job *j) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    jputs(b, "{\"object\":\"list\",\"data\":[");
    for (int p = 0; p < j->n_prompts; p++) {
        const float *v = j->embeds + (size_t)p * j->dim;
        jprintf(b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", p ? "," : "", p);
        if (j->base64) {                               /* float32, little-endian, as OpenAI's clients decode it */
            const size_t n = (size_t)j->dim * 4;
            unsigned char *raw = malloc(n ? n : 1);
            char *t = malloc(n / 3 * 4 + 8);
            if (!raw || !t) { b->oom = 1; free(raw); free(t); return; }
            for (int c = 0; c < j->dim; c++) {
                uint32_t u;
                memcpy(&u, &v[c], 4);
                for (int k = 0; k < 4; k++) raw[4 * c + k] = (unsigned char)(u >> (8 * k));
            }
            size_t o = 0;
            for (size_t i = 0; i < n; i += 3) {
                const uint32_t x = (uint32_t)raw[i] << 16 | (i + 1 < n ? (uint32_t)raw[i + 1] << 8 : 0) | (i + 2 < n ? raw[i + 2] : 0);
                t[o++] = b64[x >> 18 & 63]; t[o++] = b64[x >> 12 & 63];
                t[o++] = i + 1 < n ? b64[x >> 6 & 63] : '=';
                t[o++] = i + 2 < n ? b64[x & 63] : '=';
            }
            jputs(b, "\"");
            jraw(b, t, o);
            jputs(b, "\"");
            free(raw); free(t);
        } else {
            jputs(b, "[");
            for (int c = 0; c < j->dim; c++) jprintf(b, c ? ",%.9g" : "%.9g", v[c]);
            jputs(b, "]");
        }
        jputs(b, "}");
    }
    jputs(b, "],\"model\":");
    jcstr(b, s->name);
    jprintf(b, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", j->prompt_tokens, j->prompt_tokens);
}

/* ------------------------------------------------------------ utilities (llama-server's) */

/* the body as a JSON object */
static int body_object(const char *body, size_t len, sk_json *o, api_err *e) {
    char perr[200];
    if (sk_json_parse(body, len, o, perr, sizeof perr)) return BAD(e, NULL, "the body is not valid JSON: %s", perr);
    if (o->type != SK_JSON_OBJ) { sk_json_free(o); return BAD(e, NULL, "the body must be a JSON object"); }
    return 0;
}

static int finish_util(jbuf *b, char **out, api_err *e) {
    if (b->oom) { free(b->s); return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }
    *out = b->s;
    return 0;
}

int api_tokenize(serve *s, const char *body, size_t len, char **out, api_err *e) {
    sk_json o;
    if (body_object(body, len, &o, e)) return 1;
    const sk_json *c = field(&o, "content");
    int pieces = 0, rc = 1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (!c || c->type != SK_JSON_STR) { BAD(e, "content", "'content' must be a string"); goto done; }
    if (get_bool(&o, "with_pieces", &pieces, e) || (c->str_len && encode(s, c->str, c->str_len, &ids, &n, e))) goto done;
    jbuf b = {0};
    jputs(&b, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) jputs(&b, ",");
        if (!pieces) { jprintf(&b, "%d", ids[i]); continue; }
        jprintf(&b, "{\"id\":%d,\"piece\":", ids[i]);
        token_str(&b, s, ids[i]);
        jputs(&b, "}");
    }
    jputs(&b, "]}");
    rc = finish_util(&b, out, e);
done:
    free(ids);
    sk_json_free(&o);
    return rc;
}

int api_detokenize(serve *s, const char *body, size_t len, char **out, api_err *e) {
    sk_json o;
    if (body_object(body, len, &o, e)) return 1;
    const sk_json *t = field(&o, "tokens");
    int rc = 1;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t tl = 0;
    if (!t || t->type != SK_JSON_ARR) { BAD(e, "tokens", "'tokens' must be a list of token ids"); goto done; }
    if (!(ids = malloc(sizeof(int32_t) * (t->n ? t->n : 1)))) { api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); goto done; }
    const int nv = sk_tok_vocab_size(s->tok);
    for (int i = 0; i < t->n; i++) {
        const sk_json *x = &t->items[i];
        if (x->type != SK_JSON_NUM || x->num != floor(x->num) || x->num < 0 || x->num >= nv) {
            BAD(e, "tokens", "tokens[%d] is not a token id in [0, %d)", i, nv);
            goto done;
        }
        ids[i] = (int32_t)x->num;
    }
    if (sk_tok_decode(s->tok, ids, (size_t)t->n, &text, &tl)) { BAD(e, "tokens", "%s", sk_last_error()); goto done; }
    jbuf b = {0};
    jputs(&b, "{\"content\":");
    jstr(&b, text, tl);
    jputs(&b, "}");
    rc = finish_util(&b, out, e);
done:
    free(ids); free(text);
    sk_json_free(&o);
    return rc;
}

int api_apply_template(serve *s, const char *body, size_t len, char **out, api_err *e) {
    sk_json o;
    if (body_object(body, len, &o, e)) return 1;
    char *text = NULL;
    size_t tl = 0;
    int rc = chat_render(s, &o, &text, &tl, e);
    if (!rc) {
        jbuf b = {0};
        jputs(&b, "{\"prompt\":");
        jstr(&b, text, tl);
        jputs(&b, "}");
        rc = finish_util(&b, out, e);
    }
    free(text);
    sk_json_free(&o);
    return rc;
}

char *api_metrics(serve *s) {
    int running, queued, slots;
    srv_lock(s);
    srv_load(s, &running, &queued, &slots);
    srv_unlock(s);
    static const struct { const char *name, *type, *help; } m[] = {
        {"skiplm_requests_total", "counter", "Requests answered (any endpoint, any status)."},
        {"skiplm_prompt_tokens_total", "counter", "Prompt tokens of the completions answered."},
        {"skiplm_tokens_predicted_total", "counter", "New tokens of the completions answered."},
        {"skiplm_requests_processing", "gauge", "Sequences decoding now (busy slots)."},
        {"skiplm_requests_deferred", "gauge", "Requests waiting for a slot."},
        {"skiplm_slots", "gauge", "Sequences the KV cache holds (--parallel)."},
    };
    const long v[] = {__atomic_load_n(&s->n_requests, __ATOMIC_RELAXED), __atomic_load_n(&s->n_prompt, __ATOMIC_RELAXED),
                      __atomic_load_n(&s->n_predicted, __ATOMIC_RELAXED), running, queued, slots};
    jbuf b = {0};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        jprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %ld\n", m[i].name, m[i].help, m[i].name, m[i].type, m[i].name, v[i]);
    if (b.oom) { free(b.s); return NULL; }
    return b.s;
}
