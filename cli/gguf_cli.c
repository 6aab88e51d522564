/* What the commands take from a GGUF model file besides its weights (cli.h): its tokenizer
 * (tokenizer.ggml.*, mapped by the text layer onto skiplm's Hugging Face tokenizer), its chat
 * template (tokenizer.chat_template, with the bos and eos tokens' texts), and for export the
 * tokenizer keys to write into a GGUF file. */
#include "cli.h"
#include "generate.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_is_gguf(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sk_is_gguf(path);
}

/* a NUL-terminated copy of a string value, or NULL (absent); *err on out of memory */
static char *str_dup(const sk_gguf *g, const char *key) {
    size_t n;
    const char *s = sk_gguf_get_str(g, key, &n);
    char *o = s ? malloc(n + 1) : NULL;
    if (o) { memcpy(o, s, n); o[n] = 0; }
    return o;
}

/* token id under key, -1 when absent or out of range */
static int token_id(const sk_gguf *g, const char *key, size_t n_tokens) {
    int64_t v;
    return sk_gguf_get_int(g, key, &v) == 0 && v >= 0 && (uint64_t)v < n_tokens ? (int)v : -1;
}

/* The vocabulary of g handed to fn (sk_tok_load_vocab, or the tokenizer.json writer) */
static int with_vocab(const sk_gguf *g, int (*fn)(const sk_tok_vocab *v, const char *name, void *arg), void *arg) {
    const sk_gguf_kv *toks = sk_gguf_find(g, "tokenizer.ggml.tokens"), *merges = sk_gguf_find(g, "tokenizer.ggml.merges");
    const sk_gguf_kv *scores = sk_gguf_find(g, "tokenizer.ggml.scores"), *types = sk_gguf_find(g, "tokenizer.ggml.token_type");
    char *model = str_dup(g, "tokenizer.ggml.model"), *pre = str_dup(g, "tokenizer.ggml.pre");
    float *sc = NULL;
    int32_t *ty = NULL;
    int rc = SK_OK;
    if (!model || !toks || toks->type != SK_GGUF_ARR || toks->elem != SK_GGUF_STR) {
        rc = sk_error(SK_EFORMAT, "%s holds no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens, an array of strings): "
                      "give one with --tokenizer", g->path);
        goto done;
    }
    const size_t n = (size_t)toks->n;
    if (merges && (merges->type != SK_GGUF_ARR || merges->elem != SK_GGUF_STR)) {
        rc = sk_error(SK_EFORMAT, "%s: tokenizer.ggml.merges must be an array of strings", g->path);
        goto done;
    }
    if (scores) {
        sc = malloc((n ? n : 1) * sizeof *sc);
        if (!sc) { rc = sk_error(SK_ENOMEM, "out of memory"); goto done; }
        for (size_t i = 0; i < n; i++)
            if (scores->n != n || sk_gguf_arr_float(scores, i, &sc[i])) {
                rc = sk_error(SK_EFORMAT, "%s: tokenizer.ggml.scores must be %zu floats, one per token", g->path, n);
                goto done;
            }
    }
    if (types) {
        ty = malloc((n ? n : 1) * sizeof *ty);
        if (!ty) { rc = sk_error(SK_ENOMEM, "out of memory"); goto done; }
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            if (types->n != n || sk_gguf_arr_int(types, i, &v) || v < 0 || v > 6) {
                rc = sk_error(SK_EFORMAT, "%s: tokenizer.ggml.token_type must be %zu integers from 0 to 6, one per token", g->path, n);
                goto done;
            }
            ty[i] = (int32_t)v;
        }
    }
    int64_t asp = 1;
    if (sk_gguf_find(g, "tokenizer.ggml.add_space_prefix") && sk_gguf_get_int(g, "tokenizer.ggml.add_space_prefix", &asp) < 0) {
        rc = SK_EFORMAT;
        goto done;
    }
    sk_tok_vocab v = {
        .model = model, .pre = pre, .tokens = toks->strs, .token_lens = toks->lens, .n_tokens = n,
        .scores = sc, .types = ty, .merges = merges ? merges->strs : NULL, .merge_lens = merges ? merges->lens : NULL,
        .n_merges = merges ? (size_t)merges->n : 0, .unk = token_id(g, "tokenizer.ggml.unknown_token_id", n),
        .add_space_prefix = asp != 0,
    };
    rc = fn(&v, g->path, arg);
done:
    free(model); free(pre); free(sc); free(ty);
    return rc;
}

