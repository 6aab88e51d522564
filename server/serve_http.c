/* skiplm serve's HTTP side (serve.h), on libmicrohttpd with a thread per connection: a
 * connection's thread reads the body, turns it into a job (serve_api.c), hands it to the
 * engine and waits for it, then answers with the whole response or streams server-sent events
 * as the job grows. A client that goes away (seen on its socket while it waits, or when a write
 * fails) cancels its job, which frees its slots. Every request leaves one line in the access
 * log on stderr. */
#include "serve.h"
#ifdef SK_HAVE_MHD
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* one request */
typedef struct {
    serve *s;
    struct MHD_Connection *conn;
    char method[16], path[160];
    char *body;
    size_t len, cap;
    int too_big;
    double t0;
    int status;
    srv_job *job;
    char *out;                   /* a stream's events not yet handed to the library */
    size_t out_len, out_cap, out_off;
    int stream_done;
    int early;                   /* answered on its headers, before its body */
    char err[512];               /* an error's message, for the log */
} req;

static char last_mhd_error[256];
static int stopping;             /* SIGINT or SIGTERM came: connections still open are closed by the server (atomic) */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    vsnprintf(last_mhd_error, sizeof last_mhd_error, fmt, ap);
    size_t n = strlen(last_mhd_error);
    while (n && (last_mhd_error[n - 1] == '\n' || last_mhd_error[n - 1] == '\r')) last_mhd_error[--n] = 0;
}

/* the client closed its side (it will read nothing more) */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* every answer: open to any origin (browser clients), its status kept for the log; an answer
 * before the body was read closes the connection */
static enum MHD_Result queue(req *r, int status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    if (r->early) MHD_add_response_header(resp, "Connection", "close");
    r->status = status;
    enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result send_body(req *r, int status, const char *type, char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(body); return MHD_NO; }
    MHD_add_response_header(resp, "Content-Type", type);
    return queue(r, status, resp);
}

static enum MHD_Result send_json(req *r, int status, char *body) {
    if (!body) return send_body(r, 500, "text/plain", strdup("out of memory\n"), 14);
    return send_body(r, status, "application/json", body, strlen(body));
}

static enum MHD_Result send_error(req *r, const api_err *e) {
    char *b; size_t n;
    snprintf(r->err, sizeof r->err, "%s", e->msg);
    if (api_error_body(e, &b, &n)) return send_body(r, 500, "text/plain", strdup("out of memory\n"), 14);
    return send_body(r, e->status, "application/json", b, n);
}

/* a stream's events, as the job makes them (this connection's thread may block here) */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    req *r = cls;
    serve *s = r->s;
    (void)pos;
    for (;;) {
        if (r->out_off < r->out_len) {
            size_t n = r->out_len - r->out_off < max ? r->out_len - r->out_off : max;
            memcpy(buf, r->out + r->out_off, n);
            r->out_off += n;
            return (ssize_t)n;
        }
        if (r->stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
        r->out_len = r->out_off = 0;
        /* the job's new output is copied out under the engine's lock, its JSON made outside */
        api_outbox box = {0};
        srv_lock(s);
        int rc = api_stream_take(r->job, &box);
        if (rc == 0 && api_outbox_empty(&box)) srv_wait(s, r->job, 100);
        srv_unlock(s);
        if (rc == 0) rc = api_stream_format(s, r->job, &box, &r->out, &r->out_len, &r->out_cap);
        api_outbox_free(&box);
        if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 1) r->stream_done = 1;
        if (!r->out_len && !r->stream_done && client_gone(r->conn)) {
            srv_lock(s);
            srv_cancel(s, r->job);
            srv_unlock(s);
            return MHD_CONTENT_READER_END_WITH_ERROR;    /* the log says how much it got */
        }
    }
}

