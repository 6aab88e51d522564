/* Chat templates: a Hugging Face folder's chat_template (chat_template.jinja, else the
 * "chat_template" of tokenizer_config.json), rendered by src/text/jinja_*.c with the variables
 * transformers' apply_chat_template gives it: messages, add_generation_prompt, tools and
 * documents (none), and the tokenizer's special tokens (bos_token, eos_token, ...). The
 * rendered text is then encoded as apply_chat_template(tokenize=True) does, without adding
 * special tokens: the template writes them. strftime_now reads the clock, or
 * SOURCE_DATE_EPOCH when it is set (reproducible prompts). */
#include "skiplm_base.h"
#include "skiplm_text.h"
#include "base/fileio.h"
#include "text/jinja.h"
#include "base/json.h"
#include "base/utf8.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct sk_chat {
    sk_jinja *tpl;
    char *src;                 /* where the template came from, for messages */
    char *specials;            /* ,"bos_token":"<s>",... (JSON members, may be empty) */
    size_t specials_len;
    char *eos;                 /* eos_token, or NULL */
    char *bos;                 /* bos_token, or NULL */
    char *text;                /* the template's source */
    size_t text_len;
};

/* the special-token names transformers puts in special_tokens_map */
static const char *const special_names[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                            "cls_token", "mask_token"};

static int read_text(const char *path, char **text, size_t *len) {
    uint8_t *t;
    int rc = sk_read_file(path, &t, len);
    if (rc) return rc;
    *text = (char *)t;
    return SK_OK;
}

static int read_obj(const char *path, sk_json *j) {
    char *text; size_t len; char err[160];
    memset(j, 0, sizeof *j);
    int rc = read_text(path, &text, &len);
    if (rc) return rc;
    if (sk_json_parse(text, len, j, err, sizeof err)) rc = sk_error(SK_EFORMAT, "%s: %s", path, err);
    else if (j->type != SK_JSON_OBJ) rc = sk_error(SK_EFORMAT, "%s: not a JSON object", path);
    free(text);
    return rc;
}

/* a special token's text: a string, or an AddedToken object's "content" */
static const sk_json *token_text(const sk_json *v) {
    if (v && v->type == SK_JSON_OBJ) v = sk_json_get(v, "content");
    return v && v->type == SK_JSON_STR ? v : NULL;
}

static int add_specials(sk_chat *c, const sk_json *cfg, const char *path) {
    size_t cap = 0;
    for (size_t i = 0; i < sizeof special_names / sizeof *special_names; i++) {
        const sk_json *v = sk_json_get(cfg, special_names[i]);
        if (!v || v->type == SK_JSON_NULL) continue;
        const sk_json *s = token_text(v);
        if (!s) return sk_error(SK_EFORMAT, "%s: \"%s\" is neither a string nor a token with a \"content\" string", path, special_names[i]);
        if (i == 1 && !(c->eos = strdup(s->str))) return sk_error(SK_ENOMEM, "out of memory");
        if (i == 0 && !(c->bos = strdup(s->str))) return sk_error(SK_ENOMEM, "out of memory");
        char key[32];
        int kl = snprintf(key, sizeof key, ",\"%s\":", special_names[i]);
        if (sk_json_write_raw(&c->specials, &c->specials_len, &cap, key, (size_t)kl) ||
            sk_json_write_str(&c->specials, &c->specials_len, &cap, s->str, s->str_len))
            return sk_error(SK_ENOMEM, "out of memory");
    }
    const sk_json *a = sk_json_get(cfg, "additional_special_tokens");
    if (a && a->type == SK_JSON_ARR) {
        const char *key = ",\"additional_special_tokens\":[";
        if (sk_json_write_raw(&c->specials, &c->specials_len, &cap, key, strlen(key))) return sk_error(SK_ENOMEM, "out of memory");
        for (int i = 0; i < a->n; i++) {
            const sk_json *s = token_text(&a->items[i]);
            if (!s) return sk_error(SK_EFORMAT, "%s: additional_special_tokens[%d] is not a token", path, i);
            if ((i && sk_json_write_raw(&c->specials, &c->specials_len, &cap, ",", 1)) ||
                sk_json_write_str(&c->specials, &c->specials_len, &cap, s->str, s->str_len))
                return sk_error(SK_ENOMEM, "out of memory");
        }
        if (sk_json_write_raw(&c->specials, &c->specials_len, &cap, "]", 1)) return sk_error(SK_ENOMEM, "out of memory");
    }
    return SK_OK;
}

