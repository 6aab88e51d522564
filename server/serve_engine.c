/* skiplm serve's engine (serve.h): one thread owns the model and a KV cache of --parallel
 * sequences (slots). Jobs wait in a queue; at each step the engine admits what fits in the
 * free slots (first come, first served), decodes each new prompt, samples one token for every
 * running sequence, and decodes all of those tokens in one batched pass (each weight matrix
 * read once for all of them). A sequence that ends frees its slot for the next job at the next
 * step. sk_model_decode_batch gives every row the bits of its sequence decoded alone, so a
 * reply depends only on its own prompt and seed, never on the batch.
 *
 * The prompt cache: a slot remembers the prompt it last decoded; a new prompt goes to the free
 * slot that shares the longest prefix with it and decodes from there, kept to a multiple of
 * SK_DECODE_CHUNK inside the old prompt, which gives the bits of decoding it anew. */
#include "serve.h"
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_engine {
    gen_decoder dec;
    int n_slots, V;
    srv_job **slot_job;           /* the job running in each slot, or NULL */
    srv_seq **slot_seq;
    int32_t **slot_tok;           /* the prompt each slot decoded last */
    size_t *slot_n, *slot_exact;  /* its length; the prefix a new prompt may keep */
    long *slot_used, stamp;       /* when each slot was last given out */
    long admitted;                /* jobs admitted so far (their order) */
    float *logits;                /* n_slots x V: each slot's next-token logits */
    float *lgb;                   /* a batch's logits */
    float **raw;                  /* per slot, when asked: the model's logits before logit_bias and penalties */
    unsigned char *allow;         /* n_slots x V: the tokens response_format allows each slot */
    int32_t *draw;                /* a step's draws, and their logprobs */
    srv_lp *draw_lp;
    int *cand;
    int *act;
    int32_t *nexts;
    srv_job **running;            /* the jobs holding slots */
    int n_running;
    srv_job *head, *tail;         /* the queue */
    int queued;
    int stop;                     /* 1: draining, 2: ending every job now */
    double deadline;              /* when draining turns into ending */
    pthread_mutex_t mu;
    pthread_cond_t work;
    pthread_t th;
    int th_started;
    int started;                  /* the thread made its decoder: 1, or -1 with start_err */
    char start_err[512];
};

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->logprobs = -1;
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    return j;
}

int srv_job_size(srv_job *j, int n_prompts, int n) {
    j->prompts = calloc(n_prompts, sizeof *j->prompts);
    j->prompt_n = calloc(n_prompts, sizeof *j->prompt_n);
    j->prompt_text = calloc(n_prompts, sizeof *j->prompt_text);
    j->seqs = calloc((size_t)n_prompts * n, sizeof *j->seqs);
    if (!j->prompts || !j->prompt_n || !j->prompt_text || !j->seqs) return 1;
    j->n_prompts = n_prompts; j->n = n; j->n_seq = n_prompts * n;
    for (int i = 0; i < j->n_seq; i++) {
        j->seqs[i].prompt = i / n; j->seqs[i].index = i; j->seqs[i].slot = -1;
    }
    return 0;
}

void srv_job_free(srv_job *j) {
    if (!j) return;
    for (int p = 0; p < j->n_prompts; p++) {
        if (j->prompts) free(j->prompts[p]);
        if (j->prompt_text) free(j->prompt_text[p]);
    }
    for (int i = 0; j->seqs && i < j->n_seq; i++) {
        free(j->seqs[i].ids); free(j->seqs[i].text); free(j->seqs[i].lps); free(j->seqs[i].ends);
        sk_jg_match_free(j->seqs[i].jm);
    }
    sk_jg_free(j->grammar);
    for (int k = 0; k < j->n_tools; k++) { if (j->tool_names) free(j->tool_names[k]); if (j->tool_params) free(j->tool_params[k]); }
    free(j->tool_names); free(j->tool_params);
    for (int p = 0; j->prompt_lps && p < j->n_prompts; p++) free(j->prompt_lps[p]);
    free(j->prompt_lps);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->embeds);
    free(j->prompts); free(j->prompt_n); free(j->prompt_text); free(j->seqs); free(j->bias_id); free(j->bias);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_lock(serve *s) { pthread_mutex_lock(&s->eng->mu); }
void srv_unlock(serve *s) { pthread_mutex_unlock(&s->eng->mu); }

void srv_wait(serve *s, srv_job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L; ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &s->eng->mu, &ts);
}

void srv_release(serve *s, srv_job *j) {
    srv_lock(s);
    int last = --j->refs == 0;
    srv_unlock(s);
    if (last) srv_job_free(j);
}

static void unqueue(srv_engine *e, srv_job *j);