static int load_fn(const sk_tok_vocab *v, const char *name, void *arg) { return sk_tok_load_vocab(arg, v, name); }

int cli_gguf_tokenizer(sk_tokenizer **tok, const char *path) {
    sk_gguf g;
    int rc = sk_gguf_read(path, &g);
    if (!rc) rc = with_vocab(&g, load_fn, tok);
    sk_gguf_free(&g);
    return rc;
}

int cli_tok_load(sk_tokenizer **tok, const char *path) {
    return cli_is_gguf(path) ? cli_gguf_tokenizer(tok, path) : sk_tok_load(tok, path);
}

/* the text of the token under key, or NULL */
static char *token_text(const sk_gguf *g, const char *key) {
    const sk_gguf_kv *toks = sk_gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != SK_GGUF_ARR || toks->elem != SK_GGUF_STR) return NULL;
    int id = token_id(g, key, (size_t)toks->n);
    if (id < 0) return NULL;
    char *o = malloc(toks->lens[id] + 1);
    if (o) { memcpy(o, toks->strs[id], toks->lens[id]); o[toks->lens[id]] = 0; }
    return o;
}

int cli_gguf_chat(sk_chat **ct, const char *path) {
    sk_gguf g;
    int rc = sk_gguf_read(path, &g);
    if (rc) return rc;
    size_t n;
    const char *tpl = sk_gguf_get_str(&g, "tokenizer.chat_template", &n);
    if (!tpl) rc = sk_error(SK_EINVAL, "%s has no chat template (tokenizer.chat_template): give one with --chat-template", path);
    else {
        char *bos = token_text(&g, "tokenizer.ggml.bos_token_id"), *eos = token_text(&g, "tokenizer.ggml.eos_token_id");
        char where[4200];
        snprintf(where, sizeof where, "%s (tokenizer.chat_template)", path);
        rc = sk_chat_from_text(ct, tpl, n, where, bos, eos);
        free(bos); free(eos);
    }
    sk_gguf_free(&g);
    return rc;
}

/* a GGUF source's tokenizer.* keys copied as they are */
static int copy_tokenizer_keys(sk_gguf_writer *w, const char *path) {
    sk_gguf g;
    int rc = sk_gguf_read(path, &g);
    for (int i = 0; !rc && i < g.n_kv; i++) {
        const sk_gguf_kv *kv = &g.kv[i];
        if (strncmp(kv->key, "tokenizer.", 10)) continue;
        int64_t v;
        if (kv->type == SK_GGUF_STR) rc = sk_gguf_add_str(w, kv->key, (const char *)kv->data, (size_t)kv->n);
        else if (kv->type == SK_GGUF_BOOL) rc = sk_gguf_add_bool(w, kv->key, kv->data[0]);
        else if (kv->type != SK_GGUF_ARR && sk_gguf_get_int(&g, kv->key, &v) == 0 && v >= 0 && v <= UINT32_MAX)
            rc = sk_gguf_add_u32(w, kv->key, (uint32_t)v);
        else if (kv->type == SK_GGUF_ARR && kv->elem == SK_GGUF_STR)
            rc = sk_gguf_add_str_arr(w, kv->key, kv->strs, kv->lens, (size_t)kv->n);
        else if (kv->type == SK_GGUF_ARR && (kv->elem == SK_GGUF_F32 || kv->elem == SK_GGUF_I32)) {
            void *buf = malloc((size_t)kv->n * 4 + 4);
            if (!buf) rc = sk_error(SK_ENOMEM, "out of memory");
            else {
                memcpy(buf, kv->data, (size_t)kv->n * 4);
                rc = kv->elem == SK_GGUF_F32 ? sk_gguf_add_f32_arr(w, kv->key, buf, (size_t)kv->n)
                                             : sk_gguf_add_i32_arr(w, kv->key, buf, (size_t)kv->n);
                free(buf);
            }
        }
    }
    sk_gguf_free(&g);
    return rc;
}

static int find_token(const sk_tok_vocab *v, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < v->n_tokens; i++)
        if (v->token_lens[i] == n && !memcmp(v->tokens[i], s, n)) return (int)i;
    return -1;
}

