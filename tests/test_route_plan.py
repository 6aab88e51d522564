"""The Skip-Layer routing plan (src/core/route.c) against the reference of tests/ref/route_plan.py,
written from SPEC section 1 and docs/models.md: for named configs (no skip, the paper's SLA,
routing tables, GQA, MQA, CLA-like tables) and 400 random ones (random shapes, paper settings
and routing tables, valid or not), every table of the plan (source layers, runs, stored KV
heads and their cache slots, lenders, the fused q/k/v columns, bytes per token, the printed
lines) equals the reference, the model's own plan is the same, and exactly the configs the
reference refuses are refused. `skiplm info` prints the reference's lines and a KV cache of
their bytes; bad routing tables are refused with their exact messages, by the library and by
`skiplm info`."""
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import BUILD, SKIPLM, check, finish  # noqa: E402
from route_plan import RouteError, plan  # noqa: E402

TOOL = os.path.join(BUILD, "tests", "tool_route")
KEYS = ["src", "runs", "stored", "slot", "n_store", "lends", "lend_index", "n_lenders", "kv_bytes", "cols", "lines"]


def cfg_line(cfg):
    c = dict(cfg)
    if (c.get("n_kv_head") or c["n_head"]) != c["n_head"]:
        c.setdefault("family", "llama")
    return "\t".join(f"{k}={v}" for k, v in c.items())


