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
#include <poll.h>
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
    char err[512];               /* an error's message, for the log */
} req;

static char last_mhd_error[256];
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

/* every answer: open to any origin (browser clients), its status kept for the log */
static enum MHD_Result queue(req *r, int status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
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
            snprintf(r->err, sizeof r->err, "the client went away");
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* POST /v1/completions (chat 0) and /v1/chat/completions (chat 1) */
static enum MHD_Result generate(req *r, int chat) {
    serve *s = r->s;
    api_err e;
    if (r->too_big) {
        api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL, "the body is over %d bytes (--max-body)", s->o->max_body);
        return send_error(r, &e);
    }
    srv_job *j;
    if (api_job(s, chat, r->body ? r->body : "", r->len, &j, &e)) return send_error(r, &e);
    if (srv_submit(s, j)) {
        srv_job_free(j);
        api_fail(&e, 503, "server_error", "overloaded", NULL, "the server is busy (%d requests wait already: --queue) or shutting down", s->o->queue);
        return send_error(r, &e);
    }
    r->job = j;
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
    if (failed) api_fail(&e, j->cancelled ? 499 : 503, "server_error", NULL, NULL, "%s", j->err);
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
    if (!strcmp(m, "OPTIONS")) {                       /* a browser's CORS preflight */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        return queue(r, 204, resp);
    }
    if (!strncmp(p, "/v1/", 4)) p += 3;               /* /v1/models and /models alike, as llama.cpp */
    const int health = !strcmp(p, "/health"), models = !strcmp(p, "/models"), model = !strncmp(p, "/models/", 8),
              cmpl = !strcmp(p, "/completions"), chat = !strcmp(p, "/chat/completions");
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
    if (cmpl || chat) {
        if (!post) return api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use POST", m, r->path), send_error(r, &e);
        return generate(r, chat);
    }
    return api_fail(&e, 404, "invalid_request_error", "not_found", NULL,
                    "no such endpoint: %s %s (POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, "
                    "POST /tokenize, POST /detokenize, POST /apply-template, GET /metrics)", m, r->path),
           send_error(r, &e);
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
        return MHD_YES;
    }
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

/* the access log: one line a request */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve *s = cls;
    req *r = *con_cls;
    (void)c;
    if (!r) return;
    int pt = 0, ct = 0, cached = 0;
    if (r->job) {
        srv_lock(s);
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
            srv_cancel(s, r->job);
            if (!r->err[0]) snprintf(r->err, sizeof r->err, "the client went away");
        }
        pt = r->job->prompt_tokens;
        ct = r->job->completion_tokens;
        cached = r->job->cached_tokens;
        if (r->job->state == SRV_DONE && r->job->failed && !r->err[0]) snprintf(r->err, sizeof r->err, "%s", r->job->err);
        srv_unlock(s);
        srv_release(s, r->job);
    }
    __atomic_add_fetch(&s->n_requests, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->n_prompt, pt, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->n_predicted, ct, __ATOMIC_RELAXED);
    if (!s->o->quiet || r->status >= 400 || r->err[0]) {
        char when[32];
        time_t now = time(NULL);
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
        fprintf(stderr, "%s %s %s %d prompt=%d cached=%d completion=%d %.3fs%s%s%s\n", when, r->method, r->path,
                r->status ? r->status : 500, pt, cached, ct, sk_now() - r->t0, r->err[0] ? " error=\"" : "", r->err, r->err[0] ? "\"" : "");
    }
    free(r->body); free(r->out); free(r);
    *con_cls = NULL;
    __atomic_sub_fetch(&s->requests, 1, __ATOMIC_SEQ_CST);
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
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)512,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!d)
        return sk_error(SK_EIO, "cannot listen on %s:%d: %s", o->host, o->port,
                        last_mhd_error[0] ? last_mhd_error : strerror(errno));
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : o->port;
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
    int running, queued, slots;
    srv_lock(s);
    srv_load(s, &running, &queued, &slots);
    srv_unlock(s);
    fprintf(stderr, "[serve: %s: no new connections; %d queued requests refused, %d running sequences get %d s (--grace) to "
            "end; a second signal ends them now]\n", sig == SIGINT ? "SIGINT" : "SIGTERM", queued, running, o->grace);
    MHD_socket ls = MHD_quiesce_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    srv_engine_stop(s, o->grace);
    /* wait for the running requests (their answers written), or for a second signal */
    const double until = sk_now() + o->grace + 5;
    struct timespec tick = {0, 100 * 1000000L};
    for (;;) {
        srv_lock(s);
        srv_load(s, &running, &queued, &slots);
        srv_unlock(s);
        if ((!running && !__atomic_load_n(&s->requests, __ATOMIC_SEQ_CST)) || sk_now() > until) break;
        if (sigtimedwait(&set, NULL, &tick) > 0) srv_engine_stop(s, 0);
    }
    MHD_stop_daemon(d);
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