/* POST /v1/completions (chat 0), /v1/chat/completions (1), /v1/responses (2) and /v1/embeddings (3) */
static enum MHD_Result generate(req *r, int chat) {
    serve *s = r->s;
    api_err e;
    if (r->too_big) {
        api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL, "the body is over %d bytes (--max-body)", s->o->max_body);
        return send_error(r, &e);
    }
    srv_job *j;
    const char *in = r->body ? r->body : "";
    if (chat == 3 ? api_embeddings_job(s, in, r->len, &j, &e) : chat == 2 ? api_responses_job(s, in, r->len, &j, &e)
                  : api_job(s, chat, in, r->len, &j, &e))
        return send_error(r, &e);
    const int sub = srv_submit(s, j);
    if (sub) {
        srv_job_free(j);
        if (sub == -2) api_fail(&e, 503, "server_error", "server_shutting_down", NULL, "the server is shutting down");
        else api_fail(&e, 503, "server_error", "overloaded", NULL, "the server is busy: %d requests wait already (--queue)", s->o->queue);
        return send_error(r, &e);
    }
    r->job = j;
    __atomic_add_fetch(&s->busy, 1, __ATOMIC_SEQ_CST);
    if (j->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, NULL);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        return queue(r, 200, resp);
    }
    srv_lock(s);
    while (j->state != SRV_DONE) {
        srv_wait(s, j, 100);
        if (j->state != SRV_DONE && client_gone(r->conn)) srv_cancel(s, j);
    }
    srv_unlock(s);
    /* done: the engine no longer touches the job, so its JSON is made without the lock */
    char *body = NULL;
    size_t len = 0;
    int failed = j->failed, oom = !failed && api_response(s, j, &body, &len);
    if (failed) api_fail(&e, j->cancelled ? 499 : 503, "server_error", j->err_code, NULL, "%s", j->err);
    if (failed) return send_error(r, &e);
    if (oom) return send_body(r, 500, "text/plain", strdup("out of memory\n"), 14);
    return send_body(r, 200, "application/json", body, len);
}

/* Authorization: Bearer KEY (the scheme in any case, as RFC 7235 has it; spaces around the key) */
static int authorized(req *r) {
    const char *key = r->s->o->api_key;
    if (!key) return 1;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    if (!h) return 0;
    while (*h == ' ') h++;
    if (strncasecmp(h, "Bearer", 6) || (h[6] != ' ' && h[6] != '\t')) return 0;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t hl = strlen(h);
    while (hl && (h[hl - 1] == ' ' || h[hl - 1] == '\t')) hl--;
    char tok[1024];
    if (hl >= sizeof tok) return 0;
    memcpy(tok, h, hl);
    tok[hl] = 0;
    h = tok;
    size_t a = strlen(h), b = strlen(key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)h[i] ^ (unsigned char)key[i];   /* no early exit */
    return diff == 0;
}

