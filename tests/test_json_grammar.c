/* JSON Schema constrained decoding (src/text/json_schema.c, json_match.c): texts the schema
 * accepts and refuses, fed whole and byte by byte; schemas refused with the keyword named; the
 * token mask equals feeding each token on its own; random walks over the mask (a vocabulary
 * of single bytes and multi-byte tokens that split UTF-8 characters) always end in JSON that
 * parses and keeps the schema's limits, within the token budget. */
#include "skiplm.h"
#include "base/json.h"
#include "test.h"

static sk_jg *compile(const char *schema) {
    sk_jg *g = NULL;
    if (sk_jg_compile(&g, schema, schema ? strlen(schema) : 0)) printf("  compile: %s\n", sk_last_error());
    return g;
}

/* a vocabulary: every byte, then these multi-byte tokens */
static const char *const MULTI[] = {"{\"", "\":", "\",\"", "true", "null", "false", "12", "-3", ".5", "\"}", "}]", "[{", "  ",
                                    "\n  ", "name", "age", "\xc3\xa9", "\xc3", "\xa9x", "\xe2\x82", "\xac\"", "ab", "\\u00", "e9",
                                    "\"a\"", ", ", "]}", "0,", "\"b", NULL};
static sk_jg_vocab *vocab(int *n_out) {
    const char *bytes[512];
    size_t lens[512];
    static char single[256];
    int n = 0;
    for (int b = 0; b < 256; b++) { single[b] = (char)b; bytes[n] = &single[b]; lens[n++] = 1; }
    for (int i = 0; MULTI[i]; i++) { bytes[n] = MULTI[i]; lens[n++] = strlen(MULTI[i]); }
    sk_jg_vocab *v = NULL;
    sk_jg_vocab_new(&v, n, bytes, lens, NULL);
    *n_out = n;
    return v;
}

/* 1 complete, 0 a prefix, -1 refused */
static int match(const sk_jg *g, const sk_jg_vocab *v, const char *text, int bytewise) {
    sk_jg_match *m = sk_jg_match_new(g, v);
    int r = 0;
    if (bytewise) { for (size_t i = 0; text[i] && !r; i++) r = sk_jg_match_feed(m, text + i, 1); }
    else r = sk_jg_match_feed(m, text, strlen(text));
    int out = r ? -1 : sk_jg_match_complete(m);
    sk_jg_match_free(m);
    return out;
}