/* The template of a tokenizer_config.json: a string, or a list of {"name", "template"} of
 * which transformers takes "default" */
static const sk_json *config_template(const sk_json *cfg, const char *path, int *rc) {
    const sk_json *t = sk_json_get(cfg, "chat_template");
    *rc = SK_OK;
    if (!t || t->type == SK_JSON_NULL || t->type == SK_JSON_STR) return t && t->type == SK_JSON_STR ? t : NULL;
    if (t->type == SK_JSON_ARR) {
        for (int i = 0; i < t->n; i++) {
            const sk_json *n = sk_json_get(&t->items[i], "name"), *s = sk_json_get(&t->items[i], "template");
            if (n && n->type == SK_JSON_STR && !strcmp(n->str, "default") && s && s->type == SK_JSON_STR) return s;
        }
        *rc = sk_error(SK_EFORMAT, "%s: \"chat_template\" is a list of named templates without one named \"default\"", path);
        return NULL;
    }
    *rc = sk_error(SK_EFORMAT, "%s: \"chat_template\" must be a string or a list of {\"name\", \"template\"}", path);
    return NULL;
}

static int is_file(const char *p) { struct stat sb; return stat(p, &sb) == 0 && S_ISREG(sb.st_mode); }
static int ends_with(const char *s, const char *e) { size_t a = strlen(s), b = strlen(e); return a >= b && !strcmp(s + a - b, e); }

static int parse_template(sk_chat *c, const char *text, size_t len, const char *where) {
    char err[512];
    free(c->src);
    c->src = strdup(where);
    free(c->text);
    if ((c->text = malloc(len + 1))) { memcpy(c->text, text, len); c->text[len] = 0; c->text_len = len; }
    if (!c->src || !c->text) return sk_error(SK_ENOMEM, "out of memory");
    if (sk_jinja_parse(&c->tpl, text, len, err, sizeof err)) return sk_error(SK_EFORMAT, "%s: chat template: %s", where, err);
    return SK_OK;
}

int sk_chat_load(sk_chat **out, const char *model, const char *template_path) {
    *out = NULL;
    sk_chat *c = calloc(1, sizeof *c);
    char *file = sk_weights_file(model);
    if (!c || !file) { free(c); free(file); return sk_error(SK_ENOMEM, "out of memory"); }
    const char *slash = strrchr(file, '/');
    const int dl = slash ? (int)(slash - file) : 1;
    const char *dir = slash ? file : ".";
    char cfg_path[4200], jinja_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%.*s/tokenizer_config.json", dl, dir);
    snprintf(jinja_path, sizeof jinja_path, "%.*s/chat_template.jinja", dl, dir);
    int given_json = template_path && ends_with(template_path, ".json");
    if (given_json) snprintf(cfg_path, sizeof cfg_path, "%s", template_path);
    sk_json cfg;
    memset(&cfg, 0, sizeof cfg);
    int rc = SK_OK;
    if (given_json || is_file(cfg_path)) rc = read_obj(cfg_path, &cfg);
    if (!rc && cfg.type == SK_JSON_OBJ) rc = add_specials(c, &cfg, cfg_path);
    if (!rc) {
        char *text = NULL; size_t len = 0;
        const sk_json *t = NULL;
        if (template_path && !given_json) {
            rc = read_text(template_path, &text, &len);
            if (!rc) rc = parse_template(c, text, len, template_path);
        } else if (!given_json && is_file(jinja_path)) {
            rc = read_text(jinja_path, &text, &len);
            if (!rc) rc = parse_template(c, text, len, jinja_path);
        } else if (cfg.type == SK_JSON_OBJ && ((t = config_template(&cfg, cfg_path, &rc)) || rc)) {
            if (!rc) rc = parse_template(c, t->str, t->str_len, cfg_path);
        } else if (given_json) {
            rc = sk_error(SK_EFORMAT, "%s has no \"chat_template\"", cfg_path);
        } else {
            rc = sk_error(SK_EINVAL, "%.*s has no chat template (neither chat_template.jinja nor a tokenizer_config.json "
                          "with \"chat_template\"): give one with --chat-template (a .jinja file or a tokenizer_config.json)",
                          dl, dir);
        }
        free(text);
    }
    sk_json_free(&cfg);
    free(file);
    if (rc) { sk_chat_free(c); return rc; }
    *out = c;
    return SK_OK;
}