def tool(cfgs):
    r = subprocess.run([TOOL], input="".join(cfg_line(c) + "\n" for c in cfgs), capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
    return [json.loads(x) for x in r.stdout.splitlines()]


def reference(cfg):
    try:
        return plan(cfg)
    except RouteError as e:
        return {"error": str(e)}


def diff(got, want):
    """'' when the tool's plan equals the reference's, else the first difference"""
    if "error" in want or "error" in got:
        return "" if ("error" in want) == ("error" in got) else f"tool {got.get('error', 'accepts')}, reference {want.get('error', 'accepts')}"
    for k in KEYS:
        if got[k] != want[k]:
            return f"{k}: tool {str(got[k])[:300]} reference {str(want[k])[:300]}"
    if got["model_same"] != 1:
        return "the model's plan differs from sk_route_plan_new's"
    return ""


G12 = dict(n_layer=12, n_head=12, n_embd=96)
NAMED = [
    ("no skip", dict(G12)),
    ("paper SLA 9/6", dict(G12, n_skip_layer=9, n_skip_head=6)),
    ("paper SLA 9/9 (3/4 rule)", dict(G12, n_skip_layer=9, n_skip_head=9)),
    ("n_skip_layer >= n_layer: no skip", dict(G12, n_skip_layer=12, n_skip_head=6)),
    ("all heads skip", dict(G12, n_skip_layer=2, n_skip_head=12)),
    ("table equal to SLA 9/6", dict(G12, routing="9-11:6-11=-9")),
    ("multi-source table", dict(G12, routing="3-11:6-8=-3;9-11:9-11=-9")),
    ("table reading layer 0", dict(G12, routing="6-11:6-11=@0")),
    ("CLA: odd layers read the layer below", dict(G12, routing="1,3,5,7,9,11:*=-1")),
    ("CLA every layer: *:*=-1", dict(G12, routing="*:*=-1")),
    ("overriding rules", dict(G12, routing="*:0-5=-2;4:*=@1;4:3=-1")),
    ("GQA 8/2 SLA 2/4", dict(n_layer=4, n_head=8, n_kv_head=2, n_embd=64, n_skip_layer=2, n_skip_head=4)),
    ("GQA 8/4 table", dict(n_layer=6, n_head=8, n_kv_head=4, n_embd=64, routing="2-5:2-3=-2;4-5:6-7=@1")),
    ("GQA CLA table", dict(n_layer=4, n_head=4, n_kv_head=2, n_embd=64, routing="1,3:*=-1")),
    ("MQA SLA", dict(n_layer=4, n_head=4, n_kv_head=1, n_embd=32, n_skip_layer=1, n_skip_head=4)),
    ("one layer, one head", dict(n_layer=1, n_head=1, n_embd=8)),
]


def rand_table(r, L, H, group):
    rules = []
    for _ in range(r.randint(1, 4)):
        if r.random() < 0.3:
            lay = "*"
        else:
            items = []
            for _ in range(r.randint(1, 3)):
                a = r.randint(0, L)          # sometimes one past the last layer
                items.append(str(a) if r.random() < 0.5 else f"{a}-{r.randint(a - 1, L)}")
            lay = ",".join(items)
        if r.random() < 0.3:
            heads = "*"
        elif r.random() < 0.8:           # whole KV groups
            g0 = r.randrange(H // group)
            g1 = r.randint(g0, H // group - 1)
            heads = f"{g0 * group}-{(g1 + 1) * group - 1}"
        else:
            h0 = r.randrange(H + 1)
            heads = str(h0) if r.random() < 0.5 else f"{h0}-{r.randint(h0, H)}"
        srcs = f"-{r.randint(0, L)}" if r.random() < 0.7 else f"@{r.randint(0, L)}"
        rules.append(f"{lay}:{heads}={srcs}")
    t = ";".join(rules)
    if r.random() < 0.05:
        t += ";"
    if r.random() < 0.05:                # a broken character somewhere
        i = r.randrange(len(t))
        t = t[:i] + r.choice(":=;,-@*x ") + t[i + 1:]
    return t


def rand_config(r):
    L = r.randint(1, 8)
    H = r.choice([1, 2, 3, 4, 6, 8])
    Hkv = r.choice([d for d in range(1, H + 1) if H % d == 0])
    c = dict(n_layer=L, n_head=H, n_embd=H * 8)
    if Hkv != H:
        c["n_kv_head"] = Hkv
    group = H // Hkv
    mode = r.randrange(4)
    if mode == 1:
        c["n_skip_layer"] = r.randint(0, L + 1)
        c["n_skip_head"] = r.randint(0, H // group) * group if r.random() < 0.9 else r.randint(0, H)
    elif mode >= 2:
        c["routing"] = rand_table(r, L, H, group)
        if r.random() < 0.05:
            c["n_skip_layer"] = 1
    return c


def info_lines(out):
    """the routing plan's lines of `skiplm info`, without their 'layer N: ' prefix"""
    lines = out.splitlines()
    i = next((k for k, s in enumerate(lines) if s.startswith("skip-layer routing plan")), None)
    if i is None:
        return None
    return [re.sub(r"^  layer +\d+: ", "", s) for s in lines[i + 1:] if s.startswith("  layer ")]


def info_args(cfg):
    a = []
    for k, v in cfg.items():
        a += [f"--{k}", str(v)]
    if (cfg.get("n_kv_head") or cfg["n_head"]) != cfg["n_head"]:
        a += ["--family", "llama"]
    return a


def main():
    if not os.path.exists(TOOL):
        check(False, f"{TOOL} is missing: run make")
        finish()
    # --- named configs
    got = tool([c for _, c in NAMED])
    check(len(got) == len(NAMED), f"the tool answered {len(got)} of {len(NAMED)} configs")
    for (name, cfg), g in zip(NAMED, got):
        want = reference(cfg)
        d = diff(g, want)
        check(not d and "error" not in g, f"plan of {name} ({cfg.get('routing', '')}) equals the reference" + (f": {d}" if d else ""))
    # --- random configs
    r = random.Random(45)
    cfgs = [rand_config(r) for _ in range(400)]
    got = tool(cfgs)
    bad = [(c, d) for c, g in zip(cfgs, got) for d in [diff(g, reference(c))] if d]
    n_ok = sum("error" not in g for g in got)
    check(len(got) == len(cfgs) and not bad,
          f"400 random configs: {n_ok} accepted, {len(cfgs) - n_ok} refused, as the reference" +
          (f"; {len(bad)} differ, first {bad[0][0]}: {bad[0][1]}" if bad else ""))
    check(50 < n_ok < 350, f"the random configs exercise both sides ({n_ok} of 400 accepted)")
    # --- skiplm info prints the plan, and its KV cache holds the plan's bytes
    for name, cfg in [NAMED[1], NAMED[6], NAMED[9], NAMED[11], NAMED[13]]:
        res = subprocess.run([SKIPLM, "info", *info_args(cfg)], capture_output=True, text=True)
        want = plan(cfg)
        lines = info_lines(res.stdout)
        check(res.returncode == 0 and lines == want["lines"],
              f"skiplm info prints the plan of {name}" + ("" if lines == want["lines"] else f": {res.stdout[-600:]} {res.stderr}"))
        m = re.search(r"KV cache at T=\d+: \d+ bytes fp32 \((\d+) per position", res.stdout)
        check(m and int(m.group(1)) == sum(want["kv_bytes"]),
              f"{name}: the KV cache keeps the plan's {sum(want['kv_bytes'])} bytes per position ({m.group(1) if m else res.stdout[-300:]})")
    # --- bad routing: the library's message and skiplm info's, exactly
    bad_tables = [
        (G12, "2:0-3=-3", "config: routing '2:0-3=-3' at offset 0: layer 2 cannot read layer -1 (sources must be at or below the layer)"),
        (G12, "12:0=-1", "config: routing '12:0=-1' at offset 0: layers 12-12 outside [0, 12)"),
        (G12, "1:0=-1;3:0-12=-1", "config: routing '1:0=-1;3:0-12=-1' at offset 7: heads 0-12 outside [0, 12)"),
        (G12, "3:0-1=+1", "config: routing '3:0-1=+1' at offset 6: source must be -k (k layers below) or @j (layer j)"),
        (G12, "3:0-1", "config: routing '3:0-1' at offset 5: expected '='"),
        (G12, "3:0=-0", "config: routing '3:0=-0' at offset 6: bad source"),
        (G12, "3:0=@5", "config: routing '3:0=@5' at offset 0: layer 3 cannot read layer 5 (sources must be at or below the layer)"),
        (G12, "x", "config: routing 'x' at offset 0: expected a layer number"),
        (G12, "3:0=-1;;", "config: routing '3:0=-1;;' at offset 7: expected a layer number"),
        (G12, "3:0=-1x", "config: routing '3:0=-1x' at offset 6: expected ';' or the end"),
        (dict(n_layer=4, n_head=4, n_kv_head=2, n_embd=32), "2:1-3=-1",
         "config: routing: layer 2 heads 0 and 1 share a KV head but read different layers"),
        (dict(G12, n_skip_layer=9), "9-11:6-11=-9", "config: give either routing or n_skip_layer/n_skip_head, not both"),
    ]
    cfgs = [dict(c, routing=t) for c, t, _ in bad_tables]
    got = tool(cfgs)
    for (c, t, msg), g in zip(bad_tables, got):
        check(g.get("error") == msg, f"sk_route_plan_new refuses '{t}': {g.get('error', 'accepted')}")
        res = subprocess.run([SKIPLM, "info", *info_args(dict(c, routing=t))], capture_output=True, text=True)
        check(res.returncode != 0 and res.stderr.strip() == f"skiplm info: {msg}" and "routing plan" not in res.stdout,
              f"skiplm info refuses '{t}' with the message: {res.stderr.strip()[:200]}")
    finish()


if __name__ == "__main__":
    main()
