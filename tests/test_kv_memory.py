"""Streams per gigabyte: the KV cache's bytes per position, `serve --kv-memory SIZE`, and the bf16
K/V cache on the command line.

1. `skiplm info` gives the K/V bytes of one position (fp32 and bf16): layers x stored KV heads x
   head size x 2 (K and V) x 4 or 2 bytes, where the stored heads are the ones some layer reads:
   the paper's 3/4 rule keeps 13 of 16 layer-heads of a 4-layer, 4-head model, GQA with 2 KV
   heads 8 of 16 (the `kv` grid of scripts/sweep.py).
2. `serve --kv-memory SIZE` runs as many slots of --ctx positions as SIZE holds K/V for: the
   most that fit (one more would not), said at startup, counted by GET /metrics (parsed by the
   Prometheus project's parser) and used (as many requests at once as slots); for the same
   budget the SLA model gets more slots than the baseline, --kv-bf16 twice as many.
3. Refused with a clear message: a budget that holds no slot, a malformed size, --kv-memory with
   --parallel; --kv-bf16 with --device cuda.
4. sample, bench and eval with --kv-bf16: the cache is said to be bf16 and half the bytes;
   eval --kv-cache scores through the decoder (the forward pass's loss up to summation order),
   --kv-bf16 within rounding of it, --dump-logits' rows those of the decoder."""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import SKIPLM, check, finish  # noqa: E402
import st  # noqa: E402

VOCAB = list("abcdefghijklmnopqrstuvwxyz .,")
SHAPE = ["--family", "llama", "--rope_theta", "10000", "--n_layer", "4", "--n_head", "4", "--n_embd", "64", "--bias", "0",
         "--block_size", "256", "--vocab_size", str(len(VOCAB))]
VARIANTS = {"baseline": [], "sla-nl3-nh3": ["--n_skip_layer", "3", "--n_skip_head", "3"], "gqa-kv2": ["--n_kv_head", "2"]}
HS = 16                                 # 64 wide, 4 heads
STORED = {"baseline": 16, "sla-nl3-nh3": 13, "gqa-kv2": 8}


def sk(*args, **kw):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True, timeout=300, **kw)


def curl(url, path, body=None):
    args = ["curl", "-sS", "-w", "\n%{http_code}", url + path]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    out, _, code = r.stdout.rpartition("\n")
    return int(code or 0), out