static enum MHD_Result route(req *r) {
    serve *s = r->s;
    const char *p = r->path, *m = r->method;
    api_err e;
    if (!strcmp(m, "OPTIONS")) {                       /* a browser's CORS preflight: what it asks for is allowed */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        const char *want = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        int ok = want && *want && strlen(want) < 4096;
        for (const char *c = want; ok && *c; c++)       /* header names (RFC 9110 tokens), commas and spaces only */
            ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("!#$%&'*+-.^_`|~, \t", *c);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", ok ? want : s->o->cors_headers);
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        MHD_add_response_header(resp, "Vary", "Access-Control-Request-Headers");
        return queue(r, 204, resp);
    }
    if (!strcmp(p, "/") || !strcmp(p, "/index.html")) {   /* the chat page: static, open (its requests carry the key) */
        if (strcmp(m, "GET") && strcmp(m, "HEAD"))
            return api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use GET", m, r->path), send_error(r, &e);
        struct MHD_Response *resp = MHD_create_response_from_buffer(srv_chat_html_len, (void *)srv_chat_html, MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        return queue(r, 200, resp);
    }
    if (!strncmp(p, "/v1/", 4)) p += 3;               /* /v1/models and /models alike, as llama.cpp */
    const int health = !strcmp(p, "/health"), models = !strcmp(p, "/models"), model = !strncmp(p, "/models/", 8),
              cmpl = !strcmp(p, "/completions"), chat = !strcmp(p, "/chat/completions"), responses = !strcmp(p, "/responses"), embeddings = !strcmp(p, "/embeddings");
    const int tokenize = !strcmp(p, "/tokenize"), detokenize = !strcmp(p, "/detokenize"), apply = !strcmp(p, "/apply-template"),
              metrics = !strcmp(p, "/metrics");
    if (!health && !authorized(r)) {
        char *b; size_t n;
        api_fail(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                 "a missing or wrong API key: send the header 'Authorization: Bearer KEY' (skiplm serve --api-key)");
        snprintf(r->err, sizeof r->err, "%s", e.msg);
        if (api_error_body(&e, &b, &n)) return MHD_NO;
        struct MHD_Response *resp = MHD_create_response_from_buffer(n, b, MHD_RESPMEM_MUST_FREE);
        if (!resp) { free(b); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "application/json");
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
        return queue(r, 401, resp);
    }
    const int get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST");
    if (health || models || model) {
        if (!get) return api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use GET", m, r->path), send_error(r, &e);
        if (health) return send_json(r, 200, api_health(s));
        char *b = api_models(s, model ? p + 8 : NULL);
        if (!b && model)
            return api_fail(&e, 404, "invalid_request_error", "model_not_found", NULL, "The model '%s' does not exist: this server serves '%s'",
                            p + 8, s->name), send_error(r, &e);
        return send_json(r, 200, b);
    }
    if (metrics) {
        if (!get) return api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use GET", m, r->path), send_error(r, &e);
        char *b = api_metrics(s);
        if (!b) return send_body(r, 500, "text/plain", strdup("out of memory\n"), 14);
        return send_body(r, 200, "text/plain; version=0.0.4", b, strlen(b));
    }
    if (tokenize || detokenize || apply) {
        if (!post) return api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use POST", m, r->path), send_error(r, &e);
        if (r->too_big)
            return api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL, "the body is over %d bytes (--max-body)", s->o->max_body),
                   send_error(r, &e);
        char *out = NULL;
        const char *body = r->body ? r->body : "";
        if (tokenize ? api_tokenize(s, body, r->len, &out, &e) : detokenize ? api_detokenize(s, body, r->len, &out, &e)
                     : api_apply_template(s, body, r->len, &out, &e))
            return send_error(r, &e);
        return send_json(r, 200, out);
    }
    if (cmpl || chat || responses || embeddings) {
        if (!post) return api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use POST", m, r->path), send_error(r, &e);
        return generate(r, embeddings ? 3 : responses ? 2 : chat);
    }
    return api_fail(&e, 404, "invalid_request_error", "not_found", NULL,
                    "no such endpoint: %s %s (GET / the chat page, POST /v1/completions, POST /v1/chat/completions, POST /v1/responses, POST /v1/embeddings, GET /v1/models, GET /health, "
                    "POST /tokenize, POST /detokenize, POST /apply-template, GET /metrics)", m, r->path),
           send_error(r, &e);
}

/* the request's framing headers: every Content-Length (they must agree) and Transfer-Encoding */
typedef struct { const char *cl, *te; int conflict; } framing;
static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    framing *f = cls;
    (void)kind;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->cl && strcmp(f->cl, value)) f->conflict = 1;
        f->cl = value;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        if (f->te) f->conflict = 2;
        f->te = value;
    }
    return MHD_YES;
}

/* a request whose length is ambiguous or unreadable is answered on its headers, and its
 * connection closed: two Content-Length values (behind a proxy that reads the other one, a
 * request could be smuggled), or a Transfer-Encoding other than chunked (libmicrohttpd would
 * read the body until the client closes) */
static int refuse_framing(req *r, enum MHD_Result *rc) {
    framing f = {0};
    api_err e;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, framing_header, &f);
    if (f.conflict == 1 || (f.cl && f.te))
        api_fail(&e, 400, "invalid_request_error", "bad_request", NULL, "%s", f.te ? "the request has both Content-Length and Transfer-Encoding"
                 : "the request has Content-Length headers that disagree");
    else if (f.conflict == 2 || (f.te && strcasecmp(f.te, "chunked")))
        api_fail(&e, 501, "invalid_request_error", "not_implemented", NULL, "Transfer-Encoding '%.100s' is not supported: send the body "
                 "with a Content-Length, or chunked", f.te);
    else
        return 0;
    r->early = 1;
    *rc = send_error(r, &e);
    return 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
    serve *s = cls;
    req *r = *con_cls;
    (void)version;
    if (!r) {                                          /* the headers: the request begins */
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->s = s; r->conn = c; r->t0 = sk_now();
        __atomic_add_fetch(&s->requests, 1, __ATOMIC_SEQ_CST);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        *con_cls = r;
        enum MHD_Result rc = MHD_YES;
        refuse_framing(r, &rc);
        return rc;
    }
    if (r->early) { *upload_size = 0; return MHD_YES; }
    if (*upload_size) {                                /* a piece of the body */
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_big || r->len + n > (size_t)s->o->max_body) { r->too_big = 1; return MHD_YES; }
        if (r->len + n + 1 > r->cap) {
            size_t nc = (r->len + n + 1) * 2;
            char *b = realloc(r->body, nc);
            if (!b) { r->too_big = 1; return MHD_YES; }
            r->body = b; r->cap = nc;
        }
        memcpy(r->body + r->len, upload, n);
        r->len += n;
        r->body[r->len] = 0;
        return MHD_YES;
    }
    return route(r);
}

