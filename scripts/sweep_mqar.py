"""The `mqar` grid of scripts/sweep.py: multi-query associative recall (Zoology's MQAR) on
4-layer Llama-family models, the `kv` grid's variants (SLA against GQA and cross-layer
attention at the same KV cache), over the number of key-value pairs, the width, where the
queried pairs sit (near the queries or far back), the learning rate and the seeds.

For every (pairs, placement) the data is generated once into OUT/data/p<P>-<placement>/ with
`skiplm prepare --synthetic mqar` (seeded by --data-seed, so every variant and seed reads the
same sequences); every run trains in OUT/w<W>/p<P>-<placement>/lr<LR>/<variant>/s<seed>/ and
is scored by `skiplm eval --accuracy-out` on the validation sequences (on the CPU, whatever
--train-opts says, so that the scores come from one arithmetic). Runs that finished (their
accuracy.json written after a log that reached --steps) are reused. With --jobs N, N runs go at
once; each run's result depends on its own options only (--threads sets every run's OpenMP
threads), not on --jobs or the order the runs finish in.

Writes OUT/runs-mqar.csv (one row per run: variant, seed, pairs, queries, seq, width,
placement, lr, steps, batch, token_accuracy, sequence_accuracy, val_loss, kv_cache_bytes,
options, command: the prepare, train and eval commands that reproduce it) and
OUT/results-mqar.md (per width, placement and learning rate: every variant's token accuracy,
mean ± std over seeds, at each number of pairs, the paired difference from the baseline
flagged where it exceeds two standard errors; and per width the learning rate that gave the
baseline its best mean accuracy)."""
import concurrent.futures
import csv
import json
import os
import shlex
import statistics
import subprocess
import sys

# 4 layers so that every skip distance of the `kv` grid exists, 4 heads; --n_embd is the width axis
MQAR_MODEL = ["--family", "llama", "--rope_theta", "10000", "--n_layer", "4", "--n_head", "4"]


def ints(s, what):
    try:
        xs = [int(x) for x in str(s).split(",")]
    except ValueError:
        sys.exit(f"sweep: {what} must be comma-separated integers (got {s!r})")
    return xs


