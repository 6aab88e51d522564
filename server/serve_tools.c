/* skiplm serve's tool calls (serve.h): which format the model writes them in, the grammar that
 * makes it write one (tool_choice "required" or a named function), and the calls read back
 * from a reply. Three formats, as chat templates define them:
 *   hermes   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Hermes, Qwen2.5; the
 *            default: plain text any tokenizer writes), one block per call;
 *   llama    {"name": ..., "parameters": {...}} as the whole reply (Llama 3.1+, whose
 *            <|python_tag|> is a special token and so not in the reply's text);
 *   mistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (the marker is a special
 *            token in Mistral's vocabulary: a reply that is only the list is read too).
 * A reply is read in any of the three; only names of the request's tools count as calls. */
#include "serve.h"
#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>", MISTRAL[] = "[TOOL_CALLS]";

int tools_format(sk_tokenizer *tok) {
    static const struct { const char *marker; int fmt; } marks[] = {{"<tool_call>", SRV_TOOLS_HERMES}, {"[TOOL_CALLS]", SRV_TOOLS_MISTRAL},
                                                                     {"<|python_tag|>", SRV_TOOLS_LLAMA}};
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++) {
        int32_t *ids = NULL;
        size_t n = 0, cap = 0;
        int one = !sk_tok_encode(tok, marks[i].marker, strlen(marks[i].marker), &ids, &n, &cap) && n == 1;
        free(ids);
        if (one) return marks[i].fmt;                   /* the vocabulary has the marker as one token */
    }
    return SRV_TOOLS_HERMES;
}

typedef struct { char *s; size_t len, cap; int oom; } tbuf;
static void traw(tbuf *b, const char *s, size_t n) { if (!b->oom && sk_json_write_raw(&b->s, &b->len, &b->cap, s, n)) b->oom = 1; }
static void tputs(tbuf *b, const char *s) { traw(b, s, strlen(s)); }
static void tstr(tbuf *b, const char *s, size_t n) { if (!b->oom && sk_json_write_str(&b->s, &b->len, &b->cap, s, n)) b->oom = 1; }