int sk_chat_from_text(sk_chat **out, const char *tpl, size_t len, const char *where, const char *bos, const char *eos) {
    *out = NULL;
    sk_chat *c = calloc(1, sizeof *c);
    if (!c) return sk_error(SK_ENOMEM, "out of memory");
    size_t cap = 0;
    int rc = SK_OK;
    const char *val[2] = {bos, eos}, *key[2] = {",\"bos_token\":", ",\"eos_token\":"};
    for (int i = 0; i < 2 && !rc; i++) {
        if (!val[i]) continue;
        if (sk_json_write_raw(&c->specials, &c->specials_len, &cap, key[i], strlen(key[i])) ||
            sk_json_write_str(&c->specials, &c->specials_len, &cap, val[i], strlen(val[i])))
            rc = sk_error(SK_EFORMAT, "%s: the %s is not valid UTF-8", where, i ? "eos_token" : "bos_token");
    }
    if (!rc && eos && !(c->eos = strdup(eos))) rc = sk_error(SK_ENOMEM, "out of memory");
    if (!rc && bos && !(c->bos = strdup(bos))) rc = sk_error(SK_ENOMEM, "out of memory");
    if (!rc) rc = parse_template(c, tpl, len, where);
    if (rc) { sk_chat_free(c); return rc; }
    *out = c;
    return SK_OK;
}

void sk_chat_free(sk_chat *c) {
    if (!c) return;
    sk_jinja_free(c->tpl);
    free(c->src); free(c->specials); free(c->eos); free(c->bos); free(c->text);
    free(c);
}

const char *sk_chat_eos_token(const sk_chat *c) { return c->eos; }
const char *sk_chat_bos_token(const sk_chat *c) { return c->bos; }
const char *sk_chat_text(const sk_chat *c, size_t *len) {
    if (len) *len = c->text_len;
    return c->text;
}

/* The length of the well-formed UTF-8 sequence at s[0..n), or of its maximal ill-formed subpart
 * (negated, at least 1 byte): the unit that decoders replace by one U+FFFD (base/utf8.h). */
static int utf8_unit(const unsigned char *s, size_t n) {
    uint32_t cp;
    size_t len = sk_utf8_decode(s, n, &cp);
    return len ? (int)len : -(int)sk_utf8_subpart(s, n);
}

/* append s as a JSON string, each invalid UTF-8 unit as U+FFFD (a reply cut inside a
 * character, a terminal in another encoding): tokenizers' decode does the same */
static int put_str(char **b, size_t *l, size_t *cap, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), i = 0, bad = 0;
    while (i < n) {
        int k = utf8_unit(u + i, n - i);
        bad |= k < 0;
        i += (size_t)(k < 0 ? -k : k);
    }
    char *fixed = NULL;
    if (bad) {
        if (!(fixed = malloc(3 * n + 1))) return sk_error(SK_ENOMEM, "out of memory for the chat");
        size_t o = 0;
        for (i = 0; i < n;) {
            int k = utf8_unit(u + i, n - i);
            if (k > 0) memcpy(fixed + o, s + i, (size_t)k), o += (size_t)k;
            else memcpy(fixed + o, "\xEF\xBF\xBD", 3), o += 3, k = -k;
            i += (size_t)k;
        }
        fixed[o] = 0;
        s = fixed;
        n = o;
    }
    int r = sk_json_write_str(b, l, cap, s, n);
    free(fixed);
    return r ? sk_error(SK_ENOMEM, "out of memory for the chat") : SK_OK;
}
static int put_raw(char **b, size_t *l, size_t *cap, const char *s) {
    return sk_json_write_raw(b, l, cap, s, strlen(s)) ? sk_error(SK_ENOMEM, "out of memory for the chat") : SK_OK;
}

