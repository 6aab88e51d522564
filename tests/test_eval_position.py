"""`skiplm eval --by-position`: the mean loss of each range of positions, against PyTorch's
cross-entropy of the same logits (eval --dump-logits) averaged by hand over the same ranges;
CSV and JSON files (atomic, the same figures), the token-weighted mean of the ranges equal to
the overall loss, and bad options refused. Both families, with SLA."""
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


def run(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True, timeout=120)


def main():
    tmp = tempfile.mkdtemp()
    shard = os.path.join(tmp, "val.bin")
    write(shard, periodic(3000, seed=4))
    models = {
        "gpt2 sla": ["--n_layer", "3", "--n_head", "4", "--n_embd", "32", "--n_skip_layer", "1", "--n_skip_head", "2"],
        "llama gqa sla": ["--family", "llama", "--n_layer", "3", "--n_head", "4", "--n_kv_head", "2", "--n_embd", "32",
                          "--bias", "0", "--n_skip_layer", "2", "--n_skip_head", "2"],
    }
    T, N = 24, 5                                        # ranges of 4 or 5 positions: 0-3, 4-8, 9-13, 14-18, 19-23
    for name, opts in models.items():
        w = os.path.join(tmp, name.replace(" ", "_") + ".st")
        r = run("init", w, "--vocab_size", "64", "--block_size", "32", "--seed", "3", *opts)
        if not check(r.returncode == 0, f"{name}: init ({r.stderr.strip()[-200:]})"):
            continue
        csv, js, dump = (os.path.join(tmp, name[:4] + ext) for ext in (".csv", ".json", ".st"))
        r = run("eval", w, shard, "--seq", str(T), "--batch", "3", "--max-batches", "4", "--buckets", str(N),
                "--position-out", csv, "--dump-logits", dump)
        r2 = run("eval", w, shard, "--seq", str(T), "--batch", "3", "--max-batches", "4", "--buckets", str(N), "--position-out", js)
        if not check(r.returncode == 0 and r2.returncode == 0, f"{name}: eval --by-position ({(r.stderr + r2.stderr).strip()[-300:]})"):
            continue
        d, _ = st.load_file(dump)
        logits = torch.tensor(np.asarray(d["logits"]), dtype=torch.float64)
        targets = torch.tensor(np.asarray(d["targets"]), dtype=torch.long)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), targets.reshape(-1), reduction="none").reshape(targets.shape)
        want = []
        for b in range(N):
            p0, p1 = b * T // N, (b + 1) * T // N
            want.append((p0, p1, ce[:, p0:p1].numel(), ce[:, p0:p1].mean().item()))
        rows = [line.split(",") for line in open(csv).read().strip().split("\n")]
        got = [(int(a[1]), int(a[2]), int(a[3]), float(a[4])) for a in rows[1:]]
        check(rows[0] == ["bucket", "pos_start", "pos_end", "tokens", "loss"] and len(got) == N and
              all(g[:3] == w_[:3] and abs(g[3] - w_[3]) <= 2e-5 * max(1, abs(w_[3])) for g, w_ in zip(got, want)),
              f"{name}: the CSV's ranges and losses equal PyTorch's cross-entropy of the dumped logits, averaged by range "
              f"({[round(g[3], 4) for g in got]} vs {[round(w_[3], 4) for w_ in want]})")
        j = json.load(open(js))
        total = float(r.stdout.split()[1])
        mean_of_ranges = sum(b["loss"] * b["tokens"] for b in j["buckets"]) / sum(b["tokens"] for b in j["buckets"])
        check(j["seq"] == T and [(b["start"], b["end"], b["tokens"]) for b in j["buckets"]] == [g[:3] for g in got] and
              all(abs(b["loss"] - g[3]) < 1e-6 for b, g in zip(j["buckets"], got)) and abs(mean_of_ranges - total) < 1e-5 and
              abs(j["loss"] - total) < 1e-6,
              f"{name}: the JSON holds the same ranges, and their token-weighted mean is the overall loss {total}")
        check("loss by position (5 ranges of 24 positions)" in r.stdout and "positions     0-3" in r.stdout,
              f"{name}: the table on stdout")
        check(not [f for f in os.listdir(tmp) if ".tmp." in f], f"{name}: no temp file left (atomic writes)")
    w = os.path.join(tmp, "gpt2_sla.st")
    for args, msg in [(["--by-position", "--buckets", "0"], "--buckets must be >= 1"),
                      (["--by-position", "--buckets", "30", "--seq", "24"], "more than the 24 positions"),
                      (["--position-out", os.path.join(tmp, "no", "such", "dir", "p.csv")], "p.csv")]:
        r = run("eval", w, shard, "--max-batches", "1", "--batch", "2", *args)
        check(r.returncode != 0 and msg in r.stderr, f"refused: {' '.join(args[:4])} ({r.stderr.strip()[-120:]})")
    finish()


if __name__ == "__main__":
    main()
