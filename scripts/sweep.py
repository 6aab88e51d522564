#!/usr/bin/env python3
"""Ablation sweeps of Skip-Layer Attention with the skiplm CLI (standard library only).

Every variant of a grid is trained with the same seeds; a given seed gives every variant
the same initial weights (SLA adds no parameters, and the init draws tensors in a fixed
order) and the same data order (the loader is seeded by the run seed). The results table
compares each variant with the baseline seed by seed (paired differences), which is the
right measure of seed-to-seed noise for an ablation.

    python3 scripts/sweep.py --grid layers --data data/sotu-char --out runs/sweep-layers
    python3 scripts/sweep.py --grid beyond --only nl9-nh6 --seq 128,512 --batch 8,2 ...   # + lengths
    python3 scripts/sweep.py --grid quick --data DIR --out DIR          # tiny, for CI
    python3 scripts/sweep.py --grid mqar --out runs/mqar --pairs 8,16,32 --widths 64,128 --jobs 4

Writes OUT/results-GRID.csv, OUT/results-GRID.md and OUT/curves-GRID.svg (seed 0 of every
variant), OUT/runs-GRID.csv (one row per run: variant, seed, steps, T, val_loss, kv_cache_bytes,
the bench figures and the variant's options), OUT/curves-GRID.csv (every run's validation
curve), and the validation loss by position of every run (`skiplm eval --by-position` on the
validation shards, OUT/<variant>/s<seed>/positions.csv) gathered in OUT/positions-GRID.csv and
drawn, averaged over seeds, in OUT/positions-GRID.svg. Runs that already finished (OUT/<variant>/s<seed>/ckpt.safetensors with the final
step) are reused, so an interrupted sweep continues where it stopped, and grids that share
variants (the baseline, nl9-nh6) run them once when given the same OUT and settings.
With --tag TAG the files are named GRID-TAG. With several --seq lengths, each length is a
grid in OUT/T<seq>/ and OUT/results-GRID-seq.md/.csv puts the lengths side by side.
--jobs N trains N runs at once (each run's result depends on its own options and --threads,
not on --jobs).

The `mqar` grid (scripts/sweep_mqar.py) is another kind of sweep: multi-query associative
recall, scored by accuracy rather than loss, over pairs x widths x placements x learning rates
x seeds; it generates its own data (no --data) and writes OUT/runs-mqar.csv and
OUT/results-mqar.md.
"""
import argparse
import concurrent.futures
import csv
import functools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

import sweep_mqar   # scripts/sweep_mqar.py, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# model shape shared by the paper-style grids: 12 layers and 12 heads so the paper's head
# and layer counts carry over; narrow enough to train on 2 CPU cores.
PAPER_MODEL = ["--n_layer", "12", "--n_head", "12", "--n_embd", "192"]