static const char *PERSON =
    "{\"type\":\"object\",\"title\":\"a person\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":5},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2},"
    "\"score\":{\"type\":\"number\",\"minimum\":0.5,\"exclusiveMaximum\":2.25},"
    "\"nick\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static void texts(const sk_jg_vocab *v) {
    struct { const char *schema, *text; int want; } cases[] = {
        {PERSON, "{\"name\":\"bob\",\"age\":42}", 1},
        {PERSON, "{\"age\":0,\"name\":\"x\",\"tags\":[\"a\",\"b\"],\"nick\":null}", 1},
        {PERSON, " { \"name\" : \"bob\" ,\t\"age\" : 7 }", 1},
        {PERSON, "{\"name\":\"\xc3\xa9\xc3\xa9\\n\\u00e9\",\"age\":120,\"score\":2.2499}", 1},
        {PERSON, "{\"name\":\"bob\"", 0},
        {PERSON, "{\"name\":\"bob\"}", -1},
        {PERSON, "{\"name\":\"\",", -1},
        {PERSON, "{\"name\":\"abcdef\"", -1},
        {PERSON, "{\"age\":121", -1},
        {PERSON, "{\"age\":007", -1},
        {PERSON, "{\"age\":-1", -1},
        {PERSON, "{\"age\":1.5", -1},
        {PERSON, "{\"tags\":[\"c\"]", -1},
        {PERSON, "{\"tags\":[\"a\",\"a\",\"a\"]", -1},
        {PERSON, "{\"extra\":1", -1},
        {PERSON, "{\"age\":1,\"age\":2", -1},
        {PERSON, "{\"score\":2.25", -1},
        {PERSON, "{\"score\":0.4", -1},
        {PERSON, "{\"score\":0.5,", 0},
        {PERSON, "{\"name\":\"\\ud800\"", -1},
        {PERSON, "{\"name\":\"\xc0\xaf\"", -1},
        {PERSON, "{\"name\":\"a\x01\"", -1},
        {PERSON, "{\"age\":1}x", -1},
        {PERSON, "{            \"age\":1", 0},
        {PERSON, "{             \"age\":1", -1},
        {PERSON, "{\r\"age\":1", -1},
        {"{\"type\":\"integer\"}", "-0", -1},
        {"{\"type\":\"number\"}", "-0.5", 1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":-2}", "-3", 1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":-2}", "-1", -1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":-2}", "-6", -1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":-2}", "0", -1},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":20}", "1", 0},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":20}", "3", -1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "0", 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.000001", 1},
        {"{\"type\":\"number\"}", "-12.5", 1},
        {"{\"type\":\"number\"}", "1e5", -1},
        {"{\"enum\":[1,12,\"x\",{\"a\":[true]}]}", "1", 1},
        {"{\"enum\":[1,12,\"x\",{\"a\":[true]}]}", "12", 1},
        {"{\"enum\":[1,12,\"x\",{\"a\":[true]}]}", "13", -1},
        {"{\"enum\":[1,12,\"x\",{\"a\":[true]}]}", "{\"a\":[true]}", 1},
        {"{\"const\":\"hi\"}", "\"hi\"", 1},
        {"{\"const\":\"hi\"}", "\"ho\"", -1},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}]}", "[1,2]", 1},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}]}", "\"s\"", 1},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}]}", "[\"s\"]", -1},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
         "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3}]}", 1},
        {"{\"definitions\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"}},\"required\":[\"v\"]}},"
         "\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"}],\"items\":{\"$ref\":\"#/definitions/n\"},\"minItems\":2}", "[true,{\"v\":1}]", 1},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"}],\"items\":{\"type\":\"null\"},\"minItems\":2}", "[true]", -1},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"any key\":1,\"k2\":2}", 1},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"k\":\"v\"}", -1},
        {NULL, "{\"a\":[1,-2.5,\"x\",{\"b\":null}],\"c\":true}", 1},
        {NULL, "[1]", -1},
        {"{}", "\"any\"", 1},
        {"true", "[[[]]]", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sk_jg *g = compile(cases[i].schema);
        int whole = g ? match(g, v, cases[i].text, 0) : -2, bytes = g ? match(g, v, cases[i].text, 1) : -2;
        CHECK(whole == cases[i].want && bytes == cases[i].want, "%.60s: '%s' gives %d (bytewise %d), want %d",
              cases[i].schema ? cases[i].schema : "json_object", cases[i].text, whole, bytes, cases[i].want);
        sk_jg_free(g);
    }
}

/* sk_jg_wrap: the value between fixed bytes (a tool call's tags) */
static void wrapped(const sk_jg_vocab *v) {
    sk_jg *g = compile("{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"f\"}},\"required\":[\"name\"]}");
    CHECK(g && !sk_jg_wrap(g, "<tool_call>\n", "\n</tool_call>"), "wrap a grammar in tags");
    struct { const char *text; int want; } cases[] = {
        {"<tool_call>\n{\"name\":\"f\"}\n</tool_call>", 1}, {"<tool_call>\n {\"name\":\"f\"}", 0},
        {"{\"name\":\"f\"}", -1}, {"<tool_call>\n{\"name\":\"f\"}</tool_call>", -1}, {"<tool_call>\n{\"name\":\"f\"}\n</tool_call>x", -1}};
    for (size_t i = 0; g && i < sizeof cases / sizeof *cases; i++) {
        int whole = match(g, v, cases[i].text, 0), bytes = match(g, v, cases[i].text, 1);
        CHECK(whole == cases[i].want && bytes == cases[i].want, "wrapped: '%s' gives %d (bytewise %d), want %d", cases[i].text, whole, bytes, cases[i].want);
    }
    sk_jg_match *m = g ? sk_jg_match_new(g, v) : NULL;
    CHECK(m && sk_jg_match_cost(m) == strlen("<tool_call>\n{\"name\":\"f\"}\n</tool_call>"), "wrapped: the shortest text counts the tags (%zu)",
          m ? sk_jg_match_cost(m) : 0);
    sk_jg_match_free(m);
    sk_jg_free(g);
}

