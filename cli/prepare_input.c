/* prepare's inputs as a stream of pieces (prepare.h): files, folders, stdin; plain or gzip
 * (zlib, where the build has it); text or JSON Lines. Memory: one read buffer of at most a
 * piece (or the longest JSONL line) at a time. */
#include "prepare.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef SK_HAVE_ZLIB
#include <zlib.h>
#endif

#define READ_CHUNK (1u << 20)

struct prep_source {
    cli_docs files;          /* inputs in order, "-" for stdin */
    int cur;                 /* index of the open file, -1 before the first */
    int jsonl_stdin, chat;
    size_t piece_max;
    /* the open file */
    FILE *fp;
#ifdef SK_HAVE_ZLIB
    gzFile gz;
#endif
    int jsonl, eof, started;
    uint64_t line;
    char *buf; size_t len, cap, pos;     /* buf[pos..len): read, not yet handed out */
    uint64_t done_prev, total;           /* bytes of the files before the open one; of all (0: unknown) */
};

int prep_have_zlib(void) {
#ifdef SK_HAVE_ZLIB
    return 1;
#else
    return 0;
#endif
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}
static int is_gz(const char *name) { return ends_with(name, ".gz"); }

static const char *cur_name(const prep_source *s) {
    return strcmp(s->files.v[s->cur], "-") ? s->files.v[s->cur] : "(stdin)";
}

static int push(cli_docs *l, char *name) {
    if (!name) return 1;
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 64;
        char **nv = realloc(l->v, sizeof(char *) * nc);
        if (!nv) { free(name); return 1; }
        l->v = nv; l->cap = nc;
    }
    l->v[l->n++] = name;
    return 0;
}

int prep_source_open(prep_source **out, char *const *inputs, int n, int is_default, int jsonl_stdin, int chat,
                     size_t piece_max) {
    static const char *const suffixes[] = {".txt", ".jsonl", ".txt.gz", ".jsonl.gz", NULL};
    prep_source *s = calloc(1, sizeof *s);
    if (!s) return sk_error(SK_ENOMEM, "out of memory");
    *out = s;
    s->cur = -1; s->jsonl_stdin = jsonl_stdin; s->chat = chat; s->piece_max = piece_max;
    int stdin_seen = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(inputs[i], "-")) {
            if (stdin_seen++) return sk_error(SK_EINVAL, "'-' (stdin) given twice");
            if (push(&s->files, strdup("-"))) return sk_error(SK_ENOMEM, "out of memory");
            continue;
        }
        cli_docs d;
        if (cli_list_files(inputs[i], suffixes, is_default, &d)) { cli_docs_free(&d); return SK_EIO; }
        for (int k = 0; k < d.n; k++) {
            if (is_gz(d.v[k]) && !prep_have_zlib()) {
                int rc = sk_error(SK_EINVAL, "%s: a gzip file, and this skiplm was built without zlib (install zlib1g-dev "
                                  "and rebuild, or give it decompressed: zcat FILE | skiplm prepare -)", d.v[k]);
                cli_docs_free(&d);
                return rc;
            }
            struct stat st;
            if (stat(d.v[k], &st) == 0) s->total += (uint64_t)st.st_size;
            char *name = d.v[k];
            d.v[k] = NULL;
            if (push(&s->files, name)) { cli_docs_free(&d); return sk_error(SK_ENOMEM, "out of memory"); }
            d.v[k] = NULL;
        }
        cli_docs_free(&d);
    }
    if (stdin_seen) s->total = 0;
    return SK_OK;
}

static void close_file(prep_source *s) {
#ifdef SK_HAVE_ZLIB
    if (s->gz) gzclose(s->gz);
    s->gz = NULL;
#endif
    if (s->fp && s->fp != stdin) fclose(s->fp);
    s->fp = NULL;
}

/* bytes of the open file read so far (compressed bytes for gzip) */
static uint64_t file_done(const prep_source *s) {
#ifdef SK_HAVE_ZLIB
    if (s->gz) { long o = (long)gzoffset(s->gz); return o > 0 ? (uint64_t)o : 0; }
#endif
    if (s->fp && s->fp != stdin) { long o = ftell(s->fp); return o > 0 ? (uint64_t)o : 0; }
    return 0;
}

uint64_t prep_source_done(const prep_source *s) { return s->done_prev + (s->cur >= 0 ? file_done(s) : 0); }
uint64_t prep_source_total(const prep_source *s) { return s->total; }

/* Open input i. */
static int open_file(prep_source *s, int i) {
    s->cur = i;
    s->eof = 0; s->line = 0; s->len = s->pos = 0; s->started = 0;
    const char *name = s->files.v[i];
    s->jsonl = !strcmp(name, "-") ? s->jsonl_stdin || s->chat : s->chat || ends_with(name, ".jsonl") || ends_with(name, ".jsonl.gz");
#ifdef SK_HAVE_ZLIB
    if (is_gz(name)) {
        s->gz = gzopen(name, "rb");
        if (!s->gz) return sk_error(SK_EIO, "%s: %s", name, strerror(errno ? errno : ENOMEM));
        gzbuffer(s->gz, 1 << 18);
        return SK_OK;
    }
#endif
    s->fp = !strcmp(name, "-") ? stdin : fopen(name, "rb");
    if (!s->fp) return sk_error(SK_EIO, "%s: %s", name, strerror(errno));
    return SK_OK;
}