def serve(model, vocab, *opts):
    """(the process, its base URL or None, its stderr so far, the file of its stderr)"""
    err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p = subprocess.Popen([SKIPLM, "serve", model, "--tokenizer", vocab, "--port", "0", *opts], stdout=subprocess.DEVNULL, stderr=err)
    for _ in range(400):
        text = open(err.name).read()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", text)
        if m:
            return p, f"http://127.0.0.1:{m.group(1)}", text, err.name
        if p.poll() is not None:
            break
        time.sleep(0.05)
    return p, None, open(err.name).read(), err.name


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def per_position(model):
    r = sk("info", model)
    m = re.search(r"KV cache per position and sequence: (\d+) bytes fp32, (\d+) bf16", r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def main():
    tmp = tempfile.mkdtemp()
    vocab = os.path.join(tmp, "vocab.json")
    json.dump({"type": "char", "vocab": VOCAB}, open(vocab, "w"))
    models, per = {}, {}
    for name, extra in VARIANTS.items():
        models[name] = os.path.join(tmp, name + ".safetensors")
        r = sk("init", models[name], *SHAPE, *extra, "--seed", "3")
        check(r.returncode == 0, f"{name}: init {r.stderr.strip()[-200:]}")
        per[name] = per_position(models[name])
        want = STORED[name] * HS * 2
        check(per[name] == (want * 4, want * 2), f"{name}: info gives {per[name]} bytes of K/V per position (fp32, bf16): "
              f"{STORED[name]} of 16 layer-heads stored")

    # 2. slots from a budget: 4 MiB at --ctx 256
    budget, ctx = 4 << 20, 256
    slots = {}
    for name in ("baseline", "sla-nl3-nh3"):
        for kv16 in (0, 1):
            opts = ["--kv-memory", "4M", "--ctx", str(ctx)] + (["--kv-bf16"] if kv16 else [])
            p, url, err, log = serve(models[name], vocab, *opts)
            try:
                per_slot = per[name][kv16] * ctx
                want = budget // per_slot
                m = re.search(r"\[--kv-memory 4M: K/V of (\d+) bytes per position \((\w+)\), [\d.]+ MiB per slot of (\d+) "
                              r"positions: --parallel (\d+)\]", err)
                got = int(m.group(4)) if m else None
                slots[(name, kv16)] = got
                what = f"{name}{' --kv-bf16' if kv16 else ''}"
                check(url is not None and got == want and want * per_slot <= budget < (want + 1) * per_slot and
                      int(m.group(1)) == per[name][kv16] and m.group(2) == ("bf16" if kv16 else "fp32"),
                      f"{what}: --kv-memory 4M at --ctx {ctx} runs {got} slots of {per_slot} bytes (the most that fit: {want})")
                m2 = re.search(r"KV cache \(([^)]*)\) ([\d.]+) MiB for (\d+) x (\d+) positions", err)
                check(m2 is not None and int(m2.group(3)) == want and int(m2.group(4)) == ctx and
                      abs(float(m2.group(2)) - want * per_slot / 1048576) < 0.06 and m2.group(1).startswith("bf16" if kv16 else "fp32"),
                      f"{what}: the cache made is {m2.group(2) if m2 else '?'} MiB for {m2.group(3) if m2 else '?'} x {ctx} positions")
                if url is None:
                    continue
                code, out = curl(url, "/metrics")
                fams = {f.name: f for f in text_string_to_metric_families(out)} if code == 200 else {}
                n = fams["skiplm_slots"].samples[0].value if "skiplm_slots" in fams else None
                check(n == want, f"{what}: GET /metrics (Prometheus' parser) counts {n} slots")
                if name == "sla-nl3-nh3" and kv16:
                    # as many requests at once as slots, all served
                    codes = []
                    ts = [threading.Thread(target=lambda: codes.append(curl(url, "/v1/completions", {"prompt": "ab c", "max_tokens": 8})[0]))
                          for _ in range(want)]
                    for t in ts:
                        t.start()
                    for t in ts:
                        t.join()
                    check(codes == [200] * want, f"{what}: {want} requests at once, all answered ({sorted(set(codes))})")
            finally:
                stop(p)
                bad = [ln for ln in open(log).read().splitlines() if "runtime error" in ln or "Sanitizer" in ln]
                check(not bad, f"{name}{' --kv-bf16' if kv16 else ''}: the server's log has no sanitizer report ({bad[:2]})")
                os.unlink(log)
    b, s = slots.get(("baseline", 0)), slots.get(("sla-nl3-nh3", 0))
    check(b and s and s > b and slots.get(("baseline", 1)) == 2 * b,
          f"the same 4 MiB: baseline {b} slots, the 3/4 rule {s}; --kv-bf16: {slots.get(('baseline', 1))} and "
          f"{slots.get(('sla-nl3-nh3', 1))}")

    # 3. refusals, before listening
    for opts, msg, code in ((["--kv-memory", "300K", "--ctx", "256"], "holds no slot", 1),
                            (["--kv-memory", "12Q"], "is not a size", 2),
                            (["--kv-memory", "0"], "is not a size", 2),
                            (["--kv-memory", "1M", "--parallel", "2"], "give one of them", 2),
                            (["--kv-bf16", "--device", "cuda"], "", 2)):
        r = sk("serve", models["baseline"], "--tokenizer", vocab, "--port", "0", *opts)
        check(r.returncode == code and msg in r.stderr, f"serve {' '.join(opts)} refused ({r.returncode}): {r.stderr.strip()[-150:]}")

    # 4. sample, bench, eval with --kv-bf16
    m = models["sla-nl3-nh3"]
    r32 = sk("sample", m, "--tokenizer", vocab, "--prompt", "abc", "--tokens", "20", "--seed", "4")
    r16 = sk("sample", m, "--tokenizer", vocab, "--prompt", "abc", "--tokens", "20", "--seed", "4", "--kv-bf16")
    k32 = re.search(r"KV cache \((\w+)\) ([\d.]+) MiB", r32.stderr)
    k16 = re.search(r"KV cache \((\w+)\) ([\d.]+) MiB", r16.stderr)
    check(r16.returncode == 0 and k32 and k16 and k16.group(1) == "bf16" and k32.group(1) == "fp32" and
          abs(float(k16.group(2)) * 2 - float(k32.group(2))) < 0.02, f"sample --kv-bf16: {k16.group(0) if k16 else r16.stderr[-200:]}")
    r = sk("sample", m, "--tokenizer", vocab, "--prompt", "abc", "--kv-bf16", "--device", "cuda")
    check(r.returncode == 2, f"sample --kv-bf16 --device cuda refused: {r.stderr.strip()[-120:]}")
    r = sk("bench", "--model", m, "--no-train", "--gen", "6", "--gen-seqs", "2", "--kv-bf16")
    check(r.returncode == 0 and "KV cache (bf16 K/V)" in r.stdout, f"bench --kv-bf16: {(r.stdout + r.stderr).strip()[-160:]}")
    prep = os.path.join(tmp, "text.txt")
    open(prep, "w").write("the quick brown fox jumps over the lazy dog, again and again. " * 40)
    data = os.path.join(tmp, "data")
    r = sk("prepare", prep, "--out", data, "--tokenizer", vocab, "--val-fraction", "0.5")
    shard = os.path.join(data, "val.bin")
    if not check(r.returncode == 0 and os.path.exists(shard), f"a shard to evaluate: {r.stderr.strip()[-200:]}"):
        finish()
    losses, dumps = {}, {}
    for mode in ("", "--kv-cache", "--kv-bf16"):
        dumps[mode] = os.path.join(tmp, f"dump{mode}.safetensors")
        r = sk("eval", m, shard, "--batch", "2", "--seq", "100", "--max-batches", "2", "--dump-logits", dumps[mode], *([mode] if mode else []))
        g = re.match(r"loss ([\d.]+) ", r.stdout)
        losses[mode] = float(g.group(1)) if g else None
    lf, lc, lb = losses[""], losses["--kv-cache"], losses["--kv-bf16"]
    check(lf is not None and lc is not None and lb is not None and abs(lc - lf) < 1e-5 and 0 < abs(lb - lc) < 1e-2,
          f"eval: forward pass {lf}, through the KV cache {lc}, with bf16 K/V {lb}")
    t = {k: st.load_file(v)[0]["logits"] for k, v in dumps.items() if os.path.exists(v)}
    if len(t) == 3:
        d_c, d_b = (t["--kv-cache"] - t[""]).abs().max().item(), (t["--kv-bf16"] - t["--kv-cache"]).abs().max().item()
        check(d_c < 1e-4 and 1e-4 < d_b < 0.1, f"eval --dump-logits: the decoder's logits {d_c:.1e} from the forward pass's, "
              f"bf16 K/V's {d_b:.1e} from fp32 K/V's")
    r = sk("eval", m, shard, "--kv-bf16", "--by-position")
    check(r.returncode == 2 and "--by-position" in r.stderr, f"eval --kv-bf16 --by-position refused: {r.stderr.strip()[-120:]}")
    finish()


if __name__ == "__main__":
    main()
