"""llama-server's utility endpoints on `skiplm serve`, and its edges of CORS and API keys, with
references nobody here wrote: the GPT-2 encoder of npm gpt-3-encoder for POST /tokenize and
/detokenize, Hugging Face's JS Jinja for POST /apply-template, the Prometheus project's
text-format parser (python3-prometheus-client) for GET /metrics, curl for the raw HTTP.

1. /tokenize gives the reference encoder's ids (with_pieces: each id's text, joined = the
   text); /detokenize gives the text back; a bad id is a 400 naming 'tokens';
2. /apply-template gives the chat template's text as @huggingface/jinja renders it;
3. /metrics parses, and its counters equal the requests made and their usage;
4. the API key: 'Authorization: bearer  KEY ' (any case, spaces) passes; none, a wrong key or
   another scheme get 401 with WWW-Authenticate: Bearer; a CORS preflight (OPTIONS) passes
   without a key and allows the Authorization header; /health needs no key."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from prometheus_client.parser import text_string_to_metric_families

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402

VOCAB = os.path.join(ROOT, "node_modules", "gpt-3-encoder")
TEMPLATE = ("{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}### assistant:\n{% endif %}")
KEY = "s3cret-key"


def curl(url, path, body=None, headers=(), method=None, head=False):
    args = ["curl", "-sS", "-w", "\n%{http_code}", url + path]
    if head:
        args.insert(1, "-i")
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", body if isinstance(body, str) else json.dumps(body)]
    if method:
        args += ["-X", method]
    for h in headers:
        args += ["-H", h]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    out, _, code = r.stdout.rpartition("\n")
    return int(code or 0), out


def node(script, *args):
    r = subprocess.run(["node", "--input-type=module", "-e", script, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    return json.loads(r.stdout) if r.returncode == 0 else print(r.stderr[-1000:])


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    os.makedirs(model)
    for f in ("encoder.json", "vocab.bpe"):
        os.symlink(os.path.join(VOCAB, f), os.path.join(model, f))
    open(os.path.join(model, "chat_template.jinja"), "w").write(TEMPLATE)
    r = subprocess.run([SKIPLM, "init", os.path.join(model, "model.safetensors"), "--vocab_size", "50257", "--n_layer", "1", "--n_head", "2",
                        "--n_embd", "32", "--block_size", "256", "--seed", "3"], capture_output=True, text=True)
    if not check(r.returncode == 0, "a model of random weights with GPT-2's vocabulary"):
        finish()
    err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p = subprocess.Popen([SKIPLM, "serve", model, "--port", "0", "--parallel", "3", "--api-key", KEY], stdout=subprocess.DEVNULL, stderr=err)
    url = None
    for _ in range(300):
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", open(err.name).read())
        if m:
            url = f"http://127.0.0.1:{m.group(1)}"
            break
        time.sleep(0.05)
    if not check(url is not None, "the server starts"):
        finish()
    auth = [f"Authorization: bearer   {KEY} "]
    text = "Hello world, the café's naïve résumé: 42 tokens\n\tand more."
    want = node("import e from 'gpt-3-encoder'; process.stdout.write(JSON.stringify(e.encode(process.argv[1])))", text)
    code, out = curl(url, "/tokenize", {"content": text}, auth)
    got = json.loads(out).get("tokens") if code == 200 else out
    check(code == 200 and got == want, f"POST /tokenize: the reference encoder's {len(want or [])} ids ({code}, {got!r:.80})")
    code, out = curl(url, "/tokenize", {"content": text, "with_pieces": True}, auth)
    pieces = json.loads(out).get("tokens", []) if code == 200 else []
    check([x["id"] for x in pieces] == want and "".join(x["piece"] for x in pieces) == text, "with_pieces: each id with its text, joined the text")
    code, out = curl(url, "/detokenize", {"tokens": want}, auth)
    check(code == 200 and json.loads(out).get("content") == text, f"POST /detokenize: the text back ({code})")
    code, out = curl(url, "/detokenize", {"tokens": [1, 99999]}, auth)
    e = json.loads(out).get("error", {}) if out.startswith("{") else {}
    check(code == 400 and e.get("param") == "tokens" and "tokens[1]" in e.get("message", ""), f"a token id out of range: 400 ({e.get('message')})")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi, \u00e9t\u00e9?"}]
    ref = node("import {Template} from '@huggingface/jinja'; const [t, m] = process.argv.slice(1);"
               "process.stdout.write(JSON.stringify(new Template(t).render({messages: JSON.parse(m), add_generation_prompt: true})))",
               TEMPLATE, json.dumps(msgs))
    code, out = curl(url, "/apply-template", {"messages": msgs}, auth)
    check(code == 200 and json.loads(out).get("prompt") == ref, f"POST /apply-template: the template's text as @huggingface/jinja renders it ({out!r:.80})")
    code, out = curl(url, "/tokenize", None, auth, method="GET")
    check(code == 405, f"GET /tokenize: 405 ({code})")
    usage = []
    for k in range(2):
        code, out = curl(url, "/v1/completions", {"prompt": "a b c" * (k + 1), "max_tokens": 3 + k}, auth)
        usage.append(json.loads(out)["usage"] if code == 200 else {})
    code, out = curl(url, "/metrics", None, auth)
    fams = {f.name: f for f in text_string_to_metric_families(out)} if code == 200 else {}
    val = {name: f.samples[0].value for name, f in fams.items() if f.samples}
    check(code == 200 and val.get("skiplm_prompt_tokens") == sum(u.get("prompt_tokens", 0) for u in usage) and
          val.get("skiplm_tokens_predicted") == sum(u.get("completion_tokens", 0) for u in usage) and val.get("skiplm_slots") == 3 and
          val.get("skiplm_requests") == 8 and fams["skiplm_requests"].type == "counter" and val.get("skiplm_requests_processing") == 0,
          f"GET /metrics parses (Prometheus' parser) and counts the requests and their tokens ({val})")
    for h, what in (([], "no key"), ([f"Authorization: Bearer {KEY}x"], "a wrong key"), ([f"Authorization: Basic {KEY}"], "another scheme"),
                    ([f"Authorization: Bearer{KEY}"], "no space after the scheme")):
        code, out = curl(url, "/tokenize", {"content": "x"}, h, head=True)
        check(code == 401 and re.search(r"(?im)^WWW-Authenticate: Bearer", out) and '"invalid_api_key"' in out, f"{what}: 401 with WWW-Authenticate: Bearer")
    code, out = curl(url, "/v1/chat/completions", None, ["Origin: http://example.com", "Access-Control-Request-Method: POST",
                                                          "Access-Control-Request-Headers: authorization, content-type"], method="OPTIONS", head=True)
    check(code == 204 and re.search(r"(?im)^Access-Control-Allow-Origin: \*", out) and re.search(r"(?im)^Access-Control-Allow-Headers:.*Authorization", out),
          "a CORS preflight passes without a key and allows the Authorization header")
    code, out = curl(url, "/health")
    check(code == 200 and json.loads(out).get("status") == "ok", "/health needs no key")
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=30) == 0, "the server exits 0")
    check(not re.search(r"runtime error|AddressSanitizer|LeakSanitizer", open(err.name).read()), "the server's log has no sanitizer report")
    finish()


if __name__ == "__main__":
    main()
