/* libFuzzer harness for skiplm serve's request parsing (server/serve_api.c; the whole input is
 * also read as a request head, server/serve_head.c): the first byte picks
 * the endpoint (odd: chat completions), the rest is the request body. A body that becomes a job
 * is then answered as if it had run (each choice's text taken from the input, a stop for a
 * reason): the whole response, and the stream to its end. Every refusal must carry an HTTP
 * status and a message; a response must be JSON text the library's reader takes back.
 *
 * Build and run (from the repository root): make FUZZ=1 build-fuzz/fuzz/fuzz_serve &&
 *   build-fuzz/fuzz/fuzz_serve -max_len=4096 fuzz/corpus/serve
 */
#include "serve.h"
#include "base/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static serve S;
static serve_opts O;

static void setup(void) {
    static const char chars[] = " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\n";
    if (sk_tok_build_char(&S.tok, chars, sizeof chars - 1)) abort();
    char dir[] = "/tmp/skiplm-fuzz-serve-XXXXXX", path[64];
    if (!mkdtemp(dir)) abort();
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "w");
    if (!f) abort();
    fputs("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}"
          "{% if add_generation_prompt %}assistant: {% endif %}", f);
    fclose(f);
    if (sk_chat_load(&S.chat, dir, NULL)) abort();
    unlink(path);
    rmdir(dir);
    O = (serve_opts){.parallel = 4, .queue = 4, .max_body = 1 << 20};
    S.o = &O;
    S.name = "m";
    S.V = sk_tok_vocab_size(S.tok) + 3;
    S.ctx = 64;
    pthread_mutex_init(&S.text_mu, NULL);
}

static void must_parse(const char *text, size_t len) {
    sk_json j;
    char err[128];
    if (sk_json_parse(text, len, &j, err, sizeof err)) abort();
    sk_json_free(&j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!S.tok) setup();
    if (size < 1) return 0;
    const char *v = NULL;                       /* the gate's look at a request head: a value inside it */
    size_t vn = 0;
    if (srv_head_length((const char *)data, size, &v, &vn) != SRV_LEN_OK &&
        (v < (const char *)data || v + vn > (const char *)data + size)) abort();
    const int chat = data[0] & 1;
    srv_job *j = NULL;
    api_err e;
    memset(&e, 0, sizeof e);
    if (api_job(&S, chat, (const char *)data + 1, size - 1, &j, &e)) {
        if (e.status < 400 || !e.msg[0] || j) abort();
        char *b; size_t n;
        if (api_error_body(&e, &b, &n)) abort();
        must_parse(b, n);
        free(b);
        return 0;
    }
    /* the job as if it ran: choice k's text is a slice of the input, ended for a reason */
    for (int i = 0; i < j->n_seq; i++) {
        srv_seq *q = &j->seqs[i];
        size_t from = (size_t)i * 7 % size, n = (size - from) < 24 ? size - from : 24;
        if (!(q->text = malloc(n + 1))) abort();
        memcpy(q->text, data + from, n);
        q->text[n] = 0;
        q->len = n; q->made = (int)n;
        q->finish = i % 2 ? SRV_STOP : SRV_LENGTH;
    }
    j->state = SRV_DONE;
    char *b = NULL; size_t n = 0, cap = 0;
    if (api_response(&S, j, &b, &n)) abort();
    must_parse(b, n);
    free(b);
    b = NULL; n = 0;
    api_outbox box = {0};                       /* a stream: taken as under the lock, then formatted */
    if (api_stream_take(j, &box) || api_stream_format(&S, j, &box, &b, &n, &cap) != 1 || !n) abort();
    api_outbox_free(&box);
    free(b);
    srv_job_free(j);
    return 0;
}
