/* Tests for the strict JSON reader/writer in src/base/json.c. */
#include "base/json.h"
#include "test.h"

#include <time.h>

static int parses(const char *s) {
    sk_json j; char err[256];
    int rc = sk_json_parse(s, strlen(s), &j, err, sizeof err);
    if (rc == 0) sk_json_free(&j);
    return rc == 0;
}

/* Parse must fail, and the error must name the given byte offset. */
static int fails_at(const char *s, size_t len, size_t offset, char *err, size_t errlen) {
    sk_json j;
    if (sk_json_parse(s, len, &j, err, errlen) == 0) { sk_json_free(&j); snprintf(err, errlen, "(accepted)"); return 0; }
    char want[64];
    snprintf(want, sizeof want, "offset %zu:", offset);
    return strncmp(err, want, strlen(want)) == 0;
}

static int str_is(const char *doc, const char *want, size_t want_len) {
    sk_json j; char err[256];
    if (sk_json_parse(doc, strlen(doc), &j, err, sizeof err)) { printf("  parse error: %s\n", err); return 0; }
    int ok = j.type == SK_JSON_STR && j.str_len == want_len && memcmp(j.str, want, want_len) == 0 &&
             j.str[want_len] == 0;
    sk_json_free(&j);
    return ok;
}

static int num_is(const char *doc, double want) {
    sk_json j; char err[256];
    if (sk_json_parse(doc, strlen(doc), &j, err, sizeof err)) return 0;
    int ok = j.type == SK_JSON_NUM && j.num == want;
    sk_json_free(&j);
    return ok;
}