/* under the lock: the job is over (its slots free, its sequences still queued dropped); the
 * engine's reference goes */
static void job_end(srv_engine *e, srv_job *j) {
    if (j->in_queue) unqueue(e, j);
    for (int i = 0; i < j->n_seq; i++) {
        srv_seq *q = &j->seqs[i];
        if (q->slot >= 0) { e->slot_job[q->slot] = NULL; e->slot_seq[q->slot] = NULL; q->slot = -1; }
        if (!q->finish) q->finish = SRV_LENGTH;
        j->completion_tokens += q->made;
    }
    for (int r = 0; r < e->n_running; r++)
        if (e->running[r] == j) { e->running[r] = e->running[--e->n_running]; break; }
    j->state = SRV_DONE;
    pthread_cond_broadcast(&j->cv);
    if (--j->refs == 0) srv_job_free(j);
}

static void job_fail(srv_engine *e, srv_job *j, const char *code, const char *msg) {
    j->failed = 1;
    j->err_code = code;
    snprintf(j->err, sizeof j->err, "%s", msg);
    job_end(e, j);
}

static int free_slots(const srv_engine *e);

int srv_submit(serve *s, srv_job *j) {
    srv_engine *e = s->eng;
    srv_lock(s);
    /* --queue: how many may wait for a slot, beyond those that take a free one now */
    if (e->stop || e->queued >= s->o->queue + free_slots(e)) { const int rc = e->stop ? -2 : -1; srv_unlock(s); return rc; }
    j->refs++;
    j->state = SRV_QUEUED;
    j->t_submit = sk_now();
    if (e->tail) e->tail->next = j; else e->head = j;
    e->tail = j;
    e->queued++;
    j->in_queue = 1;
    pthread_cond_signal(&e->work);
    srv_unlock(s);
    return 0;
}

/* under the lock: the job leaves the queue */
static void unqueue(srv_engine *e, srv_job *j) {
    srv_job **p = &e->head, *prev = NULL;
    while (*p && *p != j) { prev = *p; p = &(*p)->next; }
    if (!*p) return;
    *p = j->next;
    if (e->tail == j) e->tail = prev;
    j->next = NULL;
    j->in_queue = 0;
    e->queued--;
}

void srv_cancel(serve *s, srv_job *j) {
    srv_engine *e = s->eng;
    if (j->state == SRV_DONE) return;
    j->cancelled = 1;
    if (j->state == SRV_QUEUED) { unqueue(e, j); job_fail(e, j, NULL, "cancelled: the client went away"); return; }
    pthread_cond_signal(&e->work);                     /* running: its slots free at the next step */
}

void srv_tokens(const srv_job *j, int *made, int *sent) {
    *made = *sent = 0;
    for (int i = 0; i < j->n_seq; i++) { *made += j->seqs[i].made; *sent += j->seqs[i].sent_tokens; }
}

void srv_load(serve *s, int *running, int *queued, int *slots) {
    srv_engine *e = s->eng;
    int busy = 0;
    for (int a = 0; a < e->n_slots; a++) busy += e->slot_seq[a] != NULL;
    *running = busy; *queued = e->queued; *slots = e->n_slots;
}

/* ------------------------------------------------------------ admission */

/* how much of slot a's cache a new prompt p[0..n) can keep, bit for bit */
static size_t reusable(const srv_engine *e, int a, const int32_t *p, size_t n) {
    size_t i = 0, lim = e->slot_exact[a];
    while (i < lim && i < n && e->slot_tok[a][i] == p[i]) i++;
    if (i >= n) i = n - 1;                             /* the last token runs, for its logits */
    return i / SK_DECODE_CHUNK * SK_DECODE_CHUNK;
}

/* a free slot: the one keeping most of p (when p is given), else the least recently used */
static int pick_slot(srv_engine *e, const int32_t *p, size_t n) {
    int best = -1;
    size_t keep = 0;
    for (int a = 0; a < e->n_slots; a++) {
        if (e->slot_job[a]) continue;
        size_t k = p ? reusable(e, a, p, n) : 0;
        if (best < 0 || k > keep || (k == keep && e->slot_used[a] < e->slot_used[best])) { best = a; keep = k; }
    }
    return best;
}

static int free_slots(const srv_engine *e) {
    int f = 0;
    for (int a = 0; a < e->n_slots; a++) f += e->slot_job[a] == NULL;
    return f;
}

/* under the lock: the queue's sequences take the free slots in order (none jumps the queue): a
 * job whose sequences do not all fit starts with those that do and keeps its place at the head
 * for the rest. A sequence admitted with an earlier choice of its prompt shares that one's
 * prompt decoding (its lead); else it decodes the prompt itself. The jobs that got slots are
 * listed in out (once each). */