GRIDS = {
    # the paper's Table 1: number of skip layers at n_skip_head = 6
    "layers": [("baseline", [])] + [(f"nl{nl}-nh6", ["--n_skip_layer", str(nl), "--n_skip_head", "6"])
                                    for nl in (1, 3, 6, 9, 11)],
    # the paper's Table 2: number of skip heads at n_skip_layer = 9
    "heads": [("baseline", [])] + [(f"nl9-nh{nh}", ["--n_skip_layer", "9", "--n_skip_head", str(nh)])
                                   for nh in (3, 6, 9, 12)],
    # beyond the paper: cross-layer attention, and multi-source skips
    "beyond": [
        ("baseline", []),
        ("nl9-nh6", ["--n_skip_layer", "9", "--n_skip_head", "6"]),
        ("cla-odd", ["--routing", "1,3,5,7,9,11:*=-1"]),
        ("multi-3+9", ["--routing", "3-11:6-8=-3;9-11:9-11=-9"]),
        ("multi-far", ["--routing", "6-11:6-11=@0"]),
    ],
    # SLA against the simpler ways of saving the same KV cache, on KV_MODEL (4 layers x 4 heads,
    # so 16 layer-heads of K/V). Cache sizes, as fractions of the baseline's: the paper's 3/4 rule
    # (--sla: n_skip_layer 3, n_skip_head 3) keeps 13/16 (layer 3's skip heads are read by
    # nobody); cla-l3-h1-3 shares the same 3 heads of layer 3 with the layer below instead: 13/16.
    # At 8/16 (about half of that): SLA with every head of layers 2-3 skipping 2 layers, GQA with
    # 2 KV heads, and cross-layer attention on the odd layers. Then the paper's other settings
    # (n_skip_layer 1 and 2, n_skip_head 2 and 4), multi-far, one-layer CLA and MQA.
    "kv": [
        ("baseline", []),
        ("sla-nl3-nh3", ["--n_skip_layer", "3", "--n_skip_head", "3"]),
        ("cla-l3-h1-3", ["--routing", "3:1-3=-1"]),
        ("sla-nl2-nh4", ["--n_skip_layer", "2", "--n_skip_head", "4"]),
        ("gqa-kv2", ["--n_kv_head", "2"]),
        ("cla-odd", ["--routing", "1,3:*=-1"]),
        ("sla-nl1-nh3", ["--n_skip_layer", "1", "--n_skip_head", "3"]),
        ("sla-nl2-nh3", ["--n_skip_layer", "2", "--n_skip_head", "3"]),
        ("sla-nl3-nh2", ["--n_skip_layer", "3", "--n_skip_head", "2"]),
        ("sla-nl3-nh4", ["--n_skip_layer", "3", "--n_skip_head", "4"]),
        ("multi-far", ["--routing", "2-3:2-3=@0"]),
        ("cla-l3", ["--routing", "3:*=-1"]),
        ("gqa-kv1", ["--n_kv_head", "1"]),
    ],
    # CI: a tiny model, a few steps
    "quick": [("baseline", []), ("nl1-nh2", ["--n_skip_layer", "1", "--n_skip_head", "2"]),
              ("multi", ["--routing", "2:1=-2;2:3=-1"])],
}
# multi-query associative recall (scripts/sweep_mqar.py) with the `kv` grid's variants
GRIDS["mqar"] = GRIDS["kv"]
QUICK_MODEL = ["--n_layer", "3", "--n_head", "4", "--n_embd", "32"]
# the `kv` grid's shape: the quickstart's without SLA (Llama family with RoPE), the shape whose
# budget leaves the plateau (docs/experiments.md, "A budget that leaves the plateau")
KV_MODEL = ["--family", "llama", "--rope_theta", "10000", "--n_layer", "4", "--n_head", "4", "--n_embd", "256"]