/* text parses as JSON; need_array 1: an array, 2: an array of objects with a "role" string */
static int check_json(const char *text, const char *what, int need_array) {
    sk_json j;
    char err[256];
    if (sk_json_parse(text, strlen(text), &j, err, sizeof err)) return sk_error(SK_EFORMAT, "%s: %s", what, err);
    int rc = SK_OK;
    if (need_array && j.type != SK_JSON_ARR) rc = sk_error(SK_EFORMAT, "%s: not a JSON array", what);
    for (int i = 0; !rc && need_array == 2 && i < j.n; i++) {
        const sk_json *role = j.items[i].type == SK_JSON_OBJ ? sk_json_get(&j.items[i], "role") : NULL;
        if (!role || role->type != SK_JSON_STR)
            rc = sk_error(SK_EFORMAT, "%s: message %d is not an object with a \"role\" string", what, i + 1);
    }
    sk_json_free(&j);
    return rc;
}

/* the template's variables around messages (a JSON array's text), rendered */
static int render(const sk_chat *c, const char *msgs, size_t ml, const char *tools, int gen, char **text, size_t *len) {
    char *ctx = NULL; size_t cl = 0, cap = 0;
    int rc = put_raw(&ctx, &cl, &cap, "{\"messages\":");
    if (!rc && sk_json_write_raw(&ctx, &cl, &cap, msgs, ml)) rc = sk_error(SK_ENOMEM, "out of memory for the chat");
    if (!rc) rc = put_raw(&ctx, &cl, &cap, gen ? ",\"add_generation_prompt\":true,\"tools\":" : ",\"add_generation_prompt\":false,\"tools\":");
    if (!rc) rc = put_raw(&ctx, &cl, &cap, tools ? tools : "null");
    if (!rc) rc = put_raw(&ctx, &cl, &cap, ",\"documents\":null");
    if (!rc && c->specials_len && sk_json_write_raw(&ctx, &cl, &cap, c->specials, c->specials_len)) rc = sk_error(SK_ENOMEM, "out of memory for the chat");
    if (!rc) rc = put_raw(&ctx, &cl, &cap, "}");
    if (rc) { free(ctx); return rc; }
    sk_json j;
    char err[512];
    if (sk_json_parse(ctx, cl, &j, err, sizeof err)) { free(ctx); return sk_error(SK_EINVAL, "chat messages: %s", err); }
    free(ctx);
    time_t now = time(NULL);
    const char *epoch = getenv("SOURCE_DATE_EPOCH");
    if (epoch && *epoch) {
        char *end;
        errno = 0;
        long long v = strtoll(epoch, &end, 10);
        if (*end || errno || v < 0) { sk_json_free(&j); return sk_error(SK_EINVAL, "SOURCE_DATE_EPOCH must be seconds since 1970 (got '%s')", epoch); }
        now = (time_t)v;
    }
    rc = sk_jinja_render(c->tpl, &j, now, text, len, err, sizeof err);
    sk_json_free(&j);
    if (rc) return sk_error(SK_EINVAL, "%s: chat template: %s", c->src, err);
    return SK_OK;
}

int sk_chat_render(const sk_chat *c, const sk_chat_msg *msgs, int n, const char *tools_json, int add_generation_prompt,
                   char **text, size_t *len) {
    *text = NULL; *len = 0;
    if (tools_json && check_json(tools_json, "tools", 1)) return SK_EFORMAT;
    char *arr = NULL; size_t al = 0, cap = 0;
    int rc = put_raw(&arr, &al, &cap, "[");
    for (int i = 0; i < n && !rc; i++) {
        rc = put_raw(&arr, &al, &cap, i ? ",{\"role\":" : "{\"role\":");
        if (!rc) rc = put_str(&arr, &al, &cap, msgs[i].role);
        if (!rc) rc = put_raw(&arr, &al, &cap, ",\"content\":");
        if (!rc) rc = put_str(&arr, &al, &cap, msgs[i].content);
        if (!rc) rc = put_raw(&arr, &al, &cap, "}");
    }
    if (!rc) rc = put_raw(&arr, &al, &cap, "]");
    if (!rc) rc = render(c, arr, al, tools_json, add_generation_prompt, text, len);
    free(arr);
    return rc;
}

int sk_chat_render_json(const sk_chat *c, const char *messages_json, const char *tools_json, int add_generation_prompt,
                        char **text, size_t *len) {
    *text = NULL; *len = 0;
    if (check_json(messages_json, "messages", 2) || (tools_json && check_json(tools_json, "tools", 1))) return SK_EFORMAT;
    return render(c, messages_json, strlen(messages_json), tools_json, add_generation_prompt, text, len);
}