/* the schema of one call of tool k in the job's format (object with a const name) */
static void call_schema(tbuf *b, const srv_job *j, int k) {
    tputs(b, "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":");
    tstr(b, j->tool_names[k], strlen(j->tool_names[k]));
    tputs(b, j->tool_fmt == SRV_TOOLS_LLAMA ? "},\"parameters\":" : "},\"arguments\":");
    tputs(b, j->tool_params[k]);
    tputs(b, j->tool_fmt == SRV_TOOLS_LLAMA ? "},\"required\":[\"name\",\"parameters\"],\"additionalProperties\":false}"
                                            : "},\"required\":[\"name\",\"arguments\"],\"additionalProperties\":false}");
}

int tools_grammar(srv_job *j, int only) {
    tbuf b = {0};
    if (j->tool_fmt == SRV_TOOLS_MISTRAL) tputs(&b, "{\"type\":\"array\",\"minItems\":1,\"items\":");
    tputs(&b, "{\"anyOf\":[");
    for (int k = 0, first = 1; k < j->n_tools; k++) {
        if (only >= 0 && k != only) continue;
        if (!first) tputs(&b, ",");
        call_schema(&b, j, k);
        first = 0;
    }
    tputs(&b, "]}");
    if (j->tool_fmt == SRV_TOOLS_MISTRAL) tputs(&b, "}");
    if (b.oom) { free(b.s); return sk_error(SK_ENOMEM, "out of memory"); }
    int rc = sk_jg_compile(&j->grammar, b.s, b.len);
    free(b.s);
    if (!rc && j->tool_fmt == SRV_TOOLS_HERMES) rc = sk_jg_wrap(j->grammar, "<tool_call>\n", "\n</tool_call>");
    return rc;
}

/* ------------------------------------------------------------ reading a reply */

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* one call {"name": a tool's name, "arguments" or "parameters": an object or a string} as the
 * response's element (stream: with its index) appended to b: 1, or 0 when v is no such call */
static int add_call(tbuf *b, const srv_job *j, const sk_json *v, int idx, int stream) {
    if (v->type != SK_JSON_OBJ) return 0;
    const sk_json *name = sk_json_get(v, "name"), *args = sk_json_get(v, "arguments");
    if (!args) args = sk_json_get(v, "parameters");
    if (!name || name->type != SK_JSON_STR || (args && args->type != SK_JSON_OBJ && args->type != SK_JSON_STR)) return 0;
    int known = 0;
    for (int k = 0; k < j->n_tools && !known; k++) known = !strcmp(j->tool_names[k], name->str);
    if (!known) return 0;
    char head[200];
    if (stream) snprintf(head, sizeof head, "%s{\"index\":%d,\"id\":\"call_%s_%d\",\"type\":\"function\",\"function\":{\"name\":",
                         idx ? "," : "", idx, j->id, idx);
    else snprintf(head, sizeof head, "%s{\"id\":\"call_%s_%d\",\"type\":\"function\",\"function\":{\"name\":", idx ? "," : "", j->id, idx);
    tputs(b, head);
    tstr(b, name->str, name->str_len);
    tputs(b, ",\"arguments\":");
    if (!args) tputs(b, "\"{}\"");
    else if (args->type == SK_JSON_STR) tstr(b, args->str, args->str_len);
    else {
        tbuf a = {0};
        srv_json_dump(&a.s, &a.len, &a.cap, args);
        tstr(b, a.s ? a.s : "{}", a.s ? a.len : 2);
        free(a.s);
    }
    tputs(b, "}}");
    return 1;
}

/* calls in the JSON text t[0..n) (an object, or a list of them) appended: how many */
static int calls_in(tbuf *b, const srv_job *j, const char *t, size_t n, int idx, int stream) {
    sk_json v;
    char err[64];
    while (n && is_space(*t)) { t++; n--; }
    while (n && is_space(t[n - 1])) n--;
    if (!n || sk_json_parse(t, n, &v, err, sizeof err)) return 0;
    int got = 0;
    if (v.type == SK_JSON_ARR) {
        for (int i = 0; i < v.n; i++) if (!add_call(b, j, &v.items[i], idx + got, stream)) { got = -1; break; } else got++;
    } else {
        got = add_call(b, j, &v, idx, stream);
    }
    sk_json_free(&v);
    return got > 0 ? got : 0;
}

int tools_parse(const srv_job *j, const char *text, size_t len, size_t *content_end, char **calls, int stream) {
    *calls = NULL;
    *content_end = len;
    if (!j->tools_on || !text) return 0;
    tbuf b = {0};
    tputs(&b, "[");
    int n = 0;
    const char *open = memmem(text, len, HERMES_OPEN, sizeof HERMES_OPEN - 1);
    if (open) {                                         /* hermes: every block (text between or after them is left out) */
        for (const char *p = open; p;) {
            const char *body = p + sizeof HERMES_OPEN - 1;
            const char *close = memmem(body, len - (size_t)(body - text), HERMES_CLOSE, sizeof HERMES_CLOSE - 1);
            const int got = calls_in(&b, j, body, (size_t)((close ? close : text + len) - body), n, stream);
            if (!got) { n = 0; break; }
            n += got;
            if (!close) break;
            const char *after = close + sizeof HERMES_CLOSE - 1;
            p = memmem(after, len - (size_t)(after - text), HERMES_OPEN, sizeof HERMES_OPEN - 1);
        }
        if (n) *content_end = (size_t)(open - text);
    } else {
        size_t i = 0;
        while (i < len && is_space(text[i])) i++;
        size_t from = i;
        if (len - i >= sizeof MISTRAL - 1 && !memcmp(text + i, MISTRAL, sizeof MISTRAL - 1)) from = i + sizeof MISTRAL - 1;
        if (from < len) n = calls_in(&b, j, text + from, len - from, 0, stream);
        if (n) *content_end = 0;
    }
    tputs(&b, "]");
    if (!n || b.oom) { free(b.s); *content_end = len; return b.oom ? -1 : 0; }
    *calls = b.s;
    return n;
}

size_t tools_hold(const srv_job *j, const char *text, size_t len) {
    if (!j->tools_on || !text) return len;
    const char *open = memmem(text, len, HERMES_OPEN, sizeof HERMES_OPEN - 1);
    if (open) return (size_t)(open - text);
    size_t i = 0;
    while (i < len && is_space(text[i])) i++;
    if (i < len && (text[i] == '{' || text[i] == '[')) return 0;   /* a reply that may be a call in JSON waits for its end */
    if (i == len) return 0;                             /* only whitespace yet */
    for (size_t m = sizeof HERMES_OPEN - 2; m > 0; m--)   /* the start of a <tool_call> waits */
        if (m <= len && !memcmp(text + len - m, HERMES_OPEN, m)) return len - m;
    return len;
}
