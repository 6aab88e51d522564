"""Multi-query associative recall (`skiplm prepare --synthetic mqar`) and `skiplm eval --accuracy`:
the generated sequences are what they claim (keys from their range and distinct, values from
theirs, every query asks an earlier key and is followed by its value, the loss mask on exactly
those answers, the filler where the placement puts it, the queried pairs near or far), the
same seed gives the same bytes, bad parameters are refused with the reason; eval --accuracy
equals PyTorch's argmax of the dumped logits on the masked-in targets (per token and per
sequence, also without a mask); a tiny model learns the easiest cell to > 99%."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import SKIPLM, check, finish  # noqa: E402
import st  # noqa: E402
from shards import periodic, write  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
# the easiest cell: 2 pairs, both queried, 8 tokens; the tiny model and budget that learn it
EASY = ["--vocab", "32", "--pairs", "2", "--seq", "8", "--train-sequences", "4000", "--val-sequences", "256"]
TINY = ["--family", "llama", "--rope_theta", "10000", "--n_layer", "2", "--n_head", "4", "--n_embd", "64",
        "--seq", "8", "--batch", "32", "--lr", "1e-3", "--warmup", "50", "--weight-decay", "0", "--seed", "0",
        "--eval-every", "0", "--eval-batches", "8", "--ckpt-every", "0", "--print-every", "1000"]


def run(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True, timeout=300, env=ENV)


def read(path, dtype, header_version):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == 20240520 and h[1] == header_version, (path, h[:3])
    body = np.frombuffer(raw[1024:], dtype=dtype)
    assert body.size == h[2], (path, body.size, h[2])
    return body.astype(np.int64)


def load(d, stream):
    return read(f"{d}/{stream}.bin", "<u2", 1), read(f"{d}/{stream}.mask.bin", "u1", 100)


def sequence_errors(toks, mask, V, P, Q, T, far):
    """what is wrong with a stream of MQAR sequences (an empty list: nothing)"""
    K = (V - 1) // 2
    G = T - 2 * (P + Q)
    errs = []
    if toks.size % T != 1 or toks[-1] != V - 1 or mask[-1] != 0:
        errs.append(f"the stream is not N sequences of {T} closed by one token {V - 1} (mask 0)")
        return errs
    for n in range(toks.size // T):
        s, m = toks[n * T:(n + 1) * T], mask[n * T:(n + 1) * T]
        p0 = 0 if far else G
        q0 = 2 * P + G
        keys, vals = s[p0:p0 + 2 * P:2], s[p0 + 1:p0 + 2 * P:2]
        filler = np.concatenate([s[:p0], s[p0 + 2 * P:q0]])
        qk, qv = s[q0::2], s[q0 + 1::2]
        want_mask = np.zeros(T, dtype=np.int64)
        want_mask[q0 + 1::2] = 1
        pair = {int(k): i for i, k in enumerate(keys)}
        asked = [pair.get(int(k), -1) for k in qk]
        queried = set(range(Q)) if far else set(range(P - Q, P))
        if not (keys.min() >= 1 and keys.max() <= K and len(set(keys.tolist())) == P):
            errs.append(f"sequence {n}: keys {keys} not {P} distinct of 1..{K}")
        if not (vals.min() >= K + 1 and vals.max() <= V - 1 and len(set(vals.tolist())) == P):
            errs.append(f"sequence {n}: values {vals} not {P} distinct of {K + 1}..{V - 1}")
        if filler.size != G or (filler != 0).any():
            errs.append(f"sequence {n}: filler {filler} is not {G} zeros where the placement puts it")
        if len(qk) != Q or -1 in asked or len(set(asked)) != Q or any(qv[j] != vals[a] for j, a in enumerate(asked)):
            errs.append(f"sequence {n}: queries {qk} / answers {qv} do not ask distinct pairs' keys with their values")
        elif set(asked) != queried:
            errs.append(f"sequence {n}: the queried pairs {sorted(asked)} are not the {'first' if far else 'last'} {Q}")
        if (m != want_mask).any():
            errs.append(f"sequence {n}: mask {m} is not 1 on exactly the answers")
        if errs:
            break
    return errs


def check_generator(tmp):
    V, P, Q, T = 40, 5, 3, 30
    for place in ("near", "far"):
        d = f"{tmp}/{place}"
        r = run("prepare", "--synthetic", "mqar", "--out", d, "--vocab", str(V), "--pairs", str(P), "--queries", str(Q),
                "--seq", str(T), "--placement", place, "--train-sequences", "60", "--val-sequences", "9", "--seed", "7")
        if not check(r.returncode == 0, f"{place}: prepare --synthetic mqar ({r.stderr.strip()[-200:]})"):
            continue
        for stream, n in (("train", 60), ("val", 9)):
            toks, mask = load(d, stream)
            errs = sequence_errors(toks, mask, V, P, Q, T, place == "far")
            check(toks.size == n * T + 1 and not errs,
                  f"{place} {stream}: {n} sequences of distinct keys and values, queries of earlier keys followed by "
                  f"their values, the mask on exactly the answers, the filler and queried pairs placed {errs[:1]}")
        meta = json.load(open(f"{d}/meta.json"))
        check(meta["synthetic"] == "mqar" and meta["vocab_size"] == V and meta["seq"] == T and meta["pairs"] == P and
              meta["queries"] == Q and meta["placement"] == place and meta["filler"] == T - 2 * (P + Q) and
              meta["train_masked_tokens"] == 60 * Q and meta["val_tokens"] == 9 * T + 1, f"{place}: meta.json ({meta})")
    # near and far differ only in where the filler and the queried pairs are: the far answers lie further back
    tn, _ = load(f"{tmp}/near", "train")
    tf, _ = load(f"{tmp}/far", "train")
    check(not np.array_equal(tn, tf), "near and far give different sequences")
    # the same seed gives the same bytes, another seed other ones
    again = f"{tmp}/again"
    run("prepare", "--synthetic", "mqar", "--out", again, "--vocab", str(V), "--pairs", str(P), "--queries", str(Q),
        "--seq", str(T), "--placement", "near", "--train-sequences", "60", "--val-sequences", "9", "--seed", "7")
    same = all(open(f"{tmp}/near/{f}", "rb").read() == open(f"{again}/{f}", "rb").read()
               for f in ("train.bin", "train.mask.bin", "val.bin", "val.mask.bin", "meta.json"))
    other = f"{tmp}/other"
    run("prepare", "--synthetic", "mqar", "--out", other, "--vocab", str(V), "--pairs", str(P), "--queries", str(Q),
        "--seq", str(T), "--train-sequences", "60", "--val-sequences", "9", "--seed", "8")
    check(same and open(f"{tmp}/near/train.bin", "rb").read() != open(f"{other}/train.bin", "rb").read(),
          "the same seed gives the same bytes, another seed other sequences")
    # train and val are drawn apart: no val sequence repeats a train one
    tv, _ = load(f"{tmp}/near", "val")
    tr_seqs = {tuple(tn[i * T:(i + 1) * T]) for i in range(60)}
    check(not any(tuple(tv[i * T:(i + 1) * T]) in tr_seqs for i in range(9)), "val sequences are not train sequences")
    # bad parameters
    os.makedirs(f"{tmp}/tok", exist_ok=True)
    open(f"{tmp}/tok/vocab.json", "w").write("{}")
    for args, msg in [(["--vocab", "20", "--pairs", "10"], "--pairs 10 needs 10 distinct keys, but --vocab 20 has 9"),
                      (["--pairs", "8", "--seq", "31"], "--seq 31 is too short for 8 pairs and 8 queries"),
                      (["--pairs", "4", "--queries", "5"], "--queries must be in 1..4"),
                      (["--placement", "middle"], "--placement must be near or far"),
                      (["--vocab", "70000"], "--vocab must be in 3..65536"),
                      (["--train-sequences", "0"], "must be >= 1"),
                      (["--out", f"{tmp}/tok"], "holds a tokenizer (vocab.json)")]:
        r = run("prepare", "--synthetic", "mqar", "--out", f"{tmp}/bad", *args)
        check(r.returncode != 0 and msg in r.stderr and not os.path.exists(f"{tmp}/bad/train.bin"),
              f"refused: {' '.join(args)} ({r.stderr.strip()[-160:]})")
    r = run("prepare", "--synthetic", "recall", "--out", f"{tmp}/bad")
    check(r.returncode != 0 and "unknown task 'recall'" in r.stderr, f"refused: an unknown task ({r.stderr.strip()})")


def torch_accuracy(dump):
    """tokens, right tokens, sequences, right sequences of the dumped logits' argmax on targets >= 0"""
    d, _ = st.load_file(dump)
    logits = torch.tensor(np.asarray(d["logits"]))
    y = torch.tensor(np.asarray(d["targets"]), dtype=torch.long)
    counted = y >= 0
    right = (logits.argmax(-1) == y) & counted
    has = counted.any(1)
    seq_right = has & (right.sum(1) == counted.sum(1))
    return int(counted.sum()), int(right.sum()), int(has.sum()), int(seq_right.sum())