def read_log(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def flagged(dm, dsd, seeds):
    """a mean paired difference above twice its standard error over seeds"""
    return seeds > 1 and abs(dm) > 2 * dsd / math.sqrt(seeds)


def mean_std(xs):
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def name(args):
    """File stem of a grid's outputs: GRID, or GRID-TAG with --tag (so that sweeps of one grid
    with different --only sets can share a folder, and its runs, without overwriting tables)."""
    return f"{args.grid}-{args.tag}" if args.tag else args.grid


def model_args(args):
    if args.model:
        return args.model.split()
    return {"quick": QUICK_MODEL, "kv": KV_MODEL}.get(args.grid, PAPER_MODEL)


def run_one(skiplm, args, variant, extra, seed, outdir):
    done = os.path.join(outdir, "ckpt.safetensors")
    log = os.path.join(outdir, "log.jsonl")
    if os.path.exists(done) and os.path.exists(log):
        rows = read_log(log)
        if rows and rows[-1].get("step") == args.steps and "val_loss" in rows[-1]:
            print(f"  {variant} seed {seed}: done before, reused", flush=True)
            return rows
    cmd = [skiplm, "train", "--data", args.data, "--out", outdir, "--overwrite", "--seed", str(seed),
           "--steps", str(args.steps), "--batch", str(args.batch), "--seq", str(args.seq),
           "--block_size", str(args.seq), "--lr", str(args.lr), "--min-lr", str(args.lr / 10),
           "--warmup", str(args.warmup), "--eval-every", str(args.eval_every),
           "--eval-batches", str(args.eval_batches), "--ckpt-every", "0", "--print-every", str(max(1, args.steps // 5))]
    cmd += model_args(args)
    cmd += extra
    cmd += args.train_opts.split()
    print(f"  {variant} seed {seed}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env(args))
    if r.returncode != 0:
        sys.exit(f"sweep: run {variant} seed {seed} failed:\n{r.stdout}")
    print(f"    {variant} seed {seed}: {time.time() - t0:.0f} s", flush=True)
    return read_log(log)


def run_env(args):
    """the environment of every run: OMP_NUM_THREADS=--threads where given"""
    env = dict(os.environ)
    if args.threads > 0:
        env["OMP_NUM_THREADS"] = str(args.threads)
    return env


def val_shards(data):
    """the validation shards of a prepared folder: val.bin, else its val_NNNNNN.bin shards"""
    one = os.path.join(data, "val.bin")
    if os.path.exists(one):
        return [one]
    many = sorted(os.path.join(data, f) for f in os.listdir(data) if re.fullmatch(r".*val_\d{6}\.bin", f))
    if not many:
        sys.exit(f"sweep: no validation shards in {data}")
    return many


def positions(skiplm, args, outdir):
    """the run's validation loss by position: [(start, end, tokens, loss)], from
    OUTDIR/positions.csv (made by `skiplm eval --by-position` once, then reused)"""
    path = os.path.join(outdir, "positions.csv")
    if not os.path.exists(path):
        cmd = [skiplm, "eval", os.path.join(outdir, "ckpt.safetensors"), *val_shards(args.data), "--seq", str(args.seq),
               "--batch", str(args.batch), "--max-batches", str(args.eval_batches), "--buckets", str(min(args.buckets, args.seq)),
               "--position-out", path]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env(args))
        if r.returncode != 0:
            sys.exit(f"sweep: {' '.join(cmd)} failed:\n{r.stdout}")
    with open(path) as f:
        return [(int(r["pos_start"]), int(r["pos_end"]), int(r["tokens"]), float(r["loss"])) for r in csv.DictReader(f)]


def positions_svg(path, title, curves):
    """curves: {name: [(position midpoint, loss)]}, drawn as lines on shared axes (hand-written SVG)"""
    W, H, L, R, TP, B = 720, 420, 70, 170, 40, 50
    xs = [x for c in curves.values() for x, _ in c]
    ys = [y for c in curves.values() for _, y in c if y == y]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1e-3
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad
    sx = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    sy = lambda y: TP + (y1 - y) / (y1 - y0) * (H - TP - B)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{TP}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">position in the sequence</text>',
           f'<text x="16" y="{(TP + H - B) / 2}" transform="rotate(-90 16 {(TP + H - B) / 2})" text-anchor="middle">validation loss</text>']
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<line x1="{L - 4}" y1="{sy(y):.1f}" x2="{W - R}" y2="{sy(y):.1f}" stroke="#ddd"/>'
                   f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3f}</text>')
        x = x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{sx(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x:.0f}</text>')
    for k, (name, pts) in enumerate(curves.items()):
        c = colors[k % len(colors)]
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts if y == y)
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="1.8"/>')
        out.append(f'<line x1="{W - R + 12}" y1="{TP + 10 + 18 * k}" x2="{W - R + 32}" y2="{TP + 10 + 18 * k}" stroke="{c}" stroke-width="2"/>'
                   f'<text x="{W - R + 36}" y="{TP + 14 + 18 * k}">{name}</text>')
    out.append("</svg>")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)


BENCH_RE = re.compile(r"^train: B=\d+ T=\d+: ([0-9.]+) ms/step")
GEN_RE = re.compile(r"^generate: \d+ tokens x \d+ sequences?, ([0-9.]+) tok/s")
KV_RE = re.compile(r"^KV cache at T=\d+: (\d+) bytes")


@functools.lru_cache(maxsize=None)
def data_vocab(data):
    with open(os.path.join(data, "meta.json")) as f:
        return json.load(f)["vocab_size"]


def kv_bytes(skiplm, args, extra):
    """bytes of the fp32 KV cache of one sequence of args.seq positions, as the decoder
    allocates it (`skiplm info`: only the K/V heads some layer reads)"""
    cmd = [skiplm, "info", *model_args(args), *extra, "--block_size", str(args.seq), "--vocab_size", str(data_vocab(args.data))]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    got = [int(m.group(1)) for m in map(KV_RE.match, r.stdout.splitlines()) if m]
    if r.returncode != 0 or not got:
        sys.exit(f"sweep: {' '.join(cmd)} failed:\n{r.stdout}")
    return got[0]


def bench_speed(skiplm, args, variants):
    """Training step time and decoding speed of every variant from `skiplm bench`, taken
    round-robin (variant after variant, args.bench_rounds times) so that a slow window of a
    shared machine hits all variants alike; returns {variant: (median ms per training step,
    median decoding tokens/s)}. Decoding generates args.seq - 1 tokens of one sequence, so the
    attention reads a cache that grows to the full window. Training-log step times are taken
    hours apart and are not comparable."""
    times = {v: [] for v, _ in variants}
    toks = {v: [] for v, _ in variants}
    for rnd in range(args.bench_rounds):
        for variant, extra in variants:
            cmd = [skiplm, "bench", "--steps", "3", "--warmup", "1", "--batch", str(args.batch),
                   "--seq", str(args.seq), "--block_size", str(args.seq), "--vocab_size", str(data_vocab(args.data)),
                   "--gen", str(args.seq - 1), *model_args(args), *extra, *args.bench_opts.split()]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            ms = [float(m.group(1)) for m in map(BENCH_RE.match, r.stdout.splitlines()) if m]
            ts = [float(m.group(1)) for m in map(GEN_RE.match, r.stdout.splitlines()) if m]
            if r.returncode != 0 or not ms or not ts:
                sys.exit(f"sweep: bench of {variant} failed:\n{r.stdout}")
            times[variant].append(ms[0])
            toks[variant].append(ts[0])
        print(f"  bench round {rnd + 1}/{args.bench_rounds}: " +
              ", ".join(f"{v} {times[v][-1]:.0f} ms, {toks[v][-1]:.0f} tok/s" for v, _ in variants), flush=True)
    return {v: (statistics.median(times[v]), statistics.median(toks[v])) for v, _ in variants}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=sorted(GRIDS), required=True)
    ap.add_argument("--data", help="prepared data folder (skiplm prepare); not for --grid mqar, which makes its own")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, help="optimizer steps (300; mqar: 2000)")
    ap.add_argument("--batch", help="sequences per step; with several --seq lengths, "
                    "one value or one per length (e.g. 8,2,1 keeps the tokens per step) (8; mqar: 32)")
    ap.add_argument("--seq", help="sequence length, or a comma-separated list: one grid "
                    "per length in OUT/T<seq>/ and a table across lengths, OUT/results-GRID-seq.md (256; mqar: "
                    "one length, the sequences' own)")
    ap.add_argument("--lr", default="1e-3", help="peak learning rate; for --grid mqar a comma-separated list, "
                    "a learning-rate axis of the grid (1e-3)")
    ap.add_argument("--warmup", type=int, help="warmup steps (30; mqar: 100)")
    ap.add_argument("--eval-every", type=int, help="validation loss every N steps (100; mqar: 500)")
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--buckets", type=int, default=16, help="ranges of positions of the loss by position (16)")
    ap.add_argument("--model", default="", help="model options replacing the 12L/12H/192 default, e.g. '--n_layer 12 --n_head 12 --n_embd 256'")
    ap.add_argument("--only", default="", help="comma-separated variants to run (default: the whole grid)")
    ap.add_argument("--tag", default="", help="name the outputs results-GRID-TAG.* (e.g. for an --only subset)")
    ap.add_argument("--skiplm", default=os.path.join(ROOT, "build", "skiplm"))
    ap.add_argument("--train-opts", default="", help="more options for every `skiplm train`, e.g. '--device cuda'")
    ap.add_argument("--bench-opts", default="", help="more options for every `skiplm bench`, e.g. '--device cuda'")
    ap.add_argument("--eval-opts", default="", help="more options for every `skiplm eval` of --grid mqar's accuracy, e.g. "
                    "'--device cuda'")
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once (1); the results do not depend on it")
    ap.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS of every run (0: the environment's); "
                    "with --jobs N on the CPU, cores / N")
    mq = ap.add_argument_group("--grid mqar (multi-query associative recall; docs/experiments.md)")
    mq.add_argument("--pairs", default="8,16,32,48", help="numbers of key-value pairs, comma-separated (8,16,32,48)")
    mq.add_argument("--widths", default="64,128", help="model widths (--n_embd), comma-separated (64,128)")
    mq.add_argument("--placements", default="near,far", help="near, far or both (near,far)")
    mq.add_argument("--queries", type=int, default=0, help="queries a sequence (0: as many as pairs)")
    mq.add_argument("--vocab", type=int, default=256, help="vocabulary of the sequences (256)")
    mq.add_argument("--train-sequences", type=int, default=20000, help="training sequences of each cell (20000)")
    mq.add_argument("--val-sequences", type=int, default=1000, help="validation sequences, the accuracy's (1000)")
    mq.add_argument("--data-seed", type=int, default=0, help="seed of the generated sequences (0)")
    ap.add_argument("--bench-rounds", type=int, default=0,
                    help="measure the speed column with this many round-robin rounds of `skiplm bench` "
                         "per variant (recommended: 3) instead of the training logs' step times")
    args = ap.parse_args()
    mqar = args.grid == "mqar"
    defaults = dict(steps=2000, batch="32", seq="256", warmup=100, eval_every=500) if mqar else \
        dict(steps=300, batch="8", seq="256", warmup=30, eval_every=100)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    try:
        args.lrs = [float(x) for x in args.lr.split(",")]
    except ValueError:
        sys.exit(f"sweep: --lr must be a number or comma-separated numbers (got {args.lr!r})")
    if args.jobs < 1 or args.threads < 0:
        sys.exit("sweep: --jobs must be >= 1 and --threads >= 0")
    if mqar == bool(args.data):
        sys.exit("sweep: --grid mqar makes its own data: give no --data" if mqar else "sweep: give --data (a prepared folder)")
    if not mqar:
        if len(args.lrs) > 1:
            sys.exit("sweep: several --lr values are for --grid mqar")
        args.lr = args.lrs[0]
    if args.grid == "quick":       # tiny: a few steps, short sequences unless given
        args.steps, args.eval_every, args.eval_batches = min(args.steps, 6), 3, 2
        if args.seq == "256":
            args.seq, args.batch = "16", "2"
    seqs = [int(x) for x in str(args.seq).split(",")]
    batches = [int(x) for x in str(args.batch).split(",")]
    if len(batches) == 1:
        batches *= len(seqs)
    if len(batches) != len(seqs):
        sys.exit("sweep: give one --batch, or one per --seq length")
    variants = GRIDS[args.grid]
    if args.only:
        keep = args.only.split(",")
        unknown = [v for v in keep if v not in dict(variants)]
        if unknown:
            sys.exit(f"sweep: unknown variants {unknown} in grid {args.grid}: {[v for v, _ in variants]}")
        if "baseline" not in keep:
            keep.insert(0, "baseline")
        variants = [(v, e) for v, e in variants if v in keep]
    if mqar:
        if len(seqs) != 1 or len(batches) != 1:
            sys.exit("sweep: --grid mqar takes one --seq and one --batch")
        args.seq, args.batch, args.name = seqs[0], batches[0], name(args)
        sweep_mqar.run_mqar(args, variants)
        return
    if len(seqs) == 1:
        args.seq, args.batch = seqs[0], batches[0]
        run_grid(args, variants)
        return
    # several lengths: one grid per length in OUT/T<seq>/, then a table across lengths
    out, rows = args.out, {}
    for seq, batch in zip(seqs, batches):
        sub = argparse.Namespace(**vars(args))
        sub.seq, sub.batch, sub.out = seq, batch, os.path.join(out, f"T{seq}")
        rows[seq] = run_grid(sub, variants)
    write_seq_table(args, out, variants, seqs, batches, rows)