static int admit(srv_engine *e, srv_job **out) {
    int n = 0;
    while (e->head && e->head->embed && !e->stop && n < e->n_slots) {   /* embeddings take no slot */
        srv_job *j = e->head;
        unqueue(e, j);
        j->state = SRV_RUNNING;
        out[n++] = j;
    }
    while (e->head && !e->stop && free_slots(e) > 0 && !e->head->embed && n < e->n_slots) {
        srv_job *j = e->head;
        int lead = -1, got = 0;
        for (int i = 0; i < j->n_seq && free_slots(e) > 0; i++) {
            srv_seq *q = &j->seqs[i];
            if (q->admitted) continue;
            if (lead < 0 || j->seqs[lead].prompt != q->prompt) lead = i;
            q->lead = lead;
            int a = pick_slot(e, lead == i ? j->prompts[q->prompt] : NULL, j->prompt_n[q->prompt]);
            q->slot = a; q->admitted = 1;
            e->slot_job[a] = j; e->slot_seq[a] = q;
            e->slot_used[a] = ++e->stamp;
            got = 1;
        }
        int rest = 0;
        for (int i = 0; i < j->n_seq; i++) rest += !j->seqs[i].admitted;
        if (!rest) unqueue(e, j);
        if (got) {
            if (j->state != SRV_RUNNING) { j->state = SRV_RUNNING; e->running[e->n_running++] = j; }
            out[n++] = j;
        }
        if (rest) break;
    }
    return n;
}

static void logprobs_of(const float *lg, int V, int32_t id, int top, srv_lp *out);

/* echo with logprobs: the log-softmax at each prompt position of the model's forward pass over
 * the whole prompt (sk_model_forward, as skiplm eval), the first token having none */
static int prompt_logprobs(serve *s, srv_job *j) {
    const int V = s->V;
    for (int p = 0; p < j->n_prompts; p++) {
        const int32_t *ids = j->prompts[p];
        const size_t n = j->prompt_n[p];
        srv_lp *l = calloc(n, sizeof *l);
        if (!l) return sk_error(SK_ENOMEM, "out of memory");
        j->prompt_lps[p] = l;
        if (n > 1) {
            if (sk_mem_check(sizeof(float) * n * (size_t)V, "the prompt's logits (echo with logprobs)")) return 1;
            float *lg = malloc(sizeof(float) * n * (size_t)V), loss;
            if (!lg) return sk_error(SK_ENOMEM, "out of memory for the prompt's logits");
            if (sk_model_forward(s->m, ids, NULL, 1, (int)n, &loss, lg)) { free(lg); return 1; }
            for (size_t i = 1; i < n; i++) logprobs_of(lg + (i - 1) * (size_t)V, V, ids[i], j->logprobs, &l[i]);
            free(lg);
        }
        l[0].id = ids[0];
        l[0].lp = NAN;
        size_t end = 0;
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            if (!sk_tok_decode_one(s->tok, ids[i], &len)) len = 0;
            l[i].end = end += len;
        }
    }
    return 0;
}

/* outside the lock, at admission: the sequences that just got slots (admitted, no ids yet)
 * start: a leader keeps what its slot's cache shares with the prompt (the rest is decoded by
 * prefill_some); every sequence's ids start with its prompt. A job's usage counts each prompt
 * once, when its first choice starts. */
static int start_job(serve *s, srv_job *j) {
    srv_engine *e = s->eng;
    if (!j->order) j->order = ++e->admitted;
    int fresh = 0;
    for (int i = 0; i < j->n_seq; i++) {
        srv_seq *q = &j->seqs[i];
        if (!q->admitted || q->ids) continue;
        const int32_t *ids = j->prompts[q->prompt];
        const size_t n = j->prompt_n[q->prompt];
        if (q->lead == i) {
            const int a = q->slot;
            const size_t keep = reusable(e, a, ids, n);
            if (keep < (size_t)gen_dec_pos(&e->dec, a)) gen_dec_truncate(&e->dec, a, (int)keep);
            int32_t *t = realloc(e->slot_tok[a], sizeof(int32_t) * (n ? n : 1));
            if (!t) return sk_error(SK_ENOMEM, "out of memory");
            memcpy(t, ids, sizeof(int32_t) * n);
            e->slot_tok[a] = t; e->slot_n[a] = n; e->slot_exact[a] = keep;
            q->pf = keep;
            if (i % j->n == 0) { j->prompt_tokens += (int)n; j->cached_tokens += (int)keep; fresh = 1; }
        }
        q->cap = n + (size_t)j->max_tokens + 1;
        if (!(q->ids = malloc(sizeof(int32_t) * q->cap))) return sk_error(SK_ENOMEM, "out of memory");
        memcpy(q->ids, ids, sizeof(int32_t) * n);
        q->n = q->n_prompt = n;
        q->rng = j->seed + (uint64_t)(i % j->n);      /* choice k draws as sample --seed SEED+k */
        if (j->grammar && !(q->jm = sk_jg_match_new(j->grammar, s->jv))) return sk_error(SK_ENOMEM, "out of memory");
    }
    if (j->prompt_lps && !j->prompt_lps_ready && fresh) {
        if (prompt_logprobs(s, j)) return 1;
        pthread_mutex_lock(&e->mu);
        j->prompt_lps_ready = 1;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&e->mu);
    }
    return 0;
}