def check_accuracy_and_learning(tmp):
    data = f"{tmp}/easy"
    r = run("prepare", "--synthetic", "mqar", "--out", data, *EASY)
    if not check(r.returncode == 0, f"prepare the easiest cell ({r.stderr.strip()[-200:]})"):
        return
    # a partly trained model (some answers right, some wrong), then the tiny model fully trained
    partial, full = f"{tmp}/partial", f"{tmp}/full"
    r1 = run("train", "--data", data, "--out", partial, "--steps", "150", *TINY)
    r2 = run("train", "--data", data, "--out", full, "--steps", "800", *TINY)
    bad = [x.stderr.strip()[-300:] for x in (r1, r2) if x.returncode != 0]
    if not check(not bad, f"train the tiny model {bad}"):
        return
    for name, run_dir in (("partly trained", partial), ("trained", full)):
        acc, dump = f"{tmp}/{name[0]}.csv", f"{tmp}/{name[0]}.st"
        r = run("eval", f"{run_dir}/ckpt.safetensors", f"{data}/val.bin", "--seq", "8", "--batch", "32",
                "--accuracy-out", acc, "--dump-logits", dump)
        if not check(r.returncode == 0, f"{name}: eval --accuracy-out ({r.stderr.strip()[-200:]})"):
            continue
        rows = [line.split(",") for line in open(acc).read().strip().split("\n")]
        got = dict(zip(rows[0], rows[1]))
        n, k, ns, ks = torch_accuracy(dump)
        check(rows[0] == ["tokens", "tokens_right", "token_accuracy", "sequences", "sequences_right", "sequence_accuracy",
                          "loss"] and (int(got["tokens"]), int(got["tokens_right"]), int(got["sequences"]),
                                       int(got["sequences_right"])) == (n, k, ns, ks) and
              abs(float(got["token_accuracy"]) - k / n) < 1e-6 and abs(float(got["sequence_accuracy"]) - ks / ns) < 1e-6 and
              n == 2 * 256 and ns == 256,
              f"{name}: the CSV equals PyTorch's argmax on the masked-in targets of the dumped logits "
              f"(tokens {got['tokens_right']}/{got['tokens']}, sequences {got['sequences_right']}/{got['sequences']}; "
              f"torch {k}/{n}, {ks}/{ns})")
        if name == "partly trained":
            check(0 < k < n and ks < ns, f"{name}: some answers right and some wrong ({k}/{n}), so the comparison counts both")
            js = f"{tmp}/p.json"
            r = run("eval", f"{run_dir}/ckpt.safetensors", f"{data}/val.bin", "--seq", "8", "--batch", "32", "--accuracy-out", js)
            j = json.load(open(js)) if r.returncode == 0 else {}
            check(j.get("tokens_right") == k and j.get("sequences_right") == ks and
                  f"accuracy: tokens {k} of {n} ({k / n:.4f}), sequences {ks} of {ns}" in r.stdout,
                  f"{name}: the JSON and the stdout line hold the same figures ({j})")
        else:
            check(k / n > 0.99 and ks / ns > 0.99, f"the tiny model learns the easiest cell to > 99% (tokens {k}/{n}, "
                  f"sequences {ks}/{ns})")
    # without a loss mask every target counts: the argmax of all of them
    plain = f"{tmp}/plain.bin"
    write(plain, periodic(8 * 8 * 4 + 1, seed=3) % 32)
    dump = f"{tmp}/plain.st"
    r = run("eval", f"{partial}/ckpt.safetensors", plain, "--seq", "8", "--batch", "8", "--accuracy", "--dump-logits", dump)
    n, k, ns, ks = torch_accuracy(dump) if r.returncode == 0 else (0, 0, 0, 0)
    check(r.returncode == 0 and n == 4 * 8 * 8 and ns == 32 and
          f"accuracy: tokens {k} of {n} ({k / n:.4f}), sequences {ks} of {ns}" in r.stdout,
          f"without a mask every target counts ({r.stdout.strip()[-120:]}; torch {k}/{n}, {ks}/{ns})")


def main():
    tmp = tempfile.mkdtemp()
    check_generator(tmp)
    check_accuracy_and_learning(tmp)
    finish()


if __name__ == "__main__":
    main()
