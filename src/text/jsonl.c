/* JSON Lines records (one JSON object a line): the text of a field, or a conversation's
 * messages, for prepare's JSONL inputs (docs/data.md). */
#include "skiplm_base.h"
#include "skiplm_text.h"
#include "base/json.h"

#include <stdlib.h>
#include <string.h>

/* line (without its newline) parsed as an object; the error says what and where */
static int parse_object(const char *line, size_t len, sk_json *j) {
    char err[200];
    if (sk_json_parse(line, len, j, err, sizeof err)) return sk_error(SK_EFORMAT, "not valid JSON: %s", err);
    if (j->type != SK_JSON_OBJ) {
        sk_json_free(j);
        return sk_error(SK_EFORMAT, "not a JSON object (each line must be one object)");
    }
    return SK_OK;
}

int sk_jsonl_text(const char *line, size_t len, const char *field, char **text, size_t *text_len) {
    *text = NULL; *text_len = 0;
    sk_json j;
    int rc = parse_object(line, len, &j);
    if (rc) return rc;
    const sk_json *v = sk_json_get(&j, field);
    if (!v) rc = sk_error(SK_EFORMAT, "no field \"%s\"", field);
    else if (v->type != SK_JSON_STR) rc = sk_error(SK_EFORMAT, "field \"%s\" is %s, not a string", field, sk_json_type_name(v->type));
    else if (!(*text = malloc(v->str_len + 1))) rc = sk_error(SK_ENOMEM, "out of memory");
    else { memcpy(*text, v->str, v->str_len + 1); *text_len = v->str_len; }
    sk_json_free(&j);
    return rc;
}

int sk_jsonl_messages(const char *line, size_t len, const char *field, sk_chat_msg **msgs, int *n) {
    *msgs = NULL; *n = 0;
    sk_json j;
    int rc = parse_object(line, len, &j);
    if (rc) return rc;
    const sk_json *a = sk_json_get(&j, field);
    if (!a) rc = sk_error(SK_EFORMAT, "no field \"%s\"", field);
    else if (a->type != SK_JSON_ARR || a->n == 0) rc = sk_error(SK_EFORMAT, "field \"%s\" is %s, not a list of messages", field,
                                                                 a->type == SK_JSON_ARR ? "an empty list" : sk_json_type_name(a->type));
    /* one block: the array, then every role and content string */
    size_t bytes = (size_t)(a && a->type == SK_JSON_ARR ? a->n : 0) * sizeof(sk_chat_msg);
    for (int i = 0; !rc && i < a->n; i++) {
        const sk_json *m = &a->items[i], *role = m->type == SK_JSON_OBJ ? sk_json_get(m, "role") : NULL,
                      *content = m->type == SK_JSON_OBJ ? sk_json_get(m, "content") : NULL;
        if (m->type != SK_JSON_OBJ) rc = sk_error(SK_EFORMAT, "message %d is %s, not an object", i, sk_json_type_name(m->type));
        else if (!role || role->type != SK_JSON_STR) rc = sk_error(SK_EFORMAT, "message %d has no \"role\" string", i);
        else if (!content || content->type != SK_JSON_STR)
            rc = sk_error(SK_EFORMAT, "message %d (%s) has no \"content\" string", i, role->str);
        else bytes += role->str_len + content->str_len + 2;
    }
    char *block = rc ? NULL : malloc(bytes);
    if (!rc && !block) rc = sk_error(SK_ENOMEM, "out of memory");
    if (!rc) {
        sk_chat_msg *m = (sk_chat_msg *)block;
        char *p = block + (size_t)a->n * sizeof *m;
        for (int i = 0; i < a->n; i++) {
            const sk_json *role = sk_json_get(&a->items[i], "role"), *content = sk_json_get(&a->items[i], "content");
            memcpy(p, role->str, role->str_len + 1); m[i].role = p; p += role->str_len + 1;
            memcpy(p, content->str, content->str_len + 1); m[i].content = p; p += content->str_len + 1;
        }
        *msgs = m; *n = a->n;
    }
    sk_json_free(&j);
    return rc;
}