/* outside the lock: /v1/embeddings: each prompt through the model's forward pass (as skiplm
 * eval), its final norm's output averaged over the positions, then scaled to length 1 */
static int embed_job(serve *s, srv_job *j) {
    const int C = sk_model_config(s->m)->n_embd;
    if (!(j->embeds = calloc((size_t)j->n_prompts * C, sizeof(float)))) return sk_error(SK_ENOMEM, "out of memory");
    j->dim = C;
    for (int p = 0; p < j->n_prompts; p++) {
        const int T = (int)j->prompt_n[p];
        float loss;
        if (sk_model_forward(s->m, j->prompts[p], NULL, 1, T, &loss, NULL)) return 1;
        const float *h = sk_model_hidden(s->m);
        if (!h) return sk_error(SK_EINVAL, "this model keeps no fp32 hidden states");
        float *o = j->embeds + (size_t)p * C;
        double norm = 0;
        for (int c = 0; c < C; c++) {
            double sum = 0;
            for (int t = 0; t < T; t++) sum += h[(size_t)t * C + c];
            o[c] = (float)(sum / T);
            norm += (double)o[c] * o[c];
        }
        const double inv = norm > 0 ? 1.0 / sqrt(norm) : 0.0;
        for (int c = 0; c < C; c++) o[c] = (float)(o[c] * inv);
        j->prompt_tokens += T;
    }
    return 0;
}

/* a prompt decoded whole by its leader: copied to the slots of the sequences it leads, which
 * all may draw now */
static int prompt_done(srv_engine *e, srv_job *j, int lead) {
    srv_seq *q0 = &j->seqs[lead];
    const int a = q0->slot, V = e->V;
    const size_t n = j->prompt_n[q0->prompt];
    for (int k = lead + 1; k < j->n_seq; k++) {
        srv_seq *q = &j->seqs[k];
        if (q->lead != lead || !q->admitted || q->ready) continue;
        const int b = q->slot;
        if (sk_kvcache_seq_copy(e->dec.kv, b, a)) return 1;
        memcpy(e->logits + (size_t)b * V, e->logits + (size_t)a * V, sizeof(float) * V);
        int32_t *tb = realloc(e->slot_tok[b], sizeof(int32_t) * (n ? n : 1));
        if (!tb) return sk_error(SK_ENOMEM, "out of memory");
        memcpy(tb, j->prompts[q0->prompt], sizeof(int32_t) * n);
        e->slot_tok[b] = tb; e->slot_n[b] = n; e->slot_exact[b] = e->slot_exact[a];
        q->ready = 1;
    }
    q0->ready = 1;
    return 0;
}

/* Outside the lock: up to `budget` prompt tokens decoded, the earliest admitted prompts first,
 * in pieces that start at multiples of SK_DECODE_CHUNK (so the bits are a whole prompt's), and
 * between two pieces the running sequences take a step: a long prompt delays the others' next
 * token by one piece, not by its whole length. A failing job is listed in *bad. */
static int prefill_some(serve *s, int budget, srv_job **bad) {
    srv_engine *e = s->eng;
    while (budget > 0) {
        srv_job *j = NULL;
        int p = -1;
        for (int r = 0; r < e->n_running; r++) {      /* the earliest admitted prompt not yet decoded */
            srv_job *c = e->running[r];
            if (c->cancelled || (j && c->order > j->order)) continue;
            for (int k = 0; k < c->n_seq; k++)
                if (c->seqs[k].admitted && c->seqs[k].lead == k && !c->seqs[k].ready && c->seqs[k].ids) { j = c; p = k; break; }
        }
        if (!j) return 0;
        srv_seq *q0 = &j->seqs[p];
        const size_t n = j->prompt_n[q0->prompt], whole = (size_t)budget / SK_DECODE_CHUNK * SK_DECODE_CHUNK;
        const size_t run = n - q0->pf < whole ? n - q0->pf : whole;
        if (!run) return 0;                             /* less than a piece left: the next step */
        const int a = q0->slot;
        if (gen_dec_run(&e->dec, a, j->prompts[q0->prompt] + q0->pf, (int)run, e->logits + (size_t)a * e->V)) { *bad = j; return 1; }
        q0->pf += run;
        e->slot_exact[a] = q0->pf / SK_DECODE_CHUNK * SK_DECODE_CHUNK;
        if (q0->pf == n && prompt_done(e, j, p)) { *bad = j; return 1; }
        budget -= (int)run;
    }
    return 0;
}