static void refusals(void) {
    struct { const char *schema, *says; } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern' at # is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}", "'format' at #/properties/d is not supported"},
        {"{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf'"},
        {"{\"$ref\":\"#/$defs/missing\"}", "points at nothing"},
        {"{\"$ref\":\"http://x/y.json\"}", "not within the schema"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "names 'b'"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength exceeds maxLength"},
        {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}", "no integer"},
        {"false", "no value"},
        {"{\"$ref\":\"#\"}", "no value of finite length"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", "no value of finite length"},
        {"{\"type\":\"strng\"}", "'type' at #"},
        {"{\"anyOf\":[],\"type\":\"string\"}", "'anyOf' beside other keywords"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'"},
        {"[1,2", "not valid JSON"},
        {"{\"enum\":[]}", "'enum' at #"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sk_jg *g = NULL;
        int rc = sk_jg_compile(&g, cases[i].schema, strlen(cases[i].schema));
        CHECK(rc && !g && strstr(sk_last_error(), cases[i].says), "refused: %s (%s)", cases[i].schema, rc ? sk_last_error() : "accepted");
        sk_jg_free(g);
    }
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

/* the mask equals feeding each token alone, after a prefix */
static void mask_equals_feed(const sk_jg_vocab *v, int n) {
    const char *prefixes[] = {"", "{\"na", "{\"name\":\"\xc3", "{\"age\":1", "{\"tags\":[", "{\"score\":1.", "{\"name\":\"a", "{\"name\":\"abcd", "{\"name\":\"a\",\"age\":3"};
    sk_jg *g = compile(PERSON);
    unsigned char *allow = malloc(n);
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        sk_jg_match *m = sk_jg_match_new(g, v);
        sk_jg_match_feed(m, prefixes[p], strlen(prefixes[p]));
        sk_jg_match_mask(m, allow, -1);
        int bad = 0, count = 0;
        for (int t = 0; t < n; t++) {
            sk_jg_match *k = sk_jg_match_new(g, v);
            sk_jg_match_feed(k, prefixes[p], strlen(prefixes[p]));
            int ok = sk_jg_match_feed_token(k, t) == 0;
            if (ok != allow[t]) { if (!bad) printf("  token %d: mask %d, feed %d\n", t, allow[t], ok); bad++; }
            count += ok;
            sk_jg_match_free(k);
        }
        CHECK(!bad && count > 0, "mask after '%s' equals feeding each token (%d allowed)", prefixes[p], count);
        sk_jg_match_free(m);
    }
    free(allow);
    sk_jg_free(g);
}

/* a person as the schema says: name 1-5 code points, age 0-120, at most 2 tags of a/b, score in [0.5, 2.25) */
static int person_ok(const sk_json *j) {
    if (j->type != SK_JSON_OBJ) return 0;
    const sk_json *name = sk_json_get(j, "name"), *age = sk_json_get(j, "age"), *tags = sk_json_get(j, "tags"), *score = sk_json_get(j, "score");
    if (!name || name->type != SK_JSON_STR || !age || age->type != SK_JSON_NUM) return 0;
    size_t cps = 0;
    for (size_t i = 0; i < name->str_len; i++) cps += ((unsigned char)name->str[i] & 0xC0) != 0x80;
    if (cps < 1 || cps > 5 || age->num != floor(age->num) || age->num < 0 || age->num > 120) return 0;
    if (tags && (tags->type != SK_JSON_ARR || tags->n > 2)) return 0;
    if (score && (score->type != SK_JSON_NUM || score->num < 0.5 || score->num >= 2.25)) return 0;
    for (int i = 0; i < j->n; i++)
        if (strcmp(j->keys[i], "name") && strcmp(j->keys[i], "age") && strcmp(j->keys[i], "tags") && strcmp(j->keys[i], "score") && strcmp(j->keys[i], "nick"))
            return 0;
    return 1;
}

/* random walks: pick among the allowed tokens (the end when complete, now and then) */
static void walks(const sk_jg_vocab *v, int n) {
    const char *schemas[] = {PERSON, NULL, "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":50},\"minItems\":3,\"maxItems\":6}",
                             "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"v\",\"kids\"]}},\"$ref\":\"#/$defs/n\"}"};
    unsigned char *allow = malloc(n);
    for (size_t s = 0; s < sizeof schemas / sizeof *schemas; s++) {
        sk_jg *g = compile(schemas[s]);
        int ok = 0, within = 0, tight = 0;
        const int runs = 200;
        for (int r = 0; r < runs; r++) {
            uint64_t st = 0x9E3779B97F4A7C15ull * (r + 1) + s;
            sk_jg_match *m = sk_jg_match_new(g, v);
            const long budget = r % 2 ? 40 : (long)sk_jg_match_cost(m) + (r % 3);   /* half of them as tight as can be */
            char out[4096];
            size_t len = 0;
            long used = 0;
            while (used < budget) {
                if (sk_jg_match_complete(m) && (sk_jg_match_done(m) || rng_next(&st) % 4 == 0)) break;
                int cnt = sk_jg_match_mask(m, allow, budget - used);
                if (cnt <= 0) break;
                int pick = (int)(rng_next(&st) % cnt), t = 0;
                for (; t < n; t++) if (allow[t] && pick-- == 0) break;
                const char *b = t < 256 ? (const char[]){(char)t} : MULTI[t - 256];
                size_t bl = t < 256 ? 1 : strlen(MULTI[t - 256]);
                if (sk_jg_match_feed_token(m, t)) break;
                memcpy(out + len, b, bl);
                len += bl;
                used++;
            }
            sk_json j;
            char err[100];
            int parsed = sk_jg_match_complete(m) && !sk_json_parse(out, len, &j, err, sizeof err);
            if (parsed) {
                int good = s == 0 ? person_ok(&j) : s == 1 ? j.type == SK_JSON_OBJ : s == 2 ? j.type == SK_JSON_ARR && j.n >= 3 && j.n <= 6 : j.type == SK_JSON_OBJ;
                for (int i = 0; s == 2 && good && i < j.n; i++) good = j.items[i].num >= -50 && j.items[i].num <= 50 && j.items[i].num == floor(j.items[i].num);
                ok += good;
                if (!good) printf("  schema %zu run %d: %.*s breaks the schema\n", s, r, (int)len, out);
                sk_json_free(&j);
            } else if (ok == r) {
                printf("  schema %zu run %d: '%.*s' (%ld tokens of %ld) is not whole JSON\n", s, r, (int)len, out, used, budget);
            }
            within += used <= budget;
            tight += r % 2 == 0;
            sk_jg_match_free(m);
        }
        CHECK(ok == runs && within == runs, "schema %zu: %d of %d random walks end in valid JSON within the budget (%d of them with the least budget)",
              s, ok, runs, tight);
        sk_jg_free(g);
    }
    free(allow);
}

int main(void) {
    int n;
    sk_jg_vocab *v = vocab(&n);
    texts(v);
    refusals();
    wrapped(v);
    mask_equals_feed(v, n);
    walks(v, n);
    sk_jg_vocab_free(v);
    return sk_test_failed ? 1 : 0;
}
