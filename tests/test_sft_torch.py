"""Supervised fine-tuning's masked loss against PyTorch (issue 34, item 4), both families.

A token shard with a loss mask beside it (x.bin, x.mask.bin: what prepare --chat writes) is
trained with gradient accumulation and --shuffle 0 from weights written here; PyTorch computes
each step's loss as ONE cross-entropy with ignore_index=-100 over all the step's micro-batches
(sum over the masked-in targets / their number), its gradients, clip_grad_norm_ and AdamW.
One micro-batch has no masked-in target at all (skiplm skips it; it adds nothing in PyTorch).
Per step: loss and gradient norm within 1e-4 relative; final weights within 1e-4 of each
tensor's max |w|. GPT-2 family (tests/ref/gpt_ref.py) and Llama family (tests/ref/llama_ref.py).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import SKIPLM, check, finish  # noqa: E402
from gpt_ref import GPT, GPTConfig  # noqa: E402
from llama_ref import Llama, LlamaConfig, to_file, halves_to_pairs  # noqa: E402
import shards  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)
STEPS, B, T, ACCUM = 8, 2, 16, 2
LR, WD, BETAS, CLIP = 3e-3, 0.1, (0.9, 0.95), 1.0
EMPTY = (3, 1)          # step 3, micro-step 1: every target masked out


def data(V, rng):
    n = STEPS * ACCUM * B * T + 1
    toks = np.where(rng.random(n) < 0.3, rng.integers(0, V, n), (np.arange(n) * 5) % V)
    mask = np.zeros(n, np.uint8)
    i = 0
    while i < n:                          # "replies": runs of 1s between runs of 0s
        a, b = rng.integers(3, 12), rng.integers(2, 9)
        mask[i + a:i + a + b] = 1
        i += a + b
    s, k = EMPTY
    w0 = (s * ACCUM + k) * B
    mask[w0 * T + 1:(w0 + B) * T + 1] = 0
    return toks, mask


def write_mask(path, mask):
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2] = 20240520, 100, len(mask)
    open(path, "wb").write(h.tobytes() + mask.astype(np.uint8).tobytes())


def reference(model, toks, mask):
    params = dict(model.named_parameters())
    decay = [p for p in params.values() if p.dim() >= 2]
    nodecay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=1e-8, foreach=False)
    tt = torch.from_numpy(toks.astype(np.int64))
    mm = torch.from_numpy(mask.astype(np.int64))
    losses, norms = [], []
    for s in range(STEPS):
        opt.zero_grad(set_to_none=True)
        xs, ys = [], []
        for k in range(ACCUM):
            w0 = (s * ACCUM + k) * B
            x = torch.stack([tt[(w0 + b) * T:(w0 + b) * T + T] for b in range(B)])
            y = torch.stack([tt[(w0 + b) * T + 1:(w0 + b) * T + T + 1] for b in range(B)])
            m = torch.stack([mm[(w0 + b) * T + 1:(w0 + b) * T + T + 1] for b in range(B)])
            xs.append(x)
            ys.append(torch.where(m == 1, y, torch.full_like(y, -100)))
        x, y = torch.cat(xs), torch.cat(ys)   # the step's whole batch: one mean over its targets
        logits, _ = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item())
        opt.step()
        losses.append(loss.item())
    return losses, norms


def run_case(name, model, w0, md, tmp, final_of):
    rng = np.random.default_rng(11)
    toks, mask = data(model.cfg.vocab_size, rng)
    shard = os.path.join(tmp, name + ".bin")
    shards.write(shard, toks)
    write_mask(os.path.join(tmp, name + ".mask.bin"), mask)
    wpath = os.path.join(tmp, name + ".init.safetensors")
    st.save_file(w0, wpath, metadata=md)
    out = os.path.join(tmp, name + ".run")
    cmd = [SKIPLM, "train", "--train", shard, "--init", wpath, "--out", out, "--shuffle", "0", "--steps", str(STEPS),
           "--batch", str(B), "--seq", str(T), "--grad-accum", str(ACCUM), "--lr", str(LR), "--min-lr", str(LR),
           "--weight-decay", str(WD), "--grad-clip", str(CLIP), "--eval-every", "0", "--ckpt-every", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="passive"))
    if not check(r.returncode == 0, f"{name}: skiplm train on a masked shard" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
        return
    log = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"))]
    losses, norms = reference(model, toks, mask)
    dl = max(abs(e["loss"] - l) / abs(l) for e, l in zip(log, losses))
    check(dl <= 1e-4, f"{name}: per-step masked losses agree with F.cross_entropy(ignore_index=-100) over the step "
                      f"(max rel diff {dl:.2e}; {losses[0]:.4f} -> {losses[-1]:.4f})")
    dn = max(abs(e["grad_norm"] - g) / g for e, g in zip(log, norms))
    check(dn <= 1e-4, f"{name}: per-step gradient norms agree (max rel diff {dn:.2e})")
    final, _ = st.load_file(os.path.join(out, "ckpt.safetensors"))
    worst, wname = 0.0, ""
    for pname, ref in final_of(model).items():
        a = final[pname]
        rel = (a - ref).abs().max().item() / max(ref.abs().max().item(), 1e-12)
        if pname.endswith("attn.c_attn.bias"):
            continue                      # its key part's gradient is float noise (see test_train_torch.py)
        if rel > worst:
            worst, wname = rel, pname
    check(worst <= 1e-4, f"{name}: final weights agree (worst rel diff {worst:.2e} in {wname})")
    # the same data without the mask gives another run: the mask is read
    os.remove(os.path.join(tmp, name + ".mask.bin"))
    r = subprocess.run(cmd[:cmd.index("--out") + 1] + [out + "2"] + cmd[cmd.index("--out") + 2:], capture_output=True, text=True)
    log2 = [json.loads(line) for line in open(os.path.join(out + "2", "log.jsonl"))] if r.returncode == 0 else []
    check(log2 and abs(log2[0]["loss"] - log[0]["loss"]) > 1e-3, f"{name}: without the mask file the loss differs "
          f"({log2[0]['loss'] if log2 else '?'} vs {log[0]['loss']:.4f})")


with tempfile.TemporaryDirectory() as tmp:
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=T, vocab_size=40, n_skip_layer=1, n_skip_head=2)
    torch.manual_seed(0)
    g = GPT(cfg)
    g.randomize(seed=5)
    run_case("gpt2-sla", g, g.state_for_file(), cfg.metadata(), tmp,
             lambda m: {k: v.detach() for k, v in m.named_parameters() if k != "lm_head.weight"})
    lc = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, block_size=T, vocab_size=40, ffn_hidden=64)
    torch.manual_seed(0)
    lm = Llama(lc)
    lm.randomize(seed=6)
    run_case("llama", lm, to_file(lm), lc.metadata(), tmp, lambda m: to_file(m))
finish()