/* ------------------------------------------------------------ sampling */

/* log-softmax of the model's logits at id, and the top most likely ids */
static void logprobs_of(const float *lg, int V, int32_t id, int top, srv_lp *out) {
    float mx = lg[0];
    for (int v = 1; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)lg[v] - mx);
    const double lse = mx + log(sum);
    out->id = id;
    out->lp = (float)(lg[id] - lse);
    out->n_top = 0;
    for (int v = 0; v < V && top > 0; v++) {           /* insertion into the top list, ties to the lower id */
        int k = out->n_top;
        if (k == top && !(lg[v] > lg[out->top_id[k - 1]])) continue;
        if (k < top) out->n_top++;
        else k--;
        while (k > 0 && lg[v] > lg[out->top_id[k - 1]]) { out->top_id[k] = out->top_id[k - 1]; k--; }
        out->top_id[k] = v;
    }
    for (int k = 0; k < out->n_top; k++) out->top_lp[k] = (float)(lg[out->top_id[k]] - lse);
}

/* logit_bias, then the presence and frequency penalties over the new tokens, in place */
static void adjust(const srv_job *j, const srv_seq *q, float *lg, int V) {
    for (int b = 0; b < j->n_bias; b++) lg[j->bias_id[b]] += j->bias[b];
    if (j->presence == 0.0f && j->frequency == 0.0f) return;
    for (size_t i = q->n_prompt; i < q->n; i++) {
        int32_t t = q->ids[i];
        int seen = 0;
        for (size_t k = q->n_prompt; k < i && !seen; k++) seen = q->ids[k] == t;
        lg[t] -= j->frequency + (seen ? 0.0f : j->presence);
    }
    (void)V;
}

static int grow_text(srv_seq *q, size_t more) {
    if (q->len + more + 1 <= q->text_cap) return 0;
    size_t nc = (q->len + more + 1) * 2;
    char *t = realloc(q->text, nc);
    if (!t) return 1;
    q->text = t; q->text_cap = nc;
    return 0;
}

/* under the lock: the token's text joins the sequence; a stop string ends it there */
static int add_text(serve *s, srv_job *j, srv_seq *q, int32_t next) {
    size_t len = 0;
    const char *t = j->chat && sk_tok_is_special(s->tok, next) ? NULL : sk_tok_decode_one(s->tok, next, &len);
    if (!t) len = 0;
    if (grow_text(q, len)) return 1;
    const size_t old = q->len;
    memcpy(q->text + q->len, t ? t : "", len);
    q->len += len;
    q->text[q->len] = 0;
    size_t cut = (size_t)-1;
    for (int k = 0; k < j->n_stop; k++) {
        size_t from = old + 1 > j->stop_len[k] ? old + 1 - j->stop_len[k] : 0;
        char *hit = memmem(q->text + from, q->len - from, j->stop[k], j->stop_len[k]);
        if (hit && (size_t)(hit - q->text) < cut) cut = (size_t)(hit - q->text);
    }
    if (cut != (size_t)-1) { q->len = cut; q->text[cut] = 0; q->finish = SRV_STOP; }
    return 0;
}

static int is_eos(const serve *s, const srv_job *j, int32_t id) {
    const int32_t *eos = j->chat ? s->chat_eos : s->eos;
    const int n_eos = j->chat ? s->n_chat_eos : s->n_eos;
    for (int k = 0; k < n_eos; k++) if (id == eos[k]) return 1;
    return 0;
}

/* response_format: the logits of the tokens the reply's JSON cannot go on with become -inf
 * (the end of the text only once the JSON is whole), within what is left of max_tokens and the
 * context: 0, or -2 out of memory, -3 no token fits (the vocabulary cannot write what the
 * schema needs), -4 the JSON is whole and nothing may follow (the reply ends) */
static int constrain(serve *s, const srv_job *j, const srv_seq *q, float *lg, unsigned char *allow) {
    const int V = s->V;
    long left = (long)j->max_tokens - q->made, room = (long)s->ctx - (long)q->n;
    int n = sk_jg_match_mask(q->jm, allow, left < room ? left : room);
    if (n < 0) return -2;
    if (sk_jg_match_complete(q->jm)) {
        const int32_t *eos = j->chat ? s->chat_eos : s->eos;
        const int n_eos = j->chat ? s->n_chat_eos : s->n_eos;
        for (int k = 0; k < n_eos; k++) if (eos[k] >= 0 && eos[k] < V && !allow[eos[k]]) { allow[eos[k]] = 1; n++; }
        if (!n) return -4;
    }
    if (!n) return -3;
    for (int v = 0; v < V; v++) if (!allow[v]) lg[v] = -INFINITY;
    return 0;
}