int main(void) {
    char err[256];

    /* --- valid documents */
    const char *valid[] = {
        "{}", "[]", " \t\r\n{ } ", "0", "-0", "1.5e3", "\"\"", "true", "false", "null",
        "[1,2,[3,{\"a\":[]}]]", "{\"a\":1,\"b\":{\"c\":[true,false,null]}}",
        "{\"a\":1,\"a\":2}", "[1E+2, 1e-2, -0.0e0]", "\"\\u00e9\\ud83d\\ude00\"",
    };
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++)
        CHECK(parses(valid[i]), "json accepts valid document #%zu", i);

    /* --- invalid documents */
    const char *invalid[] = {
        "", " ", "{", "}", "[1,]", "[,1]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{'a':1}",
        "[1 2]", "01", "-", "+1", ".5", "1.", "1e", "1e+", "0x10", "NaN", "Infinity", "-Infinity",
        "tru", "nul", "True", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\u12G4\"", "\"a\tb\"",
        "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"",
        "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xe2\x82\"", "\"\xf4\x90\x80\x80\"",
        "\xef\xbb\xbf{}", "{} {}", "[] x", "1e999", "-1e400", "[\"a\"]]", "//c\n{}",
    };
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++)
        CHECK(!parses(invalid[i]), "json rejects invalid document #%zu", i);

    /* --- strings and escapes */
    CHECK(str_is("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "a\"b\\c/d\b\f\n\r\t", 12), "json simple escapes");
    CHECK(str_is("\"\\u0041\\u00e9\\u20AC\"", "A\xc3\xa9\xe2\x82\xac", 6), "json \\u escapes to UTF-8 (1-3 bytes)");
    CHECK(str_is("\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4), "json surrogate pair to 4-byte UTF-8");
    CHECK(str_is("\"\\uDBFF\\uDFFF\"", "\xf4\x8f\xbf\xbf", 4), "json max code point U+10FFFF");
    CHECK(str_is("\"a\\u0000b\"", "a\0b", 3), "json \\u0000 keeps length");
    CHECK(str_is("\"\xc4\x80\xe2\x82\xac\xf0\x9f\x98\x80\"", "\xc4\x80\xe2\x82\xac\xf0\x9f\x98\x80", 9),
          "json raw UTF-8 passes through");

    /* --- numbers */
    CHECK(num_is("0", 0) && num_is("-12", -12) && num_is("3.25", 3.25) && num_is("1e3", 1000) &&
          num_is("2.5E-1", 0.25) && num_is("9007199254740992", 9007199254740992.0),
          "json numbers");
    CHECK(num_is("1e-400", 0.0) || parses("1e-400"), "json underflow is accepted");

    /* --- depth: 64 nested arrays accepted, 65 rejected */
    {
        char buf[300];
        for (int d = 64; d <= 65; d++) {
            int k = 0;
            for (int i = 0; i < d; i++) buf[k++] = '[';
            for (int i = 0; i < d; i++) buf[k++] = ']';
            buf[k] = 0;
            if (d == 64) CHECK(parses(buf), "json depth 64 accepted");
            else CHECK(fails_at(buf, strlen(buf), 64, err, sizeof err) && strstr(err, "deeper"),
                       "json depth 65 rejected at offset 64: %s", err);
        }
        /* far deeper input must not overflow the stack */
        size_t n = 1000000;
        char *deep = malloc(n);
        memset(deep, '[', n);
        CHECK(fails_at(deep, n, 64, err, sizeof err), "json 1e6 '[' rejected without recursion blowup");
        free(deep);
    }

    /* --- error offsets */
    CHECK(fails_at("[1,2,]", 6, 5, err, sizeof err), "json error offset of ']' after ',': %s", err);
    CHECK(fails_at("{\"a\":1} x", 9, 8, err, sizeof err) && strstr(err, "trailing"),
          "json trailing garbage offset: %s", err);
    CHECK(fails_at("{\"ab\" 1}", 8, 6, err, sizeof err) && strstr(err, "':'"), "json missing colon offset: %s", err);
    CHECK(fails_at("\"abc", 4, 0, err, sizeof err) && strstr(err, "unterminated"), "json unterminated string offset: %s", err);
    CHECK(fails_at("[\"a\\qb\"]", 8, 3, err, sizeof err) && strstr(err, "escape"), "json bad escape offset: %s", err);
    CHECK(fails_at("[00]", 4, 1, err, sizeof err) && strstr(err, "leading zero"), "json leading zero offset: %s", err);
    CHECK(fails_at("\"\\ud800\"", 8, 1, err, sizeof err) && strstr(err, "surrogate"), "json lone surrogate offset: %s", err);
    CHECK(fails_at("[1]\0", 4, 3, err, sizeof err), "json embedded NUL after value is trailing garbage: %s", err);
    CHECK(fails_at("[1", 2, 2, err, sizeof err), "json truncated array offset: %s", err);
    /* input need not be NUL-terminated: parsing stops at len */
    CHECK(fails_at("123456", 3, 3, err, sizeof err) == 0 && strcmp(err, "(accepted)") == 0,
          "json respects len (\"123\" of \"123456\")");
    {
        sk_json j;
        CHECK(sk_json_parse("12", 1, &j, err, sizeof err) == 0 && j.num == 1, "json number stops at len");
        sk_json_free(&j);
    }
    /* every prefix of a valid document except the full one is invalid or a different value */
    {
        const char *doc = "{\"k\":[1,\"x\\u00e9\",{\"z\":null}],\"t\":true}";
        size_t n = strlen(doc);
        int bad = 0;
        for (size_t l = 0; l < n; l++) {
            sk_json j;
            if (sk_json_parse(doc, l, &j, err, sizeof err) == 0) { bad++; sk_json_free(&j); }
        }
        CHECK(bad == 0, "json every truncation of an object rejected (%d accepted)", bad);
    }

    /* --- object access */
    {
        sk_json j;
        const char *doc = "{\"a\":1,\"b\":{\"c\":\"d\"},\"a\":2,\"e\\u0000f\":3}";
        int rc = sk_json_parse(doc, strlen(doc), &j, err, sizeof err);
        const sk_json *a = sk_json_get(&j, "a");
        const sk_json *b = sk_json_get(&j, "b");
        const sk_json *c = sk_json_get(b, "c");
        CHECK(rc == 0 && j.type == SK_JSON_OBJ && j.n == 4, "json object members");
        CHECK(a && a->type == SK_JSON_NUM && a->num == 1, "json get returns first duplicate");
        CHECK(c && c->type == SK_JSON_STR && strcmp(c->str, "d") == 0, "json nested get");
        CHECK(sk_json_get(&j, "zz") == NULL && sk_json_get(a, "x") == NULL && sk_json_get(NULL, "a") == NULL,
              "json get of missing key / non-object");
        CHECK(sk_json_get(&j, "e") == NULL && j.key_lens[3] == 3, "json key with NUL is not matched by C string prefix");
        sk_json_free(&j);
    }

    /* --- writer: round trip of every byte value that is valid UTF-8 */
    {
        char s[200]; size_t sl = 0;
        for (int c = 1; c < 128; c++) s[sl++] = (char)c;
        s[sl++] = 0;   /* embedded NUL */
        memcpy(s + sl, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9); sl += 9;
        char *buf = NULL; size_t len = 0, cap = 0;
        int rc = sk_json_write_str(&buf, &len, &cap, s, sl);
        sk_json j;
        int prc = rc == 0 ? sk_json_parse(buf, len, &j, err, sizeof err) : 1;
        CHECK(rc == 0 && prc == 0 && j.type == SK_JSON_STR && j.str_len == sl && memcmp(j.str, s, sl) == 0,
              "json write_str round trip of control chars, quotes, backslashes, UTF-8");
        int raw_ctrl = 0;
        for (size_t i = 0; i < len; i++) if ((unsigned char)buf[i] < 0x20) raw_ctrl++;
        CHECK(raw_ctrl == 0 && buf[len] == 0, "json write_str emits no raw control chars, NUL-terminated");
        if (prc == 0) sk_json_free(&j);
        /* appending keeps earlier content */
        size_t before = len;
        rc = sk_json_write_str(&buf, &len, &cap, "q\"", 2);
        CHECK(rc == 0 && len == before + 5 && memcmp(buf + before, "\"q\\\"\"", 5) == 0, "json write_str appends");
        rc = sk_json_write_str(&buf, &len, &cap, "\xff", 1);
        CHECK(rc != 0 && len == before + 5, "json write_str refuses invalid UTF-8");
        free(buf);
    }

    /* --- speed: an encoder.json-sized object (50257 members, ~1 MB) */
    {
        size_t cap = 2 << 20, len = 0;
        char *doc = malloc(cap);
        doc[len++] = '{';
        for (int i = 0; i < 50257; i++)
            len += (size_t)snprintf(doc + len, cap - len, "%s\"\\u0120tok%d\\\"x\":%d", i ? "," : "", i, i);
        doc[len++] = '}';
        sk_json j;
        clock_t t0 = clock();
        int rc = sk_json_parse(doc, len, &j, err, sizeof err);
        double dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
        CHECK(rc == 0 && j.n == 50257 && j.items[50256].num == 50256 &&
              strcmp(j.keys[7], "\xc4\xa0tok7\"x") == 0, "json 50257-member object parsed");
        CHECK(dt < 0.5, "json %zu-byte object parsed in %.3f s", len, dt);
        if (rc == 0) sk_json_free(&j);
        free(doc);
    }
    TEST_END();
}