def run_grid(args, variants):
    """Train every variant x seed at one length (args.seq, args.batch), write the grid's
    table, CSV and curves into args.out; returns {variant: summary dict}."""
    os.makedirs(args.out, exist_ok=True)
    results = {}
    # seed after seed, so that a sweep stopped early still has every variant paired with the baseline
    # (with --jobs, --jobs runs at a time in that order)
    def train(task):
        variant, extra, seed = task
        outdir = os.path.join(args.out, variant, f"s{seed}")
        return run_one(args.skiplm, args, variant, extra, seed, outdir), positions(args.skiplm, args, outdir)
    tasks = [(variant, extra, seed) for seed in range(args.seeds) for variant, extra in variants]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for (variant, _, seed), (rows, pos) in zip(tasks, pool.map(train, tasks)):
            log = [(r["step"], r["loss"], r["val_loss"]) for r in rows if "val_loss" in r]
            ms = [r["ms"] for r in rows[1:]] or [rows[0]["ms"]]       # the first step warms up
            results[(variant, seed)] = dict(log=log, val=log[-1][2], ms=statistics.median(ms), train=rows[-1]["loss"], pos=pos)

    decode = {}
    if args.bench_rounds > 0:
        speed = bench_speed(args.skiplm, args, variants)
        for (variant, seed), res in results.items():
            res["ms"] = speed[variant][0]
        decode = {v: speed[v][1] for v, _ in variants}
        speed_src = (f"`skiplm bench`, median of {args.bench_rounds} round-robin rounds; decode: tokens/s of one "
                     f"sequence generating {args.seq - 1} tokens")
    else:
        speed_src = "median training step of the runs' logs (runs made at different times; see --bench-rounds)"
    kv = {v: kv_bytes(args.skiplm, args, extra) for v, extra in variants}
    base = "baseline"
    # one row per run: what the tables are computed from
    with open(os.path.join(args.out, f"runs-{name(args)}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "steps", "T", "batch", "val_loss", "train_loss", "kv_cache_bytes",
                    "ms_per_step", "decode_tok_s", "options"])
        for seed in range(args.seeds):
            for variant, extra in variants:
                res = results[(variant, seed)]
                w.writerow([variant, seed, args.steps, args.seq, args.batch, f"{res['val']:.6f}", f"{res['train']:.6f}",
                            kv[variant], f"{res['ms']:.1f}", f"{decode[variant]:.1f}" if decode else "", " ".join(extra)])
    # every run's validation curve (the steps with a validation)
    with open(os.path.join(args.out, f"curves-{name(args)}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "T", "step", "train_loss", "val_loss"])
        for seed in range(args.seeds):
            for variant, _ in variants:
                for step, loss, val in results[(variant, seed)]["log"]:
                    w.writerow([variant, seed, args.seq, step, f"{loss:.6f}", f"{val:.6f}"])
    lines_csv, summary = [], {}
    md = [f"Grid `{args.grid}`: {args.seeds} seeds, {args.steps} steps of {args.batch}x{args.seq} tokens, "
          f"data `{args.data}`; model `{' '.join(model_args(args))}`.",
          "",
          "| variant | final val loss (mean ± std) | Δ vs baseline (paired, mean ± std) | Δ > 2σ? | KV cache at T | "
          "ms/step | step time vs baseline |" + (" decode tok/s |" if decode else ""),
          "|---|---|---|---|---|---|---|" + ("---|" if decode else "")]
    bms = statistics.fmean([results[(base, s)]["ms"] for s in range(args.seeds)])
    for variant, _ in variants:
        vals = [results[(variant, s)]["val"] for s in range(args.seeds)]
        deltas = [results[(variant, s)]["val"] - results[(base, s)]["val"] for s in range(args.seeds)]
        m, sd = mean_std(vals)
        dm, dsd = mean_std(deltas)
        vms = statistics.fmean([results[(variant, s)]["ms"] for s in range(args.seeds)])
        speed = (vms / bms - 1.0) * 100.0
        sig = "—" if variant == base else ("yes" if flagged(dm, dsd, args.seeds) else "no")
        summary[variant] = dict(m=m, sd=sd, dm=dm, dsd=dsd, sig=sig, ms=vms, speed=speed, kv=kv[variant])
        kvc = f"{kv[variant] / 1048576:.2f} MiB ({100 * kv[variant] / kv[base]:.1f}%)"
        md.append(f"| {variant} | {m:.4f} ± {sd:.4f} | {dm:+.4f} ± {dsd:.4f} | {sig} | {kvc} | {vms:.0f} | {speed:+.1f}% |"
                  + (f" {decode[variant]:.0f} |" if decode else ""))
        lines_csv.append(dict(variant=variant, seeds=args.seeds, T=args.seq, steps=args.steps, val_mean=f"{m:.6f}",
                              val_std=f"{sd:.6f}", delta_mean=f"{dm:.6f}", delta_std=f"{dsd:.6f}", significant=sig,
                              kv_cache_bytes=kv[variant], ms_per_step=f"{vms:.1f}",
                              speed_change_pct=f"{speed:.2f}", decode_tok_s=f"{decode[variant]:.1f}" if decode else "",
                              per_seed=" ".join(f"{v:.6f}" for v in vals)))
    md += ["", "Δ > 2σ: the mean paired difference exceeds twice its standard error over seeds.",
           f"ms/step: {speed_src}.", ""]
    md += position_table(args, variants, results)
    with open(os.path.join(args.out, f"results-{name(args)}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(lines_csv[0]))
        w.writeheader()
        w.writerows(lines_csv)
    with open(os.path.join(args.out, f"results-{name(args)}.md"), "w") as f:
        f.write("\n".join(md))
    runs = [f"{v}=" + os.path.join(args.out, v, "s0") for v, _ in variants]
    subprocess.run([args.skiplm, "plot", *runs, "-o", os.path.join(args.out, f"curves-{name(args)}.svg"),
                    "--title", f"skiplm sweep: {args.grid}, T={args.seq}"], check=True, stdout=subprocess.DEVNULL)
    # the loss by position: every run's ranges in one CSV, their mean over seeds drawn
    with open(os.path.join(args.out, f"positions-{name(args)}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "seq", "bucket", "pos_start", "pos_end", "tokens", "loss"])
        for (variant, seed), res in sorted(results.items()):
            for b, (p0, p1, n, loss) in enumerate(res["pos"]):
                w.writerow([variant, seed, args.seq, b, p0, p1, n, f"{loss:.6f}"])
    curves = {}
    for variant, _ in variants:
        ranges = results[(variant, 0)]["pos"]
        curves[variant] = [((p0 + p1 - 1) / 2, statistics.fmean(results[(variant, s)]["pos"][b][3] for s in range(args.seeds)))
                           for b, (p0, p1, _, _) in enumerate(ranges)]
    positions_svg(os.path.join(args.out, f"positions-{name(args)}.svg"),
                  f"validation loss by position: {args.grid}, T={args.seq}, mean of {args.seeds} seeds", curves)
    print("\n".join(md))
    print(f"sweep: wrote {args.out}/results-{name(args)}.md, .csv, runs-{name(args)}.csv, curves-{name(args)}.svg and positions-{name(args)}.csv/.svg")
    return summary


def position_table(args, variants, results, parts=4):
    """Where in the window a variant differs from the baseline: the paired difference of the
    loss over each quarter of the positions (token-weighted means of the position buckets),
    as markdown lines. A model that uses long context gains over the later quarters."""
    nb = len(results[("baseline", 0)]["pos"])
    if nb < parts:
        return []
    groups = [[b for b in range(nb) if b * parts // nb == q] for q in range(parts)]
    def part_loss(pos, q):
        sel = [pos[b] for b in groups[q]]
        return sum(n * loss for _, _, n, loss in sel) / sum(n for _, _, n, _ in sel)
    pos0 = results[("baseline", 0)]["pos"]
    ranges = [f"{pos0[g[0]][0]}-{pos0[g[-1]][1] - 1}" for g in groups]
    md = [f"Paired Δ vs baseline by position (mean ± std over seeds; * marks |Δ| > 2 standard errors). "
          f"The last column is the paired Δ of each run's own gain from the first quarter to the last "
          f"(loss over {ranges[-1]} minus loss over {ranges[0]}): negative means the variant gains more "
          f"from context than the baseline; it does not move with a run's overall level.", "",
          "| variant | " + " | ".join(f"positions {r}" for r in ranges) + " | last − first quarter |",
          "|---|" + "---|" * (parts + 1)]
    def cell(variant, f):
        d = [f(variant, s) - f("baseline", s) for s in range(args.seeds)]
        dm, dsd = mean_std(d)
        flag = "*" if variant != "baseline" and flagged(dm, dsd, args.seeds) else ""
        return f"{dm:+.4f} ± {dsd:.4f}{flag}"
    for variant, _ in variants:
        cells = [cell(variant, lambda v, s, q=q: part_loss(results[(v, s)]["pos"], q)) for q in range(parts)]
        cells.append(cell(variant, lambda v, s: part_loss(results[(v, s)]["pos"], parts - 1) - part_loss(results[(v, s)]["pos"], 0)))
        md.append(f"| {variant} | " + " | ".join(cells) + " |")
    return md + [""]


def write_seq_table(args, out, variants, seqs, batches, rows):
    """The paper's third table: every variant's paired difference from the baseline at each
    length, side by side (OUT/results-GRID-seq.md and .csv)."""
    head = "| variant | " + " | ".join(f"T={t}: val loss | T={t}: Δ vs baseline" for t in seqs) + " |"
    md = [f"Grid `{args.grid}` at {len(seqs)} sequence lengths: {args.seeds} seeds, {args.steps} steps of "
          + ", ".join(f"{b}x{t}" for t, b in zip(seqs, batches)) + f" tokens; data `{args.data}`; model "
          f"`{' '.join(model_args(args))}`. Δ: paired mean ± std over seeds; * marks |Δ| > 2 standard errors.",
          "", head, "|---|" + "---|---|" * len(seqs)]
    lines_csv = []
    for variant, _ in variants:
        cells = []
        for t in seqs:
            r = rows[t][variant]
            flag = "*" if r["sig"] == "yes" else ""
            cells.append(f"{r['m']:.4f} ± {r['sd']:.4f} | {r['dm']:+.4f} ± {r['dsd']:.4f}{flag}")
            lines_csv.append(dict(variant=variant, seq=t, seeds=args.seeds, val_mean=f"{r['m']:.6f}",
                                  val_std=f"{r['sd']:.6f}", delta_mean=f"{r['dm']:.6f}",
                                  delta_std=f"{r['dsd']:.6f}", significant=r["sig"], kv_cache_bytes=r["kv"],
                                  ms_per_step=f"{r['ms']:.1f}"))
        md.append(f"| {variant} | " + " | ".join(cells) + " |")
    md.append("")
    with open(os.path.join(out, f"results-{name(args)}-seq.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(lines_csv[0]))
        w.writeheader()
        w.writerows(lines_csv)
    with open(os.path.join(out, f"results-{name(args)}-seq.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
    print(f"sweep: wrote {out}/results-{name(args)}-seq.md and .csv")


if __name__ == "__main__":
    main()