/* One draw for every running sequence, in parallel (each sequence has its own random stream,
 * so the draws are the same on any number of threads). Outside the lock: only the engine
 * touches a sequence's ids, random state and logits. The candidates are listed in cand, their
 * draws in e->draw (-1: max_tokens already reached, e.g. 0). */
static int draw_all(serve *s, int *cand) {
    srv_engine *e = s->eng;
    const int V = e->V, tok_v = sk_tok_vocab_size(s->tok);
    int n = 0;
    for (int a = 0; a < e->n_slots; a++)
        if (e->slot_job[a] && e->slot_seq[a]->ready && !e->slot_seq[a]->finish) cand[n++] = a;
    #pragma omp parallel for schedule(dynamic, 1) if(n > 1)
    for (int i = 0; i < n; i++) {
        const int a = cand[i];
        srv_job *j = e->slot_job[a];
        srv_seq *q = e->slot_seq[a];
        e->draw[i] = -1;
        if (q->made >= j->max_tokens) continue;
        float *lg = e->logits + (size_t)a * V;
        const float *model_lg = lg;                     /* logprobs: the model's own distribution */
        if (j->logprobs >= 0 && (j->n_bias || j->presence != 0.0f || j->frequency != 0.0f || q->jm)) {
            if (!e->raw[a] && !(e->raw[a] = malloc(sizeof(float) * V))) { e->draw[i] = -2; continue; }
            memcpy(e->raw[a], lg, sizeof(float) * V);
            model_lg = e->raw[a];
        }
        adjust(j, q, lg, V);
        if (q->jm) {
            const int r = constrain(s, j, q, lg, e->allow + (size_t)a * V);
            if (r < 0) { e->draw[i] = r; continue; }
        }
        int32_t next = sk_sample(lg, V, &j->sp, q->ids, q->n, &q->rng);
        if (next < 0) { e->draw[i] = -2; continue; }
        if (next >= tok_v) next = 0;                    /* padded rows of a wider model */
        if (q->jm && !is_eos(s, j, next) && sk_jg_match_feed_token(q->jm, next)) { e->draw[i] = -3; continue; }
        e->draw[i] = next;
        if (j->logprobs >= 0) logprobs_of(model_lg, V, next, j->logprobs, &e->draw_lp[i]);
    }
    return n;
}

/* under the lock: each draw joins its sequence (an end-of-sequence token, max_tokens or a stop
 * string ends it); those that go on are listed in act, their tokens in nexts */
static int take_draws(serve *s, const int *cand, int n) {
    srv_engine *e = s->eng;
    int na = 0;
    for (int i = 0; i < n; i++) {
        const int a = cand[i];
        srv_job *j = e->slot_job[a];
        srv_seq *q = e->slot_seq[a];
        if (!j || j->cancelled || q->finish) continue;
        const int32_t next = e->draw[i];
        if (next == -2) return sk_error(SK_ENOMEM, "out of memory while sampling");
        if (next == -1) { q->finish = SRV_LENGTH; continue; }
        if (next == -4) { q->finish = SRV_STOP; continue; }
        if (next == -3) { job_fail(e, j, NULL, "no token of the vocabulary can continue the JSON of response_format"); continue; }
        const int32_t *eos = j->chat ? s->chat_eos : s->eos;
        const int n_eos = j->chat ? s->n_chat_eos : s->n_eos;
        for (int k = 0; k < n_eos; k++)
            if (next == eos[k]) q->finish = SRV_STOP;     /* not part of the text, as sample */
        if (q->finish) continue;
        q->ids[q->n++] = next;
        q->made++;
        if (!j->t_first) j->t_first = sk_now();
        if (add_text(s, j, q, next)) return sk_error(SK_ENOMEM, "out of memory for a reply");
        if (q->made > q->ends_cap) {
            int nc = q->ends_cap ? 2 * q->ends_cap : 32;
            size_t *g = realloc(q->ends, sizeof *g * nc);
            if (!g) return sk_error(SK_ENOMEM, "out of memory for a reply");
            q->ends = g; q->ends_cap = nc;
        }
        q->ends[q->made - 1] = q->len;
        if (q->jm && !q->finish && sk_jg_match_done(q->jm)) q->finish = SRV_STOP;   /* the JSON is whole: only the end may follow */
        if (j->logprobs >= 0) {
            if (q->n_lp == q->lp_cap) {
                int nc = q->lp_cap ? 2 * q->lp_cap : 32;
                srv_lp *g = realloc(q->lps, sizeof *g * nc);
                if (!g) return sk_error(SK_ENOMEM, "out of memory for logprobs");
                q->lps = g; q->lp_cap = nc;
            }
            q->lps[q->n_lp] = e->draw_lp[i];
            q->lps[q->n_lp++].end = q->len;
        }
        if (!q->finish && (q->made >= j->max_tokens || q->n >= (size_t)s->ctx)) q->finish = SRV_LENGTH;
        if (q->finish) continue;
        e->act[na] = a; e->nexts[na++] = next;
    }
    return na;
}