/* the first of names that obj has */
static const sk_json *get_any(const sk_json *obj, const char *const *names, int n, const char **which) {
    for (int i = 0; i < n; i++) {
        const sk_json *v = sk_json_get(obj, names[i]);
        if (v) { *which = names[i]; return v; }
    }
    *which = names[0];
    return NULL;
}

void sk_mc_item_free(sk_mc_item *it) {
    if (!it) return;
    free(it->context);
    for (int i = 0; i < it->n_endings; i++) free(it->endings[i]);
    free(it->endings); free(it->ending_lens);
    memset(it, 0, sizeof *it);
}

int sk_jsonl_choices(const char *line, size_t len, sk_mc_item *it) {
    memset(it, 0, sizeof *it);
    sk_json j;
    int rc = parse_object(line, len, &j);
    if (rc) return rc;
    static const char *const cn[] = {"context", "ctx"}, *const en[] = {"endings", "choices"}, *const ln[] = {"label", "gold"};
    const char *cw, *ew, *lw;
    const sk_json *c = get_any(&j, cn, 2, &cw), *e = get_any(&j, en, 2, &ew), *l = get_any(&j, ln, 2, &lw);
    double lv = -1;
    if (!c) rc = sk_error(SK_EFORMAT, "no \"context\" (or \"ctx\") string");
    else if (c->type != SK_JSON_STR) rc = sk_error(SK_EFORMAT, "\"%s\" is %s, not a string", cw, sk_json_type_name(c->type));
    else if (!e) rc = sk_error(SK_EFORMAT, "no \"endings\" (or \"choices\") list");
    else if (e->type != SK_JSON_ARR || e->n < 2)
        rc = sk_error(SK_EFORMAT, "\"%s\" is %s, not a list of at least two strings", ew,
                      e->type == SK_JSON_ARR ? (e->n ? "a list of one" : "an empty list") : sk_json_type_name(e->type));
    else if (!l) rc = sk_error(SK_EFORMAT, "no \"label\" (or \"gold\"): the index of the right ending");
    else if (l->type == SK_JSON_NUM) lv = l->num;
    else if (l->type == SK_JSON_STR && l->str_len > 0 && l->str_len < 10 && strspn(l->str, "0123456789") == l->str_len) lv = atof(l->str);
    else rc = sk_error(SK_EFORMAT, "\"%s\" is %s, not a whole number", lw, sk_json_type_name(l->type));
    if (!rc && (lv != (double)(long)lv || lv < 0 || lv >= e->n))
        rc = sk_error(SK_EFORMAT, "\"%s\" %g is not the index of one of the %d endings (0 to %d)", lw, lv, e->n, e->n - 1);
    for (int i = 0; !rc && i < e->n; i++)
        if (e->items[i].type != SK_JSON_STR)
            rc = sk_error(SK_EFORMAT, "\"%s\"[%d] is %s, not a string", ew, i, sk_json_type_name(e->items[i].type));
    if (!rc) {
        it->endings = calloc((size_t)e->n, sizeof *it->endings);
        it->ending_lens = calloc((size_t)e->n, sizeof *it->ending_lens);
        it->context = malloc(c->str_len + 1);
        if (!it->endings || !it->ending_lens || !it->context) rc = sk_error(SK_ENOMEM, "out of memory");
        else {
            memcpy(it->context, c->str, c->str_len + 1);
            it->context_len = c->str_len;
            it->n_endings = e->n;
            it->label = (int)lv;
            for (int i = 0; !rc && i < e->n; i++) {
                const sk_json *s = &e->items[i];
                if (!(it->endings[i] = malloc(s->str_len + 1))) rc = sk_error(SK_ENOMEM, "out of memory");
                else { memcpy(it->endings[i], s->str, s->str_len + 1); it->ending_lens[i] = s->str_len; }
            }
        }
    }
    sk_json_free(&j);
    if (rc) sk_mc_item_free(it);
    return rc;
}
