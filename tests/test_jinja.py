"""Jinja2 chat-template renderer (src/text/jinja_*.c) against the JS port @huggingface/jinja (the engine
transformers.js uses; node tests/ref/jinja_render.mjs) and hand-written Python-jinja2 results:

1. real chat templates (tests/ref/chat_templates/) x conversations (system or not, multi-turn,
   add_generation_prompt on/off, tools, tool calls, a bad alternation that must raise), equal to
   the JS port; plus a hand-written expected prompt for SmolLM2, Qwen2.5, Llama 3.2, Zephyr
   (TinyLlama's format), Qwen3 and gemma-2;
2. small feature templates, each a hard case of one feature, with the output Python's jinja2
   gives (written by hand); the JS port must agree too except where a comment says it differs;
3. errors: syntax errors, unknown filters, raise_exception, undefined access, type errors, and
   limits (deep nesting, huge loops, huge output, macro recursion) fail fast with a message;
4. random templates from a small grammar (ints, strings, comparisons, boolean logic, loops,
   conditionals, common filters), equal to the JS port.

Provenance of the templates (raw chat_template text; none was edited):
  SmolLM2-135M-Instruct   as quoted in several repositories (e.g. a Rust test "The actual SmolLM2
                          chat_template ... as in the model's tokenizer_config"); all copies agree
  Qwen2.5-0.5B-Instruct   the chat_template string of a Qwen2.5 tokenizer_config.json quoted in a
                          public write-up (the same template as in ggml llama.cpp's Qwen2.5 tests)
  Llama-3.2-3B-Instruct   llama.cpp models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja (Llama
                          3.2 1B Instruct ships the same template)
  Qwen3-0.6B              llama.cpp models/templates/Qwen-Qwen3-0.6B.jinja
  DeepSeek-R1-Distill-Qwen-32B  llama.cpp models/templates (the R1-Distill-Qwen family template)
  gemma-2-2b-it           llama.cpp models/templates/google-gemma-2-2b-it.jinja
  Phi-3.5-mini-instruct   llama.cpp models/templates/microsoft-Phi-3.5-mini-instruct.jinja (Phi-3-mini's
                          own template was not found verbatim)
  zephyr-7b-beta          huggingface.js packages/jinja/test/e2e.test.js (HuggingFaceH4/zephyr-7b-beta;
                          TinyLlama-1.1B-Chat-v1.0 uses this Zephyr format; its own
                          tokenizer_config was not found verbatim)
  Mixtral-8x7B-Instruct-v0.1  huggingface.js e2e.test.js (raise_exception on alternation;
                          Mistral-7B-Instruct-v0.3's template was not found verbatim)
  The files named as in llama.cpp's models/templates/ are that directory's files, byte for byte:
  from ggml-org/llama.cpp: deepseek-ai-DeepSeek-V3.1, llama-cpp-microsoft-Phi-4-mini-instruct,
  moonshotai-Kimi-K2 (CRLF line ends, as there), CohereForAI-c4ai-command-r7b-12-2024-tool_use;
  from ggerganov/llama.cpp: mistralai-Mistral-Nemo-Instruct-2407, meetkai-functionary-medium-v3.1,
  fireworks-ai-llama-3-firefunction-v2; from the ye-NX/llama.cpp mirror (its checkout has CRLF line
  ends; stored with llama.cpp's LF, as its other files there show): NousResearch-Hermes-3-Llama-3.1-8B-tool_use,
  meta-llama-Llama-3.3-70B-Instruct (Llama 3.1's format: tools, date_string), Qwen-QwQ-32B,
  ibm-granite-granite-3.3-2B-Instruct (strftime_now), meetkai-functionary-medium-v3.2.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import BUILD, ROOT, check, finish  # noqa: E402

TOOL = os.path.join(BUILD, "tests", "tool_jinja")
TEMPLATES = os.path.join(HERE, "ref", "chat_templates")
NOW = 1722000000  # 2024-07-26 13:20:00 UTC
ENV = dict(os.environ, TZ="UTC")


def render_c(cases, tmp):
    """cases: [(template, context, now)] -> [(ok, text)]"""
    src, dst = os.path.join(tmp, "c_in.bin"), os.path.join(tmp, "c_out.bin")
    with open(src, "wb") as f:
        for tpl, ctx, now in cases:
            t, c = tpl.encode(), json.dumps(ctx).encode()
            f.write(struct.pack("<I", len(t)) + t + struct.pack("<I", len(c)) + c + struct.pack("<q", now))
    subprocess.run([TOOL, "--batch", src, dst], check=True, env=ENV)
    data, out, i = open(dst, "rb").read(), [], 0
    while i < len(data):
        st, n = data[i], struct.unpack_from("<I", data, i + 1)[0]
        out.append((st == 0, data[i + 5:i + 5 + n].decode()))
        i += 5 + n
    return out


def render_js(cases, tmp, fix_clock=False):
    """fix_clock: the JS port's strftime_now reads the case's `now` instead of the clock"""
    src, dst = os.path.join(tmp, "js_in.json"), os.path.join(tmp, "js_out.json")
    with open(src, "w") as f:
        json.dump([dict({"template": t, "context": c}, **({"now": n} if fix_clock else {})) for t, c, n in cases], f)
    subprocess.run(["node", os.path.join(HERE, "ref", "jinja_render.mjs"), src, dst], check=True, cwd=ROOT, env=ENV)
    return [("ok" in r, r.get("ok", r.get("error"))) for r in json.load(open(dst))]


def tpl(name):
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8", newline="") as f:
        return f.read()


# ------------------------------------------------------------------ 1. real templates
SYS = {"role": "system", "content": "You are a friendly chatbot."}
U1 = {"role": "user", "content": "Hi"}
A1 = {"role": "assistant", "content": "Hello! How can I help?  "}
U2 = {"role": "user", "content": "What's 2+2? Ünïcödé ✓"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                         "required": ["city"]}}}]
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
CALL_STR = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
TOOL_RES = {"role": "tool", "content": "22 C, sunny", "tool_call_id": "call12345"}
A2 = {"role": "assistant", "content": "It is 22 C in Paris."}
THINK = {"role": "assistant", "content": "<think>\nLet me add.\n</think>\n\n4"}
BASE = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024",
        "functions": '[{"name": "get_weather"}]', "datetime": "2024-07-26"}   # (firefunction-v2's variables)

CONVS = {
    "one user": [U1],
    "system+user": [SYS, U1],
    "multi-turn": [U1, A1, U2],
    "system multi-turn": [SYS, U1, A1, U2],
    "thinking reply": [U1, THINK, U2],
    "ends with assistant": [SYS, U1, A1],
}
TOOL_CONVS = {
    "tools": ([U1], TOOLS, False),
    "tool call + result": ([U2, CALL, TOOL_RES, A2], TOOLS, False),
    "tool call, content ''": ([U2, dict(CALL, content=""), TOOL_RES, A2], TOOLS, False),
    "tool call (string args)": ([U2, CALL_STR, TOOL_RES, A2], TOOLS, True),
}
SUPPORTS_TOOLS = {"Qwen2.5-0.5B-Instruct", "Qwen3-0.6B", "Llama-3.2-3B-Instruct", "DeepSeek-R1-Distill-Qwen-32B",
                  "mistralai-Mistral-Nemo-Instruct-2407", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
                  "meetkai-functionary-medium-v3.1", "meetkai-functionary-medium-v3.2", "meta-llama-Llama-3.3-70B-Instruct",
                  "Qwen-QwQ-32B", "ibm-granite-granite-3.3-2B-Instruct", "fireworks-ai-llama-3-firefunction-v2",
                  "deepseek-ai-DeepSeek-V3.1", "llama-cpp-microsoft-Phi-4-mini-instruct", "moonshotai-Kimi-K2",
                  "CohereForAI-c4ai-command-r7b-12-2024-tool_use"}
# These concatenate the arguments as a string (a dict there is a TypeError in jinja2, as in ours).
STRING_ARGS = {"DeepSeek-R1-Distill-Qwen-32B", "meetkai-functionary-medium-v3.1", "meetkai-functionary-medium-v3.2",
               "fireworks-ai-llama-3-firefunction-v2", "deepseek-ai-DeepSeek-V3.1"}
# Templates that loop over an undefined `tools` or `message.tool_calls`: jinja2's Undefined iterates as
# empty, the JS port raises "Expected iterable ... got UndefinedValue". The JS port renders them from a
# context where the missing value is an empty list, which is the same rendering in Python.
JS_UNDEF_ITER = {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "tools",
                 "llama-cpp-microsoft-Phi-4-mini-instruct": "tool_calls"}
# The JS port cannot unpack a tuple in a for loop (`for a, b in [(1, 2)]`), which functionary-v3.2 does
# for every tool parameter: its tool conversations are compared with hand-written prompts (HAND).
JS_NO_TUPLE_FOR = {"meetkai-functionary-medium-v3.2"}
BAD_ALT = {"gemma-2-2b-it": [U1, U1], "Mixtral-8x7B-Instruct-v0.1": [U1, U1],
           "Llama-3.2-3B-Instruct (two tool calls)": None}
RAISES = {  # (template, conversation, extra context) -> the exception's message
    ("gemma-2-2b-it", "user user"): ([U1, U1], {}, "Conversation roles must alternate user/assistant/user/assistant/..."),
    ("gemma-2-2b-it", "system"): ([SYS, U1], {}, "System role not supported"),
    ("Mixtral-8x7B-Instruct-v0.1", "assistant first"): ([A1, U1], {}, "Conversation roles must alternate user/assistant/user/assistant/..."),
    ("Mixtral-8x7B-Instruct-v0.1", "system"): ([SYS, U1], {}, "Conversation roles must alternate user/assistant/user/assistant/..."),
    ("Llama-3.2-3B-Instruct", "two tool calls"): ([U2, dict(CALL, tool_calls=CALL["tool_calls"] * 2)], {"tools": TOOLS},
                                                  "This model only supports single tool-calls at once!"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "tool call id"): (
        [U2, dict(CALL, tool_calls=[dict(CALL["tool_calls"][0], id="c1")])], {"tools": TOOLS},
        "Tool call IDs should be alphanumeric strings with length 9!"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "user user"): (
        [U1, U1], {}, "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."),
    ("Llama-3.2-3B-Instruct", "tools, no user"): ([SYS], {"tools": TOOLS},
                                                  "Cannot put tools in the first user message when there's no first user message!"),
}
# A None content is an error in jinja2 for the templates that test it with `in`, split it or add it.
EXPECTED_FAILS = [f"{n}: tool call + result, add_generation_prompt={agp}" for n in
                  ("Qwen-QwQ-32B", "Qwen3-0.6B", "ibm-granite-granite-3.3-2B-Instruct", "moonshotai-Kimi-K2") for agp in (True, False)]
NAMES = sorted(f[:-6] for f in os.listdir(TEMPLATES) if f.endswith(".jinja"))

# Hand-written prompts: what each model's documented format gives (Python jinja2 / transformers).
QWEN25_TOOLS = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": '
    '{"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}}\n'
    "</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n<|im_start|>user\nWhat's 2+2? Ünïcödé ✓<|im_end|>\n<|im_start|>assistant\n"
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n22 C, sunny\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\nIt is 22 C in Paris.<|im_end|>\n<|im_start|>assistant\n")
LLAMA_TOOLS = (
    "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    "best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.Do not use variables.\n\n"
    '{\n    "type": "function",\n    "function": {\n        "name": "get_weather",\n        "description": "Get the weather",\n'
    '        "parameters": {\n            "type": "object",\n            "properties": {\n                "city": {\n'
    '                    "type": "string",\n                    "description": "City name"\n                }\n'
    '            },\n            "required": [\n                "city"\n            ]\n        }\n    }\n}\n\n'
    "What's 2+2? Ünïcödé ✓<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
    "<|start_header_id|>ipython<|end_header_id|>\n\n\"22 C, sunny\"<|eot_id|>"  # a str is iterable: tojson
    "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 22 C in Paris.<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n")
HAND = [  # (template, messages, extra context, add_generation_prompt, expected)
    ("SmolLM2-135M-Instruct", [U1], {}, True,
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    ("SmolLM2-135M-Instruct", [SYS, U1, A1], {}, False,
     "<|im_start|>system\nYou are a friendly chatbot.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
     "<|im_start|>assistant\nHello! How can I help?  <|im_end|>\n"),
    ("Qwen2.5-0.5B-Instruct", [U1], {}, True,
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    ("Qwen2.5-0.5B-Instruct", [U2, CALL, TOOL_RES, A2], {"tools": TOOLS}, True, QWEN25_TOOLS),
    ("Llama-3.2-3B-Instruct", [U1], {"bos_token": "<|begin_of_text|>", "date_string": None}, True,   # strftime_now
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("Llama-3.2-3B-Instruct", [SYS, U1, A1], {}, False,
     "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024"
     "\n\nYou are a friendly chatbot.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"),
    ("Llama-3.2-3B-Instruct", [U2, CALL, TOOL_RES, A2], {"tools": TOOLS}, True, LLAMA_TOOLS),
    ("zephyr-7b-beta", [SYS, U1], {}, True, "<|system|>\nYou are a friendly chatbot.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"),
    ("zephyr-7b-beta", [U1, A1], {}, False, "<|user|>\nHi</s>\n<|assistant|>\nHello! How can I help?  </s>\n"),
    ("gemma-2-2b-it", [U1, A1, U2], {"bos_token": "<bos>"}, True,
     "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello! How can I help?<end_of_turn>\n"
     "<start_of_turn>user\nWhat's 2+2? Ünïcödé ✓<end_of_turn>\n<start_of_turn>model\n"),
    # the JS port cannot render this one (JS_NO_TUPLE_FOR); checked by hand against functionary's code
    ("meetkai-functionary-medium-v3.2", [U2, CALL_STR, TOOL_RES, A2], {"tools": TOOLS}, True,
     "<s><|start_header_id|>system<|end_header_id|>\n\nYou are capable of executing available function(s) if required.\n"
     "Only execute function(s) when absolutely necessary.\nAsk for the required input to:recipient==all\n"
     "Use JSON for function arguments.\nRespond in this format:\n>>>${recipient}\n${content}\nAvailable functions:\n"
     "// Supported function definitions that should be called when necessary.\nnamespace functions {\n\n"
     "// Get the weather\ntype get_weather = (_: {\n// City name.\ncity: string,\n}) => any;\n\n} // namespace functions"
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat's 2+2? Ünïcödé ✓<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n>>>get_weather\n{\"city\": \"Paris\"}<|eot_id|>"
     "<|start_header_id|>tool<|end_header_id|>\n\n22 C, sunny<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
     ">>>all\nIt is 22 C in Paris.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n>>>"),
    # loops over the undefined message.tool_calls of plain messages (JS_UNDEF_ITER)
    ("llama-cpp-microsoft-Phi-4-mini-instruct", [U2], {}, True, "<|user|>What's 2+2? Ünïcödé ✓<|end|><|assistant|>"),
    ("llama-cpp-microsoft-Phi-4-mini-instruct", [U2, CALL, TOOL_RES, A2], {"tools": TOOLS}, False,
     '<|system|><|tool|>{"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", '
     '"properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}<|/tool|>'
     'You are a helpful assistant with some tools.\nTo use a tool, respond in this format: <|tool_call|>{"name": "foo", '
     '"arguments": {"a": 1}}<|/tool_call|><|end|><|user|>What\'s 2+2? Ünïcödé ✓<|end|><|assistant|><|tool_call|>'
     '{"name": "get_weather", "arguments": {"city": "Paris"}}<|/tool_call|><|end|><|tool_response|>"22 C, sunny"<|end|>'
     '<|assistant|>It is 22 C in Paris.<|end|></s>'),
    ("Qwen3-0.6B", [U1, THINK], {}, False,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nLet me add.\n</think>\n\n4<|im_end|>\n"),
    ("Qwen3-0.6B", [U1, THINK, U2], {"enable_thinking": False}, True,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nWhat's 2+2? Ünïcödé ✓"
     "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
]


def js_context(name, ctx):
    """the context the JS port gets: Python renders it as it renders ctx (see JS_UNDEF_ITER)"""
    what = JS_UNDEF_ITER.get(name)
    if what == "tools":
        return dict(ctx, tools=ctx.get("tools", []))
    if what == "tool_calls":
        return dict(ctx, messages=[dict(m, tool_calls=m.get("tool_calls", [])) for m in ctx["messages"]])
    return ctx


def real_templates(tmp):
    cases, names, js_cases = [], [], []
    for name in NAMES:
        t = tpl(name)
        for cname, msgs in CONVS.items():
            if name in ("gemma-2-2b-it", "Mixtral-8x7B-Instruct-v0.1") and (msgs[0]["role"] == "system"):
                continue   # these raise on a system message (tested below)
            for agp in (True, False):
                ctx = dict(BASE, messages=msgs, add_generation_prompt=agp)
                if name == "meetkai-functionary-medium-v3.1":
                    ctx["tools"] = TOOLS   # `none | selectattr(...)` raises without tools, in jinja2 too
                cases.append((t, ctx, NOW))
                names.append(f"{name}: {cname}, add_generation_prompt={agp}")
        if name in SUPPORTS_TOOLS:
            for cname, (msgs, tools, string_args) in TOOL_CONVS.items():
                if string_args != (name in STRING_ARGS):
                    continue
                for agp in (True, False):
                    ctx = dict(BASE, messages=msgs, add_generation_prompt=agp)
                    if tools:
                        ctx["tools"] = tools
                    cases.append((t, ctx, NOW))
                    names.append(f"{name}: {cname}, add_generation_prompt={agp}")
    for (name, cname), (msgs, extra, msg) in RAISES.items():
        cases.append((tpl(name), dict(BASE, messages=msgs, add_generation_prompt=True, **extra), NOW))
        names.append(f"{name}: {cname} raises")
    for (t, ctx, now), n in zip(cases, names):
        js_cases.append((t, js_context(n.split(":")[0], ctx), now))
    c, js = render_c(cases, tmp), render_js(js_cases, tmp, fix_clock=True)
    skip = lambda n: n.split(":")[0] in JS_NO_TUPLE_FOR and "tool" in n.split(":")[1]  # noqa: E731
    bad = [(n, a, b) for n, a, b in zip(names, c, js) if not (a == b or (not a[0] and not b[0]) or skip(n))]
    check(not bad, f"{len(cases)} renderings of {len(NAMES)} real templates equal the JS port's"
          f" ({sum(map(skip, names))} skipped: JS_NO_TUPLE_FOR)"
          + (f"; {len(bad)} differ, first {bad[0][0]}:\n C: {bad[0][1]!r}\nJS: {bad[0][2]!r}" if bad else ""))
    fails = [n for n, (ok, _) in zip(names, c) if not ok and not n.endswith("raises")]
    check(fails == EXPECTED_FAILS, f"{len(EXPECTED_FAILS)} renderings fail as in jinja2 (e.g. a None content that"
          " a template iterates or splits), the rest render" + ("" if fails == EXPECTED_FAILS else f": {fails}"))
    raised = [(n, r) for n, r in zip(names, c) if n.endswith("raises")]
    want = [m for _, _, m in RAISES.values()]
    check(all(not ok for _, (ok, _) in raised) and [m for _, (_, m) in raised] == want,
          f"{len(RAISES)} raise_exception cases (bad alternation, system role, tool limits) fail with the template's message")

    hcases = []
    for name, msgs, extra, agp, _ in HAND:
        ctx = dict(BASE, messages=msgs, add_generation_prompt=agp)
        ctx.update(extra)
        ctx = {k: v for k, v in ctx.items() if v is not None}
        hcases.append((tpl(name), ctx, NOW))
    got = render_c(hcases, tmp)
    for (name, msgs, _, agp, want), (ok, out) in zip(HAND, got):
        check(ok and out == want, f"{name}: hand-written prompt ({len(msgs)} messages, add_generation_prompt={agp})"
              + ("" if ok and out == want else f"\n got {out!r}\nwant {want!r}"))


# ------------------------------------------------------------------ 2. features
# (template, context, Python jinja2's output, None or why the JS port differs (then not compared))
JS_CR = "the JS port does not normalise \\r\\n newlines"
JS_STRLOOP = "the JS port cannot loop over a string"
JS_BOOL = "the JS port prints booleans as true/false (Python: True/False)"
JS_NONE = "the JS port prints none as '' (Python: None)"
JS_REPR = "the JS port prints lists and dicts as JSON (Python: repr)"
FEATURES = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("a\n{% if true %}\nb\n{% endif %}\nc", {}, "a\nb\nc", None),
    ("  {% if true %}x{% endif %}  y", {}, "x  y", None),
    ("a  {% if true %}x{% endif %}", {}, "a  x", None),
    ("{{ 'a' }}  {% if true %}x{% endif %}", {}, "a  x", None),
    ("a\n  {%- if true %}x{% endif %}", {}, "ax", None),
    ("{% if true -%}\n\n  x{% endif %}", {}, "x", None),
    ("{{ 'a' -}}\n  b", {}, "ab", None),
    ("a  {{- 'b' }}", {}, "ab", None),
    ("{% if true %}\n  x\n{% endif %}\n", {}, "  x\n", None),
    ("{# c #}\nx", {}, "x", None),
    ("  {# c #}\nx", {}, "x", None),
    ("a {#- c -#} b", {}, "ab", None),
    ("{% raw %}{{ x }}{% if %}{% endraw %}", {}, "{{ x }}{% if %}", "no raw blocks in the JS port"),
    ("  {%+ if true %}x{% endif %}", {}, "  x", "no '+' whitespace control in the JS port"),
    ("{% if true +%}\nx{% endif %}", {}, "\nx", "no '+' whitespace control in the JS port"),
    ("{{ 'a' }}\n  {% if true %}b{% endif %}", {}, "a\nb", None),
    ("a\r\n{% if true %}\r\nb{% endif %}", {}, "a\nb", JS_CR),
    ("x\n", {}, "x", None),
    ("x\n\n", {}, "x\n", None),
    ("{%- if true -%} x {%- endif -%} ", {}, "x", None),
    ("{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}", {}, "  1\n  2\n", None),
    ("{{\n  1 +\n  2\n}}", {}, "3", None),
    ("a {{ '-}}' }} b", {}, "a -}} b", None),
    # loops
    ("{% for i in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}"
     "{{ loop.last }}{{ loop.length }},{% endfor %}", {}, "1032TrueFalse3,2121FalseFalse3,3210FalseTrue3,", JS_STRLOOP),
    ("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", {}, "-2;1-3;2-;", None),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}, "b=1;a=2;", None),
    ("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", {}, "2242", None),
    ("{% for x in [] %}a{% else %}empty{% endfor %}", {}, "empty", None),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     {}, "0134", None),
    ("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", {}, "1", None),
    ("{% set ns = namespace(a=1, b=[]) %}{% for i in [1,2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}", {}, "4[]", None),
    ("{% for a in [1,2] %}{% set outer = loop %}{% for b in [1] %}{{ outer.index }}{{ loop.index }}{% endfor %}{% endfor %}", {}, "1121", None),
    ("{% for k in d %}{{ k }}{% endfor %}", {"d": {"x": 1, "y": 2}}, "xy", None),
    ("{% for m in msgs[::-1] %}{{ m }}{% endfor %}", {"msgs": [1, 2, 3]}, "321", None),
    ("{% for i in [1,2,3] %}{{ loop.cycle('a','b') }}{% endfor %}", {}, "aba", "no loop.cycle in the JS port"),
    ("{% for c in 'hé' %}[{{ c }}]{% endfor %}", {}, "[h][é]", JS_STRLOOP),
    ("{% for x in nope %}a{% endfor %}{% for t in m.tool_calls %}b{% endfor %}c", {"m": {}}, "c",
     "the JS port cannot loop over undefined (jinja2: empty)"),
    ("{% for a, b in [(1, 2), ('x', 'y')] %}{{ a }}{{ b }};{% endfor %}", {}, "12;xy;", "the JS port cannot unpack tuples in a for loop"),
    ("{{ 0.5|round }} {{ -0.5|round }} {{ 10|round(-1) }}", {}, "0.0 -0.0 10", "no round filter in the JS port"),
    ("{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l }}", {}, "[0, 1, 2]", None),
    ("{% for x in [1,2,3] %}{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}{% endfor %}", {}, "abc", None),
    ("{% for x in [1] %}{% if true %}{% set y = 5 %}{% endif %}{{ y }}{% endfor %}[{{ y }}]", {}, "5[]", None),
    # jinja2 re-reads an outer variable at the start of every iteration (a body's set does not carry over)
    ("{% set n = 1 %}{% for i in [1,2] %}{{ n }}{% set n = 5 %}{{ n }}{% endfor %}{{ n }}", {}, "15151",
     "the JS port keeps a loop body's set across iterations"),
    # set, macro, blocks
    ("{% set x %}a{{ 1 }}b{% endset %}[{{ x }}]", {}, "[a1b]", None),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}, "12", None),
    ("{% set x | upper %}abc{% endset %}{{ x }}", {}, "ABC", "no filtered block set in the JS port"),
    ("{% macro f(a, b='B') %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, 2) }}|{{ f(b=3, a=4) }}", {}, "1-B|1-2|4-3", None),
    ("{% macro f(x) %}\n  <{{ x }}>\n{% endmacro %}{{ f('a') }}", {}, "  <a>\n", None),
    ("{% macro f() %}{% endmacro %}{{ f is callable }}", {}, "True", JS_BOOL),
    ("{% generation %}x{% endgeneration %}", {}, "x", None),
    ("{% filter upper %}ab{{ 'c' }}{% endfilter %}", {}, "ABC", None),
    # expressions and printing
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 6 / 2 }}",
     {}, "7 9 3 -4 1 2 1024 3.5 3.0", "JS's % keeps the dividend's sign (-7 % 3 == -1)"),
    ("{{ 2 ** 3 ** 2 }}", {}, "64", None),
    ("{{ -2 ** 2 }} {{ -3|abs }}", {}, "4 3", None),
    ("{{ 10 / 4 }} {{ 10 // 4 }} {{ 10.0 // 4 }} {{ 2 ** -1 }} {{ 7.5 % 2 }} {{ true + 1 }}", {}, "2.5 2 2.0 0.5 1.5 2", "no bool arithmetic in the JS port"),
    ("{{ 'a' ~ 1 ~ none }}", {}, "a1None", JS_NONE),
    ("{{ 'ab' * 3 }} {{ [1] * 2 }}", {}, "ababab [1, 1]", "no sequence repetition in the JS port"),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}, "True False", "no chained comparisons in the JS port"),
    ("{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", {}, "True True True True", JS_BOOL),
    ("{{ 'yes' if x else 'no' }} {{ 'y' if not x }}", {"x": False}, "no y", None),
    ("[{{ x if x }}]", {"x": 0}, "[]", None),
    ("{{ 0 or 'b' }} {{ 1 and 'c' }} {{ [] or none }}", {}, "b c None", JS_NONE),
    ("{{ not 1 == 2 }} {{ -x }}", {"x": 3}, "True -3", JS_BOOL),
    ("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1,2] == [1,2] }} {{ none == none }} {{ 1 == '1' }}", {},
     "True True True True True False", JS_BOOL),
    ("{{ 'a\\tb\\n\\u00e9\\x41\\\\' }}|{{ \"q\\\"q\" }}", {}, "a\tb\néA\\|q\"q", None),
    ("{{ 'a' 'b' }}", {}, "ab", None),
    ("{{ {'a': 1, 'b': [true, none, 1.5]} }}", {}, "{'a': 1, 'b': [True, None, 1.5]}", JS_REPR),
    ("{{ (1,) }} {{ (1, 'a') }} {{ () }}", {}, "(1,) (1, 'a') ()", "the JS port has no tuples"),
    ("{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'a\\nb'] }}", {}, "[\"it's\", 'say \"hi\"', 'both \\' \"', 'a\\nb']", JS_REPR),
    ("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 100.0 / 3 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }}", {},
     "1.0 0.30000000000000004 1e+20 1.5e-07 33.333333333333336 1e+16 1000000000000000.0 0.0001", "no exponent float literals in the JS port"),
    ("{{ a }} {{ b }} {{ c }}", {"a": 3, "b": 2.5, "c": -7}, "3 2.5 -7", None),
    ("{{ none }} {{ true }} {{ x }} {{ False }}", {"x": None}, "None True None False", JS_NONE),
    ("[{{ nope }}][{{ d.missing }}]", {"d": {}}, "[][]", None),
    ("{{ 9007199254740993 }}", {}, "9007199254740993", "JS numbers are doubles"),
    ("{{ 1 + 1 is even }}", {}, "1", "the JS port applies `is` after `+` (jinja2: 1 + (1 is even))"),
    ("{{ x.a }} {{ x['a'] }} {{ x.b.c }} {{ x.l.0 }}", {"x": {"a": 1, "b": {"c": 2}, "l": [7]}}, "1 1 2 7", None),
    ("{{ messages[0]['content'] | trim + '!' }}", {"messages": [{"content": "  hi  "}]}, "hi!", None),
    # slicing, unicode
    ("{{ 'hello'[1:] }} {{ 'hello'[:-1] }} {{ 'hello'[::-1] }} {{ 'hello'[1:4:2] }} {{ 'hello'[-2] }}", {},
     "ello hell olleh el l", None),
    ("{{ x[1:] }} {{ x[:-1] }} {{ x[::-1] }} {{ x[-1] }} [{{ x[5] }}] {{ x[-10:2] }}", {"x": [1, 2, 3]},
     "[2, 3] [1, 2] [3, 2, 1] 3 [] [1, 2]", None),
    ("{{ s|length }} {{ s[1] }} {{ s[::-1] }} {{ s|upper }}", {"s": "héllo wörld"}, "11 é dlröw olléh HÉLLO WÖRLD", None),
    ("{{ '日本語'[1:] }} {{ '😀a'|length }}", {}, "本語 2", "JS strings count UTF-16 units"),
    # filters
    ("[{{ '  a b \\n'|trim }}] [{{ 'xxaxx'|trim('x') }}]", {}, "[a b] [a]", "no trim filter on strings in the JS port"),
    ("{{ x|tojson }}", {"x": {"a": [1, 2.5, None, True, "é\"\n"]}}, '{"a": [1, 2.5, null, true, "é\\"\\n"]}', None),
    ("{{ x|tojson(indent=2) }}", {"x": {"a": [1, {}], "b": []}}, '{\n  "a": [\n    1,\n    {}\n  ],\n  "b": []\n}', None),
    ("{{ 'ü\u2028<>&\\x01'|tojson }}", {}, '"ü\u2028<>&\\u0001"', None),
    ("{{ {'z': 1, 'a': 2}|tojson }} {{ 'x'|tojson }} {{ 1.0|tojson }}", {}, '{"z": 1, "a": 2} "x" 1.0', "the JS port's tojson prints 1.0 as 1"),
    ("{{ {'z': 1, 'a': [2]}|tojson(sort_keys=true, separators=(',', ':')) }}", {}, '{"a":[2],"z":1}', None),
    ("{{ 'hELLO wORLD'|capitalize }} {{ 'hello-world foo(bar)'|title }} {{ 'ABC'|lower }}", {}, "Hello world Hello-World Foo(Bar) abc", "the JS port's capitalize leaves the rest as is"),
    ("{{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}", {}, "bba -a-b-c-", None),
    ("{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|first }} [{{ []|first }}]", {}, "1 3 a []", "no first filter on strings in the JS port"),
    ("{{ [1,'a',none]|join(', ') }} {{ users|join('/', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]},
     "1, a, None x/y", "the JS port's join has no attribute= and prints none as ''"),
    ("{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ y|d('z') }}", {}, "d None d z", "no d alias in the JS port"),
    ("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|float }} {{ 'a'|float }}",
     {}, "42 4 0 5 3 2.5 3.0 0.0", None),
    ("{{ 'ab'|list }} {{ {'b': 1, 'a': 2}|items|list }} {{ {'b': 1, 'A': 2}|dictsort }}", {},
     "['a', 'b'] [('b', 1), ('a', 2)] [('A', 2), ('b', 1)]", "the JS port prints pairs as lists"),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }}",
     {"msgs": [{"role": "user", "c": "a"}, {"role": "bot", "c": "b"}, {"role": "user", "c": "c"}]}, "ac 1", None),
    ("{{ xs|selectattr('v')|map(attribute='n')|join }}", {"xs": [{"v": 1, "n": "a"}, {"v": 0, "n": "b"}, {"n": "c"}]}, "a", None),
    ("{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('odd')|list }} {{ [0,1,'',none,'a']|select|list }}", {},
     "[1, 3] [2, 4] [1, 'a']", "no select/reject in the JS port"),
    ("{{ ['a','b']|map('upper')|join }}", {}, "AB", "no map(filter) in the JS port"),
    ("{{ ['a','A','b','a']|unique|list }}", {}, "['a', 'b']", "the JS port's unique is case-sensitive"),
    ("{{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ [3,1,2]|sort(reverse=true) }} {{ xs|sort(attribute='n')|map(attribute='n')|list }}",
     {"xs": [{"n": 2}, {"n": 1}]}, "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [1, 2]", JS_REPR),
    ("{{ 'abc'|reverse }} {{ [1,2]|reverse|list }}", {}, "cba [2, 1]", "no reverse on strings in the JS port"),
    ("{{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(method='ceil') }} {{ 3|round }} {{ 2.675|round(2) }}", {},
     "2.0 3.14 3.0 3 2.67", "no round filter in the JS port"),
    ("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}", {},
     "a\n  b\n\n  c|  a\n  b|a\n> \n> b", "the JS port's indent takes no string width"),
    # whole characters, never bytes inside one: U+00E2's second byte is U+0085's (a line break)
    ("{{ x.splitlines() }}|{{ y|indent(2, true) }}", {"x": "\u00e2E", "y": "\u1085x"}, "['\u00e2E']|  \u1085x",
     "no str.splitlines() in the JS port"),
    ("{{ 'Hello, world! foo_bar 42'|wordcount }}", {}, "4", "no wordcount in the JS port"),
    ("{{ [1,2,3]|sum }} {{ [3,1,2]|min }} {{ [3,1,2]|max }} {{ xs|sum(attribute='n') }} {{ ['b','A']|max }}",
     {"xs": [{"n": 1}, {"n": 2}]}, "6 1 3 3 b", "no sum in the JS port"),
    ("{{ [1,2]|length }} {{ 'héllo'|count }} {{ {'a': 1}|length }} {{ x|length }}", {}, "2 5 1 0", "no count filter in the JS port"),
    ("{{ 1|string ~ 2 }} {{ none|string }} {{ [1]|string }}", {}, "12 None [1]", "the JS port's string filter rejects none"),
    ("{{ '<a href=\"x\">&\\''|e }}", {}, "&lt;a href=&#34;x&#34;&gt;&amp;&#39;", "no e alias in the JS port"),
    ("[{{ 'ab'|center(6) }}] [{{ 'abc'|center(6) }}]", {}, "[  ab  ] [ abc  ]", "no center in the JS port"),
    ("{{ [1,2,3]|batch(2)|list }}", {}, "[[1, 2], [3]]", "no batch in the JS port"),
    ("{{ 'ÀÉÎõü ßtraße ΑΒΓ абв'|lower }} {{ 'àéîõü straße αβγ абв'|upper }}", {}, "àéîõü ßtraße αβγ абв ÀÉÎÕÜ STRASSE ΑΒΓ АБВ", None),
    # tests
    ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} "
     "{{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}", {"x": 1}, "True False True True True True True True True", "no float test in the JS port"),
    ("{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ [] is sequence }} {{ 3 is odd }} "
     "{{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }}", {}, "True True True False True True True True False", "the JS port takes no test argument without parentheses"),
    ("{{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 1 is in [1] }} {{ 1 is ne 2 }} {{ true is true }} {{ 1 is true }} "
     "{{ false is false }} {{ 'a' is not none }}", {}, "True True False True True True False True True", "the JS port takes no test argument without parentheses"),
    ("{{ m.tool_calls is defined }} {{ m.a.b is defined }} {{ x.y is defined }} {{ m.a is mapping }}", {"m": {"a": {}}, "x": None},
     "False False False True", JS_BOOL),
    ("{{ 'AB' is upper }} {{ 'aB' is lower }} {{ 'x' is in 'xyz' }}", {}, "True False True", "the JS port takes no test argument without parentheses"),
    # methods
    ("{{ ' a '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na'.lstrip('\\n') }}|{{ 'a\\n'.rstrip() }}|", {}, "a|a|a|a|", "the JS port's strip(chars) ignores chars"),
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}", {}, "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']", JS_REPR),
    ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} "
     "{{ 'hello'.replace('l', 'L') }} {{ 'hello'.upper() }} {{ 'hello world'.title() }} {{ \"they're\".title() }}", {},
     "True True 2 2 heLLo HELLO Hello World They'Re", "no find/count/title methods in the JS port"),
    ("{{ '-'.join(['a','b']) }} {{ '{} and {}'.format(1, 'x') }} {{ 'abc'.capitalize() }}", {}, "a-b 1 and x Abc", "no str.format in the JS port"),
    ("{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 0) }} {{ d.get('z') }}", {"d": {"a": 1, "b": 2}},
     "['a', 'b'] [1, 2] 1 0 None", JS_NONE),
    ("{{ 'a b'.split()|length }} {{ 'abc'[0] ~ 'abc'[-1] }} {{ '</think>' in s }} {{ s.split('</think>')[-1].lstrip('\\n') }}",
     {"s": "a</think>\n\nb"}, "2 ac True b", JS_BOOL),
    # globals
    ("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}", {}, "[0, 1, 2] [1, 3, 5] [3, 2, 1]", None),
    ("{% if false %}{{ raise_exception('no') }}{% endif %}ok", {}, "ok", None),
    ("{{ strftime_now('%Y-%m-%d %H:%M %b') }}", {}, "2024-07-26 13:20 Jul", "the JS port's strftime_now reads the clock"),
    ("{{ dict(a=1)|tojson }} {{ namespace(x=[1]).x }}", {}, '{"a": 1} [1]', "no dict() in the JS port"),
    ("{{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1,2] < [1,3] }}", {}, "True True True", "no string ordering in the JS port"),
]


def features(tmp):
    cases = [(t, c, NOW) for t, c, _, _ in FEATURES]
    got, js = render_c(cases, tmp), render_js(cases, tmp)
    bad = [(t, g, w) for (t, _, w, _), g in zip(FEATURES, got) if g != (True, w)]
    check(not bad, f"{len(FEATURES)} feature templates render as Python's jinja2 does"
          + "".join(f"\n  {t!r}: got {g!r}, want {w!r}" for t, g, w in bad[:10]))
    cmp = [(f, j) for f, j in zip(FEATURES, js) if f[3] is None]
    jbad = [(f[0], j, f[2]) for f, j in cmp if j != (True, f[2])]
    check(not jbad, f"the JS port agrees on {len(cmp)} of them ({len(FEATURES) - len(cmp)} known differences skipped)"
          + "".join(f"\n  {t!r}: JS {j!r}, want {w!r}" for t, j, w in jbad[:40]))
    stale = [f[0] for f, j in zip(FEATURES, js) if f[3] is not None and j == (True, f[2])]
    check(not stale, "every documented JS difference is still a difference" + "".join(f"\n  {t!r}" for t in stale))


# ------------------------------------------------------------------ 3. errors
DEEP = "{{ " + "(" * 300 + "1" + ")" * 300 + " }}"
ERRORS = [  # (template, context, substring of the message)
    ("{% if x %}a", {}, "line 1: unexpected end of template: expected 'endif'"),
    ("a\n{% for x in y %}", {}, "line 2: unexpected end of template: expected 'endfor'"),
    ("{{ x ", {}, "unclosed '{{'"),
    ("{% if %}", {}, "expected an expression"),
    ("{{ 1 + }}", {}, "expected an expression"),
    ("x\n\n{{ x|nofilter }}", {}, "line 3: no filter named 'nofilter'"),
    ("{{ x is nottest }}", {}, "no test named 'nottest'"),
    ("{% foo %}", {}, "unknown tag 'foo'"),
    ("{% endif %}", {}, "unknown tag 'endif'"),
    ("{% break %}", {}, "'break' outside a loop"),
    ("{# never closed", {}, "unclosed comment"),
    ("{{ 'abc }}", {}, "unterminated string"),
    ("{{ (1 }}", {}, "unexpected '}'"),
    ("{{ raise_exception('Bad role!') }}", {}, "Bad role!"),
    ("{{ x.y }}", {}, "'x' is undefined"),
    ("{{ d.a.b }}", {"d": {}}, "'dict object' has no attribute 'a'"),
    ("{{ x + 1 }}", {}, "'x' is undefined"),
    ("{{ foo() }}", {}, "'foo' is undefined"),
    ("{{ 1 < 'a' }}", {}, "'<' not supported between instances of 'int' and 'str'"),
    ("{{ 'a' + 1 }}", {}, "unsupported operand type(s) for +: 'str' and 'int'"),
    ("{{ 1 / 0 }}", {}, "division by zero"),
    ("{{ [].append(1) }}", {}, "unsafe"),
    # deliberately unsupported: transformers enables no `do` extension; call blocks and recursive loops
    ("{% do x %}", {}, "'do' tags are not supported"),
    ("{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}", {}, "'call' tags are not supported"),
    ("{% for x in [1] recursive %}{% endfor %}", {}, "recursive loops are not supported"),
    ("{% set d = {} %}{% set d.a = 1 %}", {}, "non-namespace"),
    ("{{ range(1000000)|length }}", {}, "Range too big"),
    ("{% set a, b = [1, 2, 3] %}", {}, "too many values to unpack"),
    ("{{ 9223372036854775807 + 1 }}", {}, "integer overflow"),
    (DEEP, {}, "nested too deep"),
    ("{% if true %}" * 300 + "x" + "{% endif %}" * 300, {}, "nested too deep"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, "nested too deep"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {}, "loop iteration limit"),
    ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}", {}, "limit"),
    ("{{ 'x' * 300000000 }}", {}, "longer than 256 MiB"),
    ("{% for i in range(100000) %}{{ s }}{% endfor %}", {"s": "x" * 4000}, "longer than 256 MiB"),
    ("{% set ns = namespace(s='xy') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", {}, "longer than 256 MiB|memory limit|work limit"),
]


def errors(tmp):
    cases = [(t, c, NOW) for t, c, _ in ERRORS]
    t0 = time.time()
    got = render_c(cases, tmp)
    dt = time.time() - t0
    bad = [(t, g, w) for (t, _, w), g in zip(ERRORS, got) if g[0] or not any(x in g[1] for x in w.split("|"))]
    check(not bad, f"{len(ERRORS)} bad templates fail with the expected message"
          + "".join(f"\n  {t[:80]!r}: got {g!r}, want ...{w!r}..." for t, g, w in bad))
    limit = 60 if "san" in os.path.basename(BUILD) else 15   # ASan/UBSan builds run ~10x slower
    check(dt < limit, f"all of them fail within {dt:.1f} s (limits stop hostile templates quickly)")
    raw = render_c([("{{ raise_exception('Exact message, no prefix') }}", {}, NOW)], tmp)
    check(raw == [(False, "Exact message, no prefix")], "raise_exception's message is the error, exactly")
    bad_utf8 = subprocess.run([TOOL, os.devnull, os.devnull], capture_output=True)
    check(bad_utf8.returncode == 1, "tool_jinja exits 1 when rendering fails (empty context file)")


# ------------------------------------------------------------------ 4. random templates
# Typed so that both engines print alike: the JS port prints booleans as true/false and none as
# '', cannot loop over strings and has no trim filter, so booleans are printed through
# `'T' if b else 'F'` and the grammar has no none, string loops or trim.
def gi(rng, d):
    if d > 2 or rng.random() < 0.5:
        return rng.choice([str(rng.randrange(0, 100)), "n", "d.k", "d['k']", "xs[0]", "xs[-1]", "(xs|length)", "(s|length)",
                           "(xs|first)", "(xs|last)", "loop_i"])
    k = rng.randrange(3)
    if k == 0:
        return f"({gi(rng, d + 1)} {rng.choice(['+', '-', '*'])} {gi(rng, d + 1)})"
    if k == 1:
        return f"({gi(rng, d + 1)} if {gb(rng, d + 1)} else {gi(rng, d + 1)})"
    return f"({gl(rng, d + 1)}|length)"


def gs(rng, d):
    if d > 2 or rng.random() < 0.5:
        return rng.choice(["'ab'", "'Hello World'", "s", "' pad '", "'é'", '"x y"', "s[1:]", "s[::-1]", "s[:-2]"])
    k = rng.randrange(5)
    if k == 0:
        return f"({gs(rng, d + 1)} ~ {gs(rng, d + 1)})"
    if k == 1:
        return f"({gs(rng, d + 1)}|{rng.choice(['upper', 'lower'])})"
    if k == 2:
        return f"({gi(rng, d + 1)}|string)"
    if k == 3:
        return f"({gs(rng, d + 1)} if {gb(rng, d + 1)} else {gs(rng, d + 1)})"
    return f"({gl(rng, d + 1)}|join('{rng.choice([',', '', ' - '])}'))"


def gl(rng, d):
    return rng.choice(["xs", "[1, 2, 3]", "[]", "(xs|reverse|list)", "(xs|sort|list)", "xs[1:]", "xs[::-1]",
                       "['a', 'b']", "(s.split(' '))"])


def gb(rng, d):
    if d > 2 or rng.random() < 0.3:
        return rng.choice(["true", "false", "flag", "(n is even)", "(n is odd)", "(zz is defined)", "(s is string)"])
    k = rng.randrange(6)
    if k == 0:
        return f"({gi(rng, d + 1)} {rng.choice(['==', '!=', '<', '<=', '>', '>='])} {gi(rng, d + 1)})"
    if k == 1:
        return f"({gs(rng, d + 1)} {rng.choice(['==', '!=', 'in', 'not in'])} {gs(rng, d + 1)})"
    if k == 2:
        return f"({gb(rng, d + 1)} {rng.choice(['and', 'or'])} {gb(rng, d + 1)})"
    if k == 3:
        return f"(not {gb(rng, d + 1)})"
    if k == 4:
        return rng.choice([gi(rng, d + 1), gs(rng, d + 1), gl(rng, d + 1)])   # truthiness
    return f"({gs(rng, d + 1)}.startswith({gs(rng, d + 1)}))"


def rand_block(rng, depth=0, in_loop=False):
    out = []
    ws = lambda: rng.choice(["", "-"])  # noqa: E731
    nl = lambda: rng.choice(["", "\n", "  ", "\n  ", " \n\t"])  # noqa: E731
    for _ in range(rng.randrange(1, 4)):
        k = rng.randrange(7 if depth < 2 else 4)
        if k == 0:
            out.append(rng.choice(["text", " a b ", "\n", "  x\n", "ü", "\n\n"]))
        elif k == 1:
            out.append(nl() + "{{" + ws() + " " + rng.choice([gi, gs])(rng, 0) + " " + ws() + "}}" + nl())
        elif k == 2:
            out.append(nl() + "{{" + ws() + " 'T' if " + gb(rng, 0) + " else 'F' " + ws() + "}}" + nl())
        elif k == 3:
            out.append(nl() + "{#" + ws() + " note " + ws() + "#}" + nl())
        elif k == 4:
            out.append(nl() + "{%" + ws() + " if " + gb(rng, 0) + " " + ws() + "%}" + nl() + rand_block(rng, depth + 1, in_loop)
                       + (nl() + "{%" + ws() + " elif " + gb(rng, 0) + " " + ws() + "%}" + rand_block(rng, depth + 1, in_loop) if rng.random() < 0.3 else "")
                       + nl() + "{%" + ws() + " else " + ws() + "%}" + nl() + rand_block(rng, depth + 1, in_loop)
                       + nl() + "{%" + ws() + " endif " + ws() + "%}" + nl())
        elif k == 5:
            out.append(nl() + "{%" + ws() + " for v in " + gl(rng, 0) + " " + ws() + "%}" + nl()
                       + "{{ v }}{{ loop.index }}{{ 'L' if loop.last else '' }}{{ loop.revindex0 }}" + rand_block(rng, depth + 1, True)
                       + nl() + "{%" + ws() + " endfor " + ws() + "%}" + nl())
        elif not in_loop:   # (the JS port keeps a loop body's set across iterations; jinja2 does not)
            out.append(nl() + "{%" + ws() + " set n = " + gi(rng, 1) + " " + ws() + "%}" + nl())
    return "".join(out)


def random_templates(tmp):
    rng = random.Random(1234)
    ctx = {"n": 7, "s": "Hi there", "xs": [3, 1, 2], "flag": True, "d": {"k": 5}, "loop_i": 4}
    cases = [(rand_block(rng), ctx, NOW) for _ in range(400)]
    got, js = render_c(cases, tmp), render_js(cases, tmp)
    same = sum(g == j for g, j in zip(got, js))
    bad = [(t, g, j) for (t, _, _), g, j in zip(cases, got, js) if g != j]
    okc = sum(g[0] for g in got)
    check(not bad, f"{len(cases)} random templates ({okc} render, the rest fail in both) equal the JS port's: {same} agree"
          + "".join(f"\n  {t!r}:\n   C {g!r}\n  JS {j!r}" for t, g, j in bad[:5]))


with tempfile.TemporaryDirectory() as tmp:
    real_templates(tmp)
    features(tmp)
    errors(tmp)
    random_templates(tmp)
finish()