/* under the lock: jobs whose sequences all ended, or that were cancelled, end; the others
 * hear that their output grew */
static void settle(srv_engine *e) {
    for (int r = 0; r < e->n_running;) {
        srv_job *j = e->running[r];
        int going = 0;
        for (int i = 0; i < j->n_seq; i++) {
            srv_seq *q = &j->seqs[i];
            going += !q->finish;
            if (q->finish && q->slot >= 0) { e->slot_job[q->slot] = NULL; e->slot_seq[q->slot] = NULL; q->slot = -1; }   /* its slot frees now */
        }
        if (j->cancelled || e->stop == 2 || (e->stop && j->in_queue)) {
            job_fail(e, j, j->cancelled ? NULL : "server_shutting_down",
                     j->cancelled ? "cancelled: the client went away"
                     : e->stop == 2 ? "the server is shutting down (--grace ran out)" : "the server is shutting down");
            continue;                                   /* job_end moved the last job here */
        }
        if (!going) { job_end(e, j); continue; }
        pthread_cond_broadcast(&j->cv);
        r++;
    }
}

/* ------------------------------------------------------------ the thread */

/* outside the lock: the job fails with msg and the library's message */
static void fail_locked(srv_engine *e, srv_job *j, const char *msg) {
    char m[256];
    snprintf(m, sizeof m, "%s: %s", msg, sk_last_error());
    pthread_mutex_lock(&e->mu);
    job_fail(e, j, NULL, m);
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg) {
    serve *s = arg;
    srv_engine *e = s->eng;
    /* The decoder is made here, not in the thread that starts the engine: its bf16 or 8-bit copy
     * of the weights is made in OpenMP loops, and a second thread with its own OpenMP team makes
     * libgomp count more threads than cores and put its workers to sleep between loops (a futex
     * wake-up at every matrix product: bf16 decoding measured at half its speed). Every
     * OpenMP loop of the server runs on this thread. */
    const int rc = gen_dec_new(&e->dec, s->m, s->o->use_cuda, s->o->q8 ? 3 : s->o->bf16 ? 2 : 0, s->o->kv_bf16, s->ctx, 1, e->n_slots);
    pthread_mutex_lock(&e->mu);
    e->started = rc ? -1 : 1;
    if (rc) snprintf(e->start_err, sizeof e->start_err, "%s", sk_last_error());
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
    if (rc) return NULL;
    srv_job **fresh = malloc(sizeof *fresh * (size_t)e->n_slots);
    int trimmed = 1;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        if (e->stop == 1 && sk_now() >= e->deadline) e->stop = 2;
        settle(e);
        while (!e->n_running && !e->head && !e->stop) {
            if (!trimmed) { malloc_trim(0); trimmed = 1; }   /* idle: what the requests took goes back */
            pthread_cond_wait(&e->work, &e->mu);
        }
        if (e->stop && !e->n_running) { pthread_mutex_unlock(&e->mu); break; }
        trimmed = 0;
        int nf = fresh ? admit(e, fresh) : 0;
        pthread_mutex_unlock(&e->mu);
        srv_job *bad = NULL;
        for (int i = 0; i < nf; i++) {
            if (fresh[i]->embed) {
                if (embed_job(s, fresh[i])) fail_locked(e, fresh[i], "the embeddings failed");
                else { pthread_mutex_lock(&e->mu); job_end(e, fresh[i]); pthread_mutex_unlock(&e->mu); }
            } else if (start_job(s, fresh[i])) {
                fail_locked(e, fresh[i], "starting the request failed");
            }
        }
        if (prefill_some(s, s->o->prefill, &bad)) fail_locked(e, bad, "decoding the prompt failed");
        const int nd = draw_all(s, e->cand);
        pthread_mutex_lock(&e->mu);
        int na = take_draws(s, e->cand, nd);
        if (na < 0) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", sk_last_error());
            while (e->n_running) job_fail(e, e->running[0], NULL, msg);
        }
        settle(e);
        pthread_mutex_unlock(&e->mu);
        if (na <= 0) continue;
        /* one batched pass: every running sequence's token; each row lands in its slot's logits */
        if (gen_dec_batch(&e->dec, e->act, e->nexts, na, e->lgb)) {
            char msg[256];
            snprintf(msg, sizeof msg, "decoding failed: %s", sk_last_error());
            pthread_mutex_lock(&e->mu);
            for (int i = 0; i < na; i++)
                if (e->slot_job[e->act[i]]) job_fail(e, e->slot_job[e->act[i]], NULL, msg);
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        for (int i = 0; i < na; i++)
            memcpy(e->logits + (size_t)e->act[i] * e->V, e->lgb + (size_t)i * e->V, sizeof(float) * e->V);
    }
    free(fresh);
    return NULL;
}