/* the access log: one line a request; a request that got no answer logs "-" and why */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve *s = cls;
    req *r = *con_cls;
    (void)c;
    if (!r) return;
    int pt = 0, ct = 0, cached = 0;
    if (r->job) {
        srv_lock(s);
        int made, sent;
        srv_tokens(r->job, &made, &sent);
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
            srv_cancel(s, r->job);
            if (!r->err[0] && r->job->stream)
                snprintf(r->err, sizeof r->err, "the client went away after %d of %d new tokens were sent", sent, made);
            else if (!r->err[0])
                snprintf(r->err, sizeof r->err, "the client went away");
        }
        pt = r->job->prompt_tokens;
        cached = r->job->cached_tokens;
        ct = r->job->state == SRV_DONE ? r->job->completion_tokens : made;
        if (r->job->stream && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) ct = sent;   /* what the client got */
        if (r->job->state == SRV_DONE && r->job->failed && !r->err[0]) snprintf(r->err, sizeof r->err, "%s", r->job->err);
        srv_unlock(s);
        srv_release(s, r->job);
        __atomic_sub_fetch(&s->busy, 1, __ATOMIC_SEQ_CST);
    } else if (!r->status && !r->err[0]) {
        const char *what = toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? "timed out"
                         : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN || __atomic_load_n(&stopping, __ATOMIC_SEQ_CST) ? "the server stopped"
                         : toe == MHD_REQUEST_TERMINATED_READ_ERROR || toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? "the client went away"
                         : "the connection failed";
        if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
            snprintf(r->err, sizeof r->err, "timed out: no bytes for %d s (--timeout) after %zu bytes of the body; closed without an answer",
                     s->o->timeout, r->len);
        else
            snprintf(r->err, sizeof r->err, "%s after %zu bytes of the body; closed without an answer", what, r->len);
    }
    __atomic_add_fetch(&s->n_requests, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->n_prompt, pt, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->n_predicted, ct, __ATOMIC_RELAXED);
    if (!s->o->quiet || r->status >= 400 || r->err[0]) {
        char when[32], status[8];
        time_t now = time(NULL);
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
        snprintf(status, sizeof status, r->status ? "%d" : "-", r->status);
        fprintf(stderr, "%s %s %s %s prompt=%d cached=%d completion=%d %.3fs%s%s%s\n", when, r->method, r->path,
                status, pt, cached, ct, sk_now() - r->t0, r->err[0] ? " error=\"" : "", r->err, r->err[0] ? "\"" : "");
    }
    free(r->body); free(r->out); free(r);
    *con_cls = NULL;
    __atomic_sub_fetch(&s->requests, 1, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------ the listener and its gate */

/* The server accepts connections itself and looks at each one's first request head before
 * handing the socket to libmicrohttpd: a malformed Content-Length is answered here, once (the
 * library's 0.9.75 writes its own answer's status line and headers twice). The gate only
 * peeks: the bytes stay for the library to read. */
typedef struct {
    serve *s;
    struct MHD_Daemon *d;
    int fd, wake[2];             /* the listening socket; a pipe that wakes the accept loop to stop */
    int stopping, gates;         /* gates: connections being looked at (atomic) */
    pthread_t th;
} listener;

typedef struct {
    listener *l;
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
} gate_arg;

static void answer_raw(int fd, int status, const char *reason, const char *code, const char *msg) {
    api_err e;
    char *b = NULL, head[512];
    size_t n = 0;
    api_fail(&e, status, "invalid_request_error", code, NULL, "%s", msg);
    if (api_error_body(&e, &b, &n)) return;
    int hl = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Access-Control-Allow-Origin: *\r\nContent-Length: %zu\r\n\r\n", status, reason, n);
    if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) == hl) { ssize_t w = send(fd, b, n, MSG_NOSIGNAL); (void)w; }
    free(b);
}

