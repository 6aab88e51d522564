"""POST /v1/embeddings on `skiplm serve` against PyTorch: a Llama-shaped model of random weights
(GPT-2's vocabulary), its prompts encoded by npm gpt-3-encoder and run through the PyTorch
reference (tests/ref/llama_ref.py); the reference embedding is the final norm's output averaged
over the prompt's positions, scaled to length 1. The requests go through OpenAI's official
`openai` npm package (embeddings.create, which asks for base64 and decodes the float32 bytes)
and curl (encoding_format float).

1. three inputs in one request (a list of strings): each embedding equals the reference's
   (max |diff| < 1e-4), unit length, usage counts the prompt tokens;
2. float and base64 give the same numbers; token ids as input equal the text's;
3. bad input (empty list, a number, wrong dimensions, an unknown model) names its field."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import ROOT, check, finish  # noqa: E402
from test_serve import Reference, Server, clean, curl, make_model  # noqa: E402

TEXTS = ["The state of the union is strong.", "Fellow citizens", "a"]


def reference(ref, text):
    ids = ref.encode(text)
    out = {}
    hook = ref.model.model.norm.register_forward_hook(lambda mod, inp, o: out.setdefault("h", o))
    with torch.no_grad():
        ref.model(torch.tensor([ids]))
    hook.remove()
    v = out["h"][0].double().mean(0)
    return (v / v.norm()).numpy(), ids


def openai_embeddings(srv, texts):
    script = ("import OpenAI from 'openai'; const [url, inp] = process.argv.slice(1);"
              "const c = new OpenAI({baseURL: url, apiKey: 'none', maxRetries: 0});"
              "const r = await c.embeddings.create({model: 'm', input: JSON.parse(inp)});"
              "process.stdout.write(JSON.stringify({data: r.data.map((d) => Array.from(d.embedding)), usage: r.usage}));")
    r = subprocess.run(["node", "--input-type=module", "-e", script, srv.url + "/v1", json.dumps(texts)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    if r.returncode:
        print(r.stderr[-1500:])
        return {}
    return json.loads(r.stdout)


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    if not check(make_model(model, "--family", "llama", "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2", "--n_embd", "64",
                            "--bias", "0", "--block_size", "256", scale=4.0), "a Llama-shaped model of random weights"):
        finish()
    ref = Reference(model, tmp)
    srv = Server(model, "--parallel", "2", "--alias", "m")
    if not check(srv.port is not None, f"the server starts ({srv.log()[-300:]})"):
        finish()
    try:
        want = [reference(ref, t) for t in TEXTS]
        got = openai_embeddings(srv, TEXTS)
        data = got.get("data", [])
        diffs = [float(np.abs(np.array(g) - w).max()) for g, (w, _) in zip(data, want)]
        check(len(data) == 3 and max(diffs) < 1e-4 and all(abs(np.linalg.norm(g) - 1) < 1e-5 for g in data),
              f"embeddings.create (openai, base64): each equals PyTorch's mean-pooled final-norm states, unit length (max |diff| {diffs})")
        check(got.get("usage", {}).get("prompt_tokens") == sum(len(ids) for _, ids in want), f"usage counts the prompt tokens ({got.get('usage')})")
        code, out = curl(srv, "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "float"})
        f = json.loads(out)["data"][0]["embedding"] if code == 200 else []
        code2, out2 = curl(srv, "/v1/embeddings", {"input": want[0][1]})
        t = json.loads(out2)["data"][0]["embedding"] if code2 == 200 else []
        check(len(f) == 64 and np.abs(np.array(f) - np.array(data[0] if data else 0)).max() < 1e-6 and t == f,
              "encoding_format float gives base64's numbers; token ids as input give the text's")
        for body, param in (({"input": []}, "input"), ({"input": 5}, "input"), ({"input": "a", "dimensions": 8}, "dimensions"),
                            ({"input": "a", "model": "other"}, "model"), ({"input": "a", "encoding_format": "int8"}, "encoding_format")):
            code, out = curl(srv, "/v1/embeddings", body)
            e = json.loads(out).get("error", {}) if out.startswith("{") else {}
            check(code in (400, 404) and e.get("param") == param and ("'prompt'" not in e.get("message", "")),
                  f"bad input {body}: {code} naming {param} ({e.get('message', out)[:80]})")
    finally:
        check(srv.stop() == 0, "the server exits 0")
    clean(srv)
    finish()


if __name__ == "__main__":
    main()