/* Read more into buf (keeping buf[pos..len)); sets eof at the end of the file. */
static int fill(prep_source *s) {
    if (s->pos > 0) {
        memmove(s->buf, s->buf + s->pos, s->len - s->pos);
        s->len -= s->pos; s->pos = 0;
    }
    if (s->len + READ_CHUNK + 1 > s->cap) {
        size_t nc = s->cap ? s->cap : READ_CHUNK + 1;
        while (nc < s->len + READ_CHUNK + 1) nc *= 2;
        char *nb = realloc(s->buf, nc);
        if (!nb) return sk_error(SK_ENOMEM, "%s: out of memory for a line of %zu bytes", cur_name(s), s->len);
        s->buf = nb; s->cap = nc;
    }
    size_t r;
#ifdef SK_HAVE_ZLIB
    if (s->gz) {
        int k = gzread(s->gz, s->buf + s->len, READ_CHUNK);
        if (k < 0) { int e; const char *m = gzerror(s->gz, &e); return sk_error(SK_EIO, "%s: %s", cur_name(s), m); }
        r = (size_t)k;
    } else
#endif
    {
        r = fread(s->buf + s->len, 1, READ_CHUNK, s->fp);
        if (r == 0 && ferror(s->fp)) return sk_error(SK_EIO, "%s: read error: %s", cur_name(s), strerror(errno));
    }
    s->len += r;
    if (r == 0) s->eof = 1;
    return SK_OK;
}

static int emit(prep_piece *p, const char *data, size_t n) {
    p->data = malloc(n + 1);
    if (!p->data) return sk_error(SK_ENOMEM, "out of memory");
    memcpy(p->data, data, n);
    p->data[n] = 0; p->len = n;
    return SK_OK;
}

/* The next JSONL line of the open file that is not blank: 1, or 0 at its end. */
static int next_line(prep_source *s, prep_piece *p) {
    for (;;) {
        char *nl = s->len > s->pos ? memchr(s->buf + s->pos, '\n', s->len - s->pos) : NULL;
        size_t end;
        if (!nl) {
            if (!s->eof) { if (fill(s)) return -1; continue; }
            if (s->pos == s->len) return 0;
            end = s->len;                      /* the last line has no newline */
        } else end = (size_t)(nl - s->buf);
        size_t a = s->pos, b = end;
        s->pos = nl ? end + 1 : end;
        s->line++;
        if (b > a && s->buf[b - 1] == '\r') b--;
        int blank = 1;
        for (size_t i = a; i < b && blank; i++) blank = s->buf[i] == ' ' || s->buf[i] == '\t';
        if (blank) continue;
        snprintf(p->where, sizeof p->where, "%s:%llu", cur_name(s), (unsigned long long)s->line);
        p->kind = s->chat ? PIECE_CHAT : PIECE_JSONL;
        p->doc_start = 1;
        return emit(p, s->buf + a, b - a) ? -1 : 1;
    }
}

/* The next stretch of a text file: all of it when it fits piece_max, else up to piece_max
 * bytes cut as said below (the read buffer holds more than piece_max: base[n] exists). */
static int next_text(prep_source *s, prep_piece *p) {
    while (!s->eof && s->len - s->pos <= s->piece_max + 1)
        if (fill(s)) return -1;
    size_t avail = s->len - s->pos;
    if (avail == 0 && s->started) return 0;
    size_t n = avail;
    if (n > s->piece_max + 1) {
        n = s->piece_max;
        /* between a letter or newline and a word that starts with a letter (" word" or
         * "word"): byte-level BPE's pre-tokenizers (GPT-2's regex, Llama 3's and Qwen2's
         * Split) end a pre-token there, so the pieces encode to the whole file's tokens;
         * else after any newline; else at a character boundary */
        const char *base = s->buf + s->pos;
        size_t k, cut = 0;
#define ALPHA(c) (((c) | 0x20) >= 'a' && ((c) | 0x20) <= 'z')
        for (k = n - 1; k > n / 2 && !cut; k--)
            if ((base[k - 1] == '\n' && ALPHA(base[k])) || (ALPHA(base[k - 1]) && base[k] == ' ' && ALPHA(base[k + 1]))) cut = k;
#undef ALPHA
        for (k = n; k > n / 2 && !cut; k--)
            if (base[k - 1] == '\n') cut = k;
        if (cut) n = cut;
        else while (n > 1 && ((unsigned char)base[n] & 0xC0) == 0x80) n--;
    }
    snprintf(p->where, sizeof p->where, "%s", cur_name(s));
    p->kind = PIECE_TEXT;
    p->doc_start = !s->started;
    s->started = 1;
    if (emit(p, s->buf + s->pos, n)) return -1;
    s->pos += n;
    return 1;
}

int prep_source_next(prep_source *s, prep_piece *p) {
    memset(p, 0, sizeof *p);
    for (;;) {
        if (s->cur < 0 || (s->fp == NULL
#ifdef SK_HAVE_ZLIB
                           && s->gz == NULL
#endif
                           )) {
            if (s->cur + 1 >= s->files.n) return 0;
            if (open_file(s, s->cur + 1)) return -1;
        }
        int r = s->jsonl ? next_line(s, p) : next_text(s, p);
        if (r != 0) return r;
        s->done_prev += file_done(s);
        close_file(s);
    }
}

int prep_source_rewind(prep_source *s) {
    for (int i = 0; i < s->files.n; i++)
        if (!strcmp(s->files.v[i], "-")) return -1;
    close_file(s);
    s->cur = -1; s->done_prev = 0;
    return 0;
}

void prep_source_close(prep_source *s) {
    if (!s) return;
    close_file(s);
    cli_docs_free(&s->files);
    free(s->buf);
    free(s);
}