static void *gate(void *arg) {
    gate_arg *g = arg;
    listener *l = g->l;
    serve *s = l->s;
    char head[16384];
    size_t have = 0;
    const double until = sk_now() + s->o->timeout;
    int ok = 0;
    while (!__atomic_load_n(&l->stopping, __ATOMIC_SEQ_CST) && sk_now() < until) {
        struct pollfd p = {.fd = g->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t k = recv(g->fd, head, sizeof head - 1, MSG_PEEK);
        if (k <= 0) break;                              /* closed before a request */
        head[k] = 0;
        const char *blank = memmem(head, (size_t)k, "\r\n\r\n", 4);
        if (!blank) blank = memmem(head, (size_t)k, "\n\n", 2);
        if (blank || (size_t)k == sizeof head - 1) { ok = 1; have = (size_t)k; break; }
        if ((size_t)k == have) { struct timespec ts = {0, 5 * 1000000L}; nanosleep(&ts, NULL); }   /* no more yet: wait (the bytes stay readable) */
        have = (size_t)k;
    }
    const char *v = NULL;
    size_t vn = 0;
    int kind;
    if (ok && (kind = srv_head_length(head, have, &v, &vn)) != SRV_LEN_OK) {
        char msg[256], when[32];
        const int big = kind == SRV_LEN_HUGE;
        snprintf(msg, sizeof msg, big ? "the Content-Length header is past 2^64 bytes: '%.*s'" : "the Content-Length header is not a number of bytes: '%.*s'",
                 (int)(vn < 80 ? vn : 80), v);
        if (big) answer_raw(g->fd, 413, "Content Too Large", "request_too_large", msg);
        else answer_raw(g->fd, 400, "Bad Request", "bad_request", msg);
        shutdown(g->fd, SHUT_WR);
        time_t now = time(NULL);
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
        /* the request line's method and path, as the access log has them */
        const char *eol = memchr(head, '\n', have), *end = eol ? eol : head + have;
        const char *sp = memchr(head, ' ', (size_t)(end - head)), *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(end - sp - 1)) : NULL;
        const int ml = sp ? (int)(sp - head) : 0, pl = sp2 ? (int)(sp2 - sp - 1) : 0;
        fprintf(stderr, "%s %.*s %.*s %d prompt=0 cached=0 completion=0 0.000s error=\"%s\"\n", when, ml && ml < 16 ? ml : 1,
                ml && ml < 16 ? head : "-", pl && pl < 160 ? pl : 1, pl && pl < 160 ? sp + 1 : "-", big ? 413 : 400, msg);
        __atomic_add_fetch(&s->n_requests, 1, __ATOMIC_RELAXED);
        ok = 0;
    }
    if (ok && !__atomic_load_n(&l->stopping, __ATOMIC_SEQ_CST)) {
        if (MHD_add_connection(l->d, g->fd, (struct sockaddr *)&g->addr, g->alen) != MHD_YES && !s->o->quiet)
            fprintf(stderr, "[serve: a connection refused: %s]\n", last_mhd_error[0] ? last_mhd_error : strerror(errno));
    } else {
        close(g->fd);
    }
    free(g);
    __atomic_sub_fetch(&l->gates, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *accept_loop(void *arg) {
    listener *l = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = l->fd, .events = POLLIN}, {.fd = l->wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) continue;
        if (p[1].revents) break;
        gate_arg *g = calloc(1, sizeof *g);
        if (!g) continue;
        g->l = l;
        g->alen = sizeof g->addr;
        g->fd = accept4(l->fd, (struct sockaddr *)&g->addr, &g->alen, SOCK_CLOEXEC);
        if (g->fd < 0) { free(g); continue; }
        if (__atomic_load_n(&l->gates, __ATOMIC_SEQ_CST) >= 512) { close(g->fd); free(g); continue; }   /* as the library's limit */
        __atomic_add_fetch(&l->gates, 1, __ATOMIC_SEQ_CST);
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 * 1024);
        if (pthread_create(&th, &at, gate, g)) { close(g->fd); free(g); __atomic_sub_fetch(&l->gates, 1, __ATOMIC_SEQ_CST); }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

/* --host and --port as a socket address (a name, an IPv4 or an IPv6 address) */
static int listen_addr(const serve_opts *o, struct sockaddr_storage *ss, socklen_t *sl, int *v6) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int rc = getaddrinfo(o->host, port, &hints, &res);
    if (rc || !res) return sk_error(SK_EINVAL, "--host %s: %s", o->host, rc ? gai_strerror(rc) : "no address");
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sl = res->ai_addrlen;
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

int serve_http(serve *s) {
    const serve_opts *o = s->o;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    int v6 = 0;
    if (listen_addr(o, &ss, &sl, &v6)) return 1;
    listener l = {.s = s, .fd = -1, .wake = {-1, -1}};
    l.fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (l.fd >= 0) setsockopt(l.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l.fd < 0 || bind(l.fd, (struct sockaddr *)&ss, sl) || listen(l.fd, 128) || pipe(l.wake)) {
        const int err = errno;
        if (l.fd >= 0) close(l.fd);
        return sk_error(SK_EIO, "cannot listen on %s:%d: %s", o->host, o->port, strerror(err));
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET | (v6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)512,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!d) {
        close(l.fd); close(l.wake[0]); close(l.wake[1]);
        return sk_error(SK_EIO, "cannot start the HTTP server: %s", last_mhd_error[0] ? last_mhd_error : strerror(errno));
    }
    l.d = d;
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    int port = o->port;
    if (!getsockname(l.fd, (struct sockaddr *)&bound, &bl))
        port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port : ((struct sockaddr_in *)&bound)->sin_port);
    if (pthread_create(&l.th, NULL, accept_loop, &l)) {
        MHD_stop_daemon(d);
        close(l.fd); close(l.wake[0]); close(l.wake[1]);
        return sk_error(SK_EIO, "cannot start the accepting thread");
    }
    fprintf(stderr, "[serve: %s on http://%s%s%s:%d/v1 (%d slots of %d positions; queue %d); Ctrl-C stops]\n", s->name,
            v6 ? "[" : "", o->host, v6 ? "]" : "", port, o->parallel, s->ctx, o->queue);
    fflush(stderr);
    /* SIGINT/SIGTERM were blocked before any thread started: this thread takes them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    while (sigwait(&set, &sig)) {}
    const double t_sig = sk_now();
    int running, queued, slots;
    srv_lock(s);
    srv_load(s, &running, &queued, &slots);
    srv_unlock(s);
    fprintf(stderr, "[serve: %s: no new connections; %d queued requests refused, %d running sequences get %d s (--grace) to "
            "end; a second signal ends them now]\n", sig == SIGINT ? "SIGINT" : "SIGTERM", queued, running, o->grace);
    __atomic_store_n(&l.stopping, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
    { ssize_t w = write(l.wake[1], "x", 1); (void)w; }
    pthread_join(l.th, NULL);
    close(l.fd);
    srv_engine_stop(s, o->grace);
    /* Wait for the requests that hold a job (their answers written), up to --grace; then the
     * engine ends what still runs, and its answers (an error event for a stream) get two
     * seconds to go out. A request still sending its body holds nothing up: it is closed unanswered. */
    struct timespec tick = {0, 50 * 1000000L};
    for (int ended = 0;;) {
        srv_lock(s);
        srv_load(s, &running, &queued, &slots);
        srv_unlock(s);
        const int busy = __atomic_load_n(&s->busy, __ATOMIC_SEQ_CST), gates = __atomic_load_n(&l.gates, __ATOMIC_SEQ_CST);
        if (!running && !busy && !gates) break;
        if (!ended && sk_now() > t_sig + o->grace) { srv_engine_stop(s, 0); ended = 1; }
        if (sk_now() > t_sig + o->grace + 2) break;
        if (sigtimedwait(&set, NULL, &tick) > 0 && !ended) { srv_engine_stop(s, 0); ended = 1; }
    }
    struct timespec ms10 = {0, 10 * 1000000L};
    while (__atomic_load_n(&l.gates, __ATOMIC_SEQ_CST)) nanosleep(&ms10, NULL);   /* each sees stopping within 0.1 s */
    MHD_stop_daemon(d);
    close(l.wake[0]); close(l.wake[1]);
    fprintf(stderr, "[serve: stopped]\n");
    return 0;
}
#else
#include <stdio.h>
int serve_http(serve *s) {
    (void)s;
    return sk_error(SK_EINVAL, "this skiplm was built without libmicrohttpd: install it (apt-get install libmicrohttpd-dev, "
                    "or bash scripts/install_deps.sh) and rebuild (make)");
}
#endif
