"""scripts/sweep.py --grid mqar on a tiny cell: one row per run in runs-mqar.csv with the columns
the experiments need and the KV cache of each variant, the same results with --jobs 1 and
--jobs 3, finished runs reused, a run's logged command reproducing its accuracy bit for bit,
the learning-rate axis and its choice in results-mqar.md, and bad options refused."""
import csv
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402

ENV = dict(os.environ, OMP_WAIT_POLICY="passive")
TINY = ["--pairs", "2", "--widths", "32", "--placements", "near,far", "--seq", "12", "--vocab", "32", "--steps", "30",
        "--batch", "8", "--train-sequences", "200", "--val-sequences", "32", "--seeds", "2", "--eval-every", "0",
        "--only", "sla-nl3-nh3,gqa-kv2", "--lr", "1e-3,3e-3", "--threads", "1", "--skiplm", SKIPLM]
COLUMNS = ["variant", "seed", "pairs", "queries", "seq", "width", "placement", "lr", "steps", "batch", "token_accuracy",
           "sequence_accuracy", "val_loss", "kv_cache_bytes", "options", "command"]


def sweep(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sweep.py"), "--grid", "mqar", *args],
                          capture_output=True, text=True, timeout=600, env=ENV)


def rows(out):
    with open(os.path.join(out, "runs-mqar.csv")) as f:
        return list(csv.DictReader(f))


def main():
    tmp = tempfile.mkdtemp()
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    r = sweep("--out", a, "--jobs", "1", *TINY)
    if not check(r.returncode == 0, "a tiny mqar grid runs" + ("" if r.returncode == 0 else (r.stdout + r.stderr)[-400:])):
        finish()
    ra = rows(a)
    with open(os.path.join(a, "runs-mqar.csv")) as f:
        header = f.readline().strip().split(",")
    check(header == COLUMNS and len(ra) == 3 * 2 * 2 * 2,
          f"runs-mqar.csv: the columns and a row per run (3 variants x 2 seeds x 2 placements x 2 lrs: {len(ra)})")
    # the KV cache of one sequence of 12 positions: 4 layers x 4 heads x 8 wide x K and V x 4 bytes x 12 = 12288;
    # the 3/4 rule keeps 13 of the 16 layer-heads, GQA with 2 KV heads half
    kv = {row["variant"]: int(row["kv_cache_bytes"]) for row in ra}
    check(kv == {"baseline": 12288, "sla-nl3-nh3": 9984, "gqa-kv2": 6144}, f"kv_cache_bytes per variant ({kv})")
    accs = [float(row["token_accuracy"]) for row in ra]
    check(all(0 <= x <= 1 for x in accs) and all(row["pairs"] == "2" and row["queries"] == "2" and row["seq"] == "12" and
                                                  row["width"] == "32" and row["steps"] == "30" for row in ra),
          "the rows hold the cell's parameters and an accuracy in [0, 1]")
    # --jobs 3: the same results (the paths in the commands aside)
    r = sweep("--out", b, "--jobs", "3", *TINY)
    rb = rows(b) if r.returncode == 0 else []
    strip = lambda rs: [{k: v for k, v in row.items() if k != "command"} for row in rs]  # noqa: E731
    check(r.returncode == 0 and strip(ra) == strip(rb) and [row["command"].replace(a, b) for row in ra] ==
          [row["command"] for row in rb], "--jobs 3 gives the rows of --jobs 1" + ("" if r.returncode == 0 else r.stderr[-300:]))
    # a rerun reuses every finished run
    r = sweep("--out", a, "--jobs", "2", *TINY)
    check(r.returncode == 0 and r.stdout.count("(reused)") == 24 and strip(rows(a)) == strip(ra), "a rerun reuses the runs")
    # a run's logged command (prepare, train, eval) reproduces its accuracy bit for bit
    row = next(x for x in ra if x["variant"] == "sla-nl3-nh3" and x["placement"] == "far" and x["seed"] == "1")
    acc = row["command"].split("--accuracy-out ")[-1].strip()
    before = open(acc, "rb").read()
    os.remove(acc)
    ok = all(subprocess.run(shlex.split(c), capture_output=True, env=ENV).returncode == 0 for c in row["command"].split(" && "))
    check(ok and open(acc, "rb").read() == before, "a run's logged command reproduces its accuracy.json bit for bit")
    md = open(os.path.join(a, "results-mqar.md")).read()
    check(md.count("| sla-nl3-nh3 | 81.2% | ") == 4 and md.count("| baseline | 100.0% | ") == 4 and
          "Width 32, far, lr 0.003:" in md and "Width 32: the baseline's best mean token accuracy over the cells is at lr" in md,
          "results-mqar.md: a table per width, placement and lr, and the lr the baseline does best at")
    for args, msg in [(["--data", tmp], "give no --data"), (["--seq", "12,16"], "one --seq"),
                      (["--placements", "middle"], "near and far"), (["--pairs", "2,x"], "--pairs must be"),
                      (["--pairs", "16", "--seq", "64"], "--pairs 16 needs 16 distinct keys"),
                      (["--train-opts", "--no-such-option 1"], "no-such-option")]:
        r = sweep("--out", os.path.join(tmp, "bad"), *TINY, *args)
        check(r.returncode != 0 and msg in r.stderr + r.stdout, f"refused: {' '.join(args)} ({(r.stderr or r.stdout).strip().splitlines()[-1][-160:]})")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sweep.py"), "--grid", "kv", "--data", tmp, "--out", tmp,
                        "--lr", "1e-3,3e-3"], capture_output=True, text=True, env=ENV)
    check(r.returncode != 0 and "several --lr values are for --grid mqar" in r.stderr, f"refused: several --lr for kv ({r.stderr.strip()})")
    finish()


if __name__ == "__main__":
    main()