def run_checked(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed:\n{r.stdout}")
    return r.stdout


def prepare_cmd(args, pairs, placement, out):
    return [args.skiplm, "prepare", "--synthetic", "mqar", "--out", out, "--vocab", str(args.vocab), "--pairs", str(pairs),
            "--queries", str(args.queries or pairs), "--seq", str(args.seq), "--placement", placement,
            "--train-sequences", str(args.train_sequences), "--val-sequences", str(args.val_sequences),
            "--seed", str(args.data_seed)]


def prepare(args, pairs, placement):
    """the cell's data folder, generated unless its meta.json already says these parameters"""
    out = os.path.join(args.out, "data", f"p{pairs}-{placement}")
    cmd = prepare_cmd(args, pairs, placement, out)
    want = dict(vocab_size=args.vocab, seq=args.seq, pairs=pairs, queries=args.queries or pairs, placement=placement,
                seed=args.data_seed, train_sequences=args.train_sequences, val_sequences=args.val_sequences)
    meta = os.path.join(out, "meta.json")
    if os.path.exists(meta):
        with open(meta) as f:
            got = json.load(f)
        if all(got.get(k) == v for k, v in want.items()):
            return out, cmd
        sys.exit(f"sweep: {out} holds MQAR data of other parameters ({got}); give another --out")
    run_checked(cmd)
    return out, cmd


def train_cmd(args, data, outdir, width, lr, seed, extra):
    return [args.skiplm, "train", "--data", data, "--out", outdir, "--overwrite", "--seed", str(seed),
            "--steps", str(args.steps), "--batch", str(args.batch), "--seq", str(args.seq), "--block_size", str(args.seq),
            "--vocab_size", str(args.vocab), "--lr", str(lr), "--min-lr", str(lr / 10), "--warmup", str(args.warmup),
            "--eval-every", str(args.eval_every), "--eval-batches", str(args.eval_batches), "--ckpt-every", "0",
            "--print-every", str(max(1, args.steps // 5)), *model(args, width), *extra, *args.train_opts.split()]


def eval_cmd(args, data, outdir):
    return [args.skiplm, "eval", os.path.join(outdir, "ckpt.safetensors"), os.path.join(data, "val.bin"),
            "--seq", str(args.seq), "--batch", str(eval_batch(args)), "--accuracy-out", os.path.join(outdir, "accuracy.json"),
            *args.eval_opts.split()]


def eval_batch(args):
    """the largest batch of at most 8 that divides the validation sequences (eval drops a partial batch)"""
    return max(b for b in range(1, 9) if args.val_sequences % b == 0)


def model(args, width):
    return (args.model.split() if args.model else MQAR_MODEL) + ["--n_embd", str(width)]


def finished(outdir, steps):
    acc, log = os.path.join(outdir, "accuracy.json"), os.path.join(outdir, "log.jsonl")
    if not (os.path.exists(acc) and os.path.exists(log)):
        return None
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows or rows[-1].get("step") != steps:
        return None
    with open(acc) as f:
        a = json.load(f)
    return dict(tok=a["token_accuracy"], seq=a["sequence_accuracy"], val=a["loss"])


def one_run(args, job, env):
    """train and score one run (reused when done); its result"""
    outdir, tcmd, ecmd = job["dir"], job["train"], job["eval"]
    got = finished(outdir, args.steps)
    if got:
        return got, "reused"
    os.makedirs(outdir, exist_ok=True)
    run_checked(tcmd, env)
    run_checked(ecmd, env)
    got = finished(outdir, args.steps)
    if not got:
        raise RuntimeError(f"{outdir}: the run ended without its last step or accuracy")
    return got, "trained"


def kv_bytes(args, width, extra):
    cmd = [args.skiplm, "info", *model(args, width), *extra, "--block_size", str(args.seq), "--vocab_size", str(args.vocab)]
    out = run_checked(cmd)
    for line in out.splitlines():
        if line.startswith("KV cache at T="):
            return int(line.split(": ")[1].split()[0])
    sys.exit(f"sweep: {shlex.join(cmd)} gave no KV cache size:\n{out}")


def flagged(d):
    return len(d) > 1 and abs(statistics.fmean(d)) > 2 * statistics.stdev(d) / len(d) ** 0.5


def run_mqar(args, variants):
    pairs_list, widths = ints(args.pairs, "--pairs"), ints(args.widths, "--widths")
    placements = args.placements.split(",")
    lrs = args.lrs
    for p in placements:
        if p not in ("near", "far"):
            sys.exit(f"sweep: --placements takes near and far (got {p!r})")
    os.makedirs(args.out, exist_ok=True)
    data = {}
    for pairs in pairs_list:
        for placement in placements:
            try:
                data[(pairs, placement)] = prepare(args, pairs, placement)
            except RuntimeError as e:
                sys.exit(f"sweep: {e}")
    env = dict(os.environ)
    if args.threads > 0:
        env["OMP_NUM_THREADS"] = str(args.threads)
    # the runs, seed after seed so that a sweep stopped early has every variant paired with the baseline
    jobs = []
    for seed in range(args.seeds):
        for width in widths:
            for lr in lrs:
                for pairs in pairs_list:
                    for placement in placements:
                        for variant, extra in variants:
                            d, pcmd = data[(pairs, placement)]
                            outdir = os.path.join(args.out, f"w{width}", f"p{pairs}-{placement}", f"lr{lr:g}", variant, f"s{seed}")
                            jobs.append(dict(key=(variant, seed, pairs, width, placement, lr), dir=outdir, extra=extra,
                                             prepare=pcmd, train=train_cmd(args, d, outdir, width, lr, seed, extra),
                                             eval=eval_cmd(args, d, outdir)))
    print(f"sweep: {len(jobs)} runs, {args.jobs} at a time", flush=True)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(one_run, args, job, env): job for job in jobs}
        try:
            for fut in concurrent.futures.as_completed(futs):
                job = futs[fut]
                res, how = fut.result()
                results[job["key"]] = res
                v, s, p, w, pl, lr = job["key"]
                print(f"  {v} seed {s} pairs {p} width {w} {pl} lr {lr:g}: token accuracy {res['tok']:.4f}, "
                      f"sequence accuracy {res['seq']:.4f} ({how})", flush=True)
        except RuntimeError as e:
            for f in futs:
                f.cancel()
            sys.exit(f"sweep: {e}")
    kv = {(w, v): kv_bytes(args, w, extra) for w in widths for v, extra in variants}
    path = os.path.join(args.out, f"runs-{args.name}.csv")
    with open(path + ".tmp", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["variant", "seed", "pairs", "queries", "seq", "width", "placement", "lr", "steps", "batch",
                      "token_accuracy", "sequence_accuracy", "val_loss", "kv_cache_bytes", "options", "command"])
        for job in jobs:
            v, s, p, w, pl, lr = job["key"]
            r = results[job["key"]]
            cmd = " && ".join(shlex.join(c) for c in (job["prepare"], job["train"], job["eval"]))
            out.writerow([v, s, p, args.queries or p, args.seq, w, pl, f"{lr:g}", args.steps, args.batch, f"{r['tok']:.6f}",
                          f"{r['seq']:.6f}", f"{r['val']:.6f}", kv[(w, v)], " ".join(job["extra"]), cmd])
    os.replace(path + ".tmp", path)
    md = summary(args, variants, results, kv, pairs_list, widths, placements, lrs)
    with open(os.path.join(args.out, f"results-{args.name}.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
    print(f"sweep: wrote {path} and {args.out}/results-{args.name}.md")


def summary(args, variants, results, kv, pairs_list, widths, placements, lrs):
    seeds = range(args.seeds)
    md = [f"Grid `mqar`: {args.seeds} seeds, {args.steps} steps of {args.batch}x{args.seq} tokens; vocabulary "
          f"{args.vocab}, {args.train_sequences} training sequences, queries "
          f"{args.queries or 'as many as pairs'}; model `{' '.join(model(args, 'W'))}`. Token accuracy on "
          f"{args.val_sequences} validation sequences, mean ± std over seeds; * marks a paired difference from the "
          f"baseline beyond two standard errors.", ""]
    for w in widths:
        for pl in placements:
            for lr in lrs:
                md += [f"Width {w}, {pl}, lr {lr:g}:", "",
                       "| variant | KV cache | " + " | ".join(f"{p} pairs" for p in pairs_list) + " |",
                       "|---|---|" + "---|" * len(pairs_list)]
                for v, _ in variants:
                    cells = []
                    for p in pairs_list:
                        acc = [results[(v, s, p, w, pl, lr)]["tok"] for s in seeds]
                        d = [a - results[("baseline", s, p, w, pl, lr)]["tok"] for s, a in zip(seeds, acc)]
                        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
                        cells.append(f"{statistics.fmean(acc):.3f} ± {sd:.3f}" + ("*" if v != "baseline" and flagged(d) else ""))
                    md.append(f"| {v} | {100 * kv[(w, v)] / kv[(w, 'baseline')]:.1f}% | " + " | ".join(cells) + " |")
                md.append("")
    if len(lrs) > 1:
        for w in widths:
            best = max(lrs, key=lambda lr: statistics.fmean(results[("baseline", s, p, w, pl, lr)]["tok"] for s in seeds
                                                           for p in pairs_list for pl in placements))
            md.append(f"Width {w}: the baseline's best mean token accuracy over the cells is at lr {best:g}.")
        md.append("")
    return md