int cli_gguf_add_tokenizer(sk_gguf_writer *w, const char *tok_path, const char *weights, const sk_tokenizer *tok) {
    if (cli_is_gguf(tok_path)) return copy_tokenizer_keys(w, tok_path);
    sk_tok_vocab v;
    int rc = sk_tok_vocab_read(&v, tok_path);
    if (rc) return rc;
    rc = sk_gguf_add_str(w, "tokenizer.ggml.model", v.model, strlen(v.model));
    if (!rc && v.pre) rc = sk_gguf_add_str(w, "tokenizer.ggml.pre", v.pre, strlen(v.pre));
    if (!rc) rc = sk_gguf_add_str_arr(w, "tokenizer.ggml.tokens", v.tokens, v.token_lens, v.n_tokens);
    if (!rc) rc = sk_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", v.types, v.n_tokens);
    if (!rc && v.scores) rc = sk_gguf_add_f32_arr(w, "tokenizer.ggml.scores", v.scores, v.n_tokens);
    if (!rc && v.n_merges) rc = sk_gguf_add_str_arr(w, "tokenizer.ggml.merges", v.merges, v.merge_lens, v.n_merges);
    if (!rc && v.unk >= 0) rc = sk_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v.unk);
    /* skiplm encodes a prompt as it is, without a BOS: so does llama.cpp with this */
    if (!rc) rc = sk_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", 0);
    if (!rc && !strcmp(v.model, "llama")) rc = sk_gguf_add_bool(w, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    /* the end of a sequence: generation_config.json's (or config.json's) first eos id, else the
     * tokenizer's end-of-text token; the chat template with its bos and eos tokens where there is one */
    int32_t eos[8];
    int n_eos = 0, bos = -1, eos_id = -1;
    if (!rc && sk_hf_eos_ids(weights, eos, 8, &n_eos)) n_eos = 0;
    if (n_eos > 0 && (size_t)eos[0] < v.n_tokens) eos_id = eos[0];
    sk_chat *ct = NULL;
    if (!rc && gen_load_chat(&ct, weights, NULL, tok_path) == 0) {
        size_t tl;
        const char *t = sk_chat_text(ct, &tl);
        rc = sk_gguf_add_str(w, "tokenizer.chat_template", t, tl);
        if (sk_chat_bos_token(ct)) bos = find_token(&v, sk_chat_bos_token(ct));
        if (eos_id < 0 && sk_chat_eos_token(ct)) eos_id = find_token(&v, sk_chat_eos_token(ct));
    }
    sk_chat_free(ct);
    if (eos_id < 0 && sk_tok_eot(tok) >= 0) eos_id = sk_tok_eot(tok);
    if (!rc && eos_id >= 0) rc = sk_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos_id);
    if (!rc && bos >= 0) rc = sk_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    sk_tok_vocab_free(&v);
    return rc;
}

/* ------------------------------------------------ as Hugging Face files */

static int json_fn(const sk_tok_vocab *v, const char *name, void *arg) {
    char *json; size_t len;
    int rc = sk_tok_vocab_json(v, &json, &len);
    if (rc) return sk_error(rc, "%s: %s", name, sk_last_error());
    rc = sk_write_atomic(arg, json, len);
    free(json);
    return rc;
}

/* s as a JSON string literal into f */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

int cli_gguf_write_hf_tokenizer(const char *gguf_path, const char *dir) {
    sk_gguf g;
    int rc = sk_gguf_read(gguf_path, &g);
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (!rc) rc = with_vocab(&g, json_fn, p);
    /* tokenizer_config.json: the chat template, bos and eos tokens that sk_chat_load reads */
    size_t n;
    const char *tpl = rc ? NULL : sk_gguf_get_str(&g, "tokenizer.chat_template", &n);
    char *bos = rc ? NULL : token_text(&g, "tokenizer.ggml.bos_token_id"), *eos = rc ? NULL : token_text(&g, "tokenizer.ggml.eos_token_id");
    if (!rc && (tpl || bos || eos)) {
        char *buf = NULL, *t = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f || (tpl && !(t = malloc(n + 1)))) rc = sk_error(SK_ENOMEM, "out of memory");
        else {
            fputs("{", f);
            const char *sep = "";
            if (bos) { fputs("\"bos_token\": ", f); json_str(f, bos); sep = ", "; }
            if (eos) { fprintf(f, "%s\"eos_token\": ", sep); json_str(f, eos); sep = ", "; }
            if (tpl) {
                memcpy(t, tpl, n); t[n] = 0;
                fprintf(f, "%s\"chat_template\": ", sep);
                json_str(f, t);
            }
            fputs("}\n", f);
            fclose(f);
            f = NULL;
            snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
            rc = sk_write_atomic(p, buf, len);
        }
        if (f) fclose(f);
        free(buf); free(t);
    }
    free(bos); free(eos);
    sk_gguf_free(&g);
    return rc;
}