int srv_engine_start(serve *s) {
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return sk_error(SK_ENOMEM, "out of memory");
    s->eng = e;
    const int n = e->n_slots = s->o->parallel, V = e->V = s->V;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    if (sk_mem_check(sizeof(float) * 2 * (size_t)n * V, "the logits of --parallel sequences")) return 1;
    e->slot_job = calloc(n, sizeof *e->slot_job);
    e->slot_seq = calloc(n, sizeof *e->slot_seq);
    e->slot_tok = calloc(n, sizeof *e->slot_tok);
    e->slot_n = calloc(n, sizeof *e->slot_n);
    e->slot_exact = calloc(n, sizeof *e->slot_exact);
    e->slot_used = calloc(n, sizeof *e->slot_used);
    e->logits = malloc(sizeof(float) * (size_t)n * V);
    e->lgb = malloc(sizeof(float) * (size_t)n * V);
    e->raw = calloc(n, sizeof *e->raw);
    e->allow = malloc((size_t)n * V);
    e->draw = malloc(sizeof(int32_t) * n);
    e->draw_lp = malloc(sizeof(srv_lp) * n);
    e->cand = malloc(sizeof(int) * n);
    e->act = malloc(sizeof(int) * n);
    e->nexts = malloc(sizeof(int32_t) * n);
    e->running = calloc(n + 1, sizeof *e->running);   /* the jobs holding slots, and the head's part-admitted one */
    if (!e->slot_job || !e->slot_seq || !e->slot_tok || !e->slot_n || !e->slot_exact || !e->slot_used || !e->logits ||
        !e->lgb || !e->raw || !e->allow || !e->draw || !e->draw_lp || !e->cand || !e->act || !e->nexts || !e->running)
        return sk_error(SK_ENOMEM, "out of memory");
    if (pthread_create(&e->th, NULL, engine_main, s)) return sk_error(SK_EIO, "cannot start the engine's thread");
    e->th_started = 1;
    pthread_mutex_lock(&e->mu);
    while (!e->started) pthread_cond_wait(&e->work, &e->mu);
    pthread_mutex_unlock(&e->mu);
    if (e->started < 0) {
        pthread_join(e->th, NULL);
        e->th_started = 0;
        return sk_error(SK_EINVAL, "%s", e->start_err);
    }
    return 0;
}

const char *srv_kv_bytes(serve *s, size_t *bytes, size_t *full) { return gen_dec_bytes(&s->eng->dec, bytes, full); }

void srv_engine_stop(serve *s, int grace) {
    srv_engine *e = s->eng;
    if (!e) return;
    srv_lock(s);
    for (srv_job *j = e->head, *next; j; j = next) {   /* the queue fails now (a job that holds slots too: at the next step) */
        next = j->next;
        if (j->state == SRV_QUEUED) { unqueue(e, j); job_fail(e, j, "server_shutting_down", "the server is shutting down"); }
    }
    if (e->stop < 1) { e->stop = 1; e->deadline = sk_now() + grace; }
    if (grace <= 0) e->stop = 2;
    pthread_cond_signal(&e->work);
    srv_unlock(s);
}

void srv_engine_free(serve *s) {
    srv_engine *e = s->eng;
    if (!e) return;
    if (e->th_started) {
        srv_engine_stop(s, 0);
        pthread_join(e->th, NULL);
    }
    for (int a = 0; a < e->n_slots && e->slot_tok; a++) free(e->slot_tok[a]);
    for (int a = 0; a < e->n_slots && e->raw; a++) free(e->raw[a]);
    free(e->slot_job); free(e->slot_seq); free(e->slot_tok); free(e->slot_n); free(e->slot_exact); free(e->slot_used);
    free(e->logits); free(e->lgb); free(e->raw); free(e->allow); free(e->draw); free(e->draw_lp); free(e->cand); free(e->act); free(e->nexts); free(e->running);
    gen_dec_free(&e->dec);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    free(e);
    s->eng = NULL;
}
