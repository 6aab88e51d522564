"""bf16 against fp32 on the same batches, skiplm and PyTorch side by side (docs/cuda.md, "bf16
tracks fp32"): a GPT from the same initial weights (`skiplm init`), the shard's windows in order
(`--shuffle 0`: step s reads windows s*B .. s*B+B-1, window w = tokens w*T .. w*T+T), nanoGPT's
warmup + cosine schedule, AdamW with nanoGPT's groups, gradient clipping. Four runs:

    skiplm train --device DEV           fp32 (the parity mode)
    skiplm train --device DEV --bf16    bf16 mixed precision
    PyTorch (tests/ref/gpt_ref.py)      fp32, TF32 off
    PyTorch under bf16 autocast         the attention by F.scaled_dot_product_attention

Prints the losses every --every steps, each precision's fp32 pair (skiplm against PyTorch: equal
at first, then apart as rounding grows), and each bf16 run's mean offset from its own fp32 run
over the second half: what the bf16 recipe costs, in skiplm and in PyTorch.

    python3 bench/bf16_curve.py --skiplm build-cuda/skiplm --train data/sotu-gpt2/train.bin
    python3 bench/bf16_curve.py --skiplm build/skiplm --train data/sotu-char/train.bin --device cpu \\
        --model "--n_layer 4 --n_head 4 --n_embd 256 --vocab_size 65" --batch 16 --seq 256 --steps 400
    python3 bench/bf16_curve.py --skiplm build/skiplm --train SHARD --device cpu --no-bf16 \\
        --model "--n_layer 2 --n_head 2 --n_embd 32 --vocab_size 256" --batch 2 --seq 32 --steps 20

(the second: the CPU twin, skiplm train --bf16 through oneDNN against PyTorch's CPU autocast, whose
attention is 1.13's F._scaled_dot_product_attention; the third: a smoke test of the script)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
from gpt_ref import GPT, CausalSelfSkipLayerAttention, config_from_metadata  # noqa: E402
import st  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--skiplm", required=True)
ap.add_argument("--train", required=True, help="a token shard (skiplm prepare's train.bin)")
ap.add_argument("--model", default="--preset gpt2", help="skiplm model options (no SLA)")
ap.add_argument("--device", default="cuda")
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--seq", type=int, default=1024)
ap.add_argument("--steps", type=int, default=150)
ap.add_argument("--lr", type=float, default=6e-4)
ap.add_argument("--warmup", type=int, default=20)
ap.add_argument("--seed", type=int, default=1337)
ap.add_argument("--every", type=int, default=10)
ap.add_argument("--no-bf16", action="store_true", help="the fp32 runs alone")
ap.add_argument("--out", default="", help="write the four curves here as JSON")
a = ap.parse_args()
MIN_LR, WD, BETAS, CLIP = a.lr / 10, 0.1, (0.9, 0.95), 1.0


def get_lr(it):
    """nanoGPT's schedule, as skiplm's (--warmup, --lr-decay-steps = --steps, --min-lr = lr/10)."""
    if it < a.warmup:
        return a.lr * (it + 1) / (a.warmup + 1)
    if it > a.steps:
        return MIN_LR
    ratio = (it - a.warmup) / (a.steps - a.warmup)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - MIN_LR)


class SdpaAttention(CausalSelfSkipLayerAttention):
    """gpt_ref's attention through the fused kernel (scores and softmax in fp32 under autocast,
    as FlashAttention and skiplm's tensor-core kernels keep them); no SLA, no dropout."""

    def forward(self, x, kv_store):
        B, T, C = x.size()
        H = self.cfg.n_head
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:                               # PyTorch 1.13 (the CPU runs): its composite SDPA
            y = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def torch_run(w0, md, toks, bf16):
    cfg = config_from_metadata(md)
    assert cfg.n_skip_layer == 0 and cfg.dropout == 0, "a model without SLA or dropout"
    model = GPT(cfg)
    model.load_from_file(w0)
    model.to(a.device)
    if bf16:
        for blk in model.transformer.h:
            blk.attn.__class__ = SdpaAttention
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=BETAS, eps=1e-8)
    tt = torch.from_numpy(toks.astype(np.int64)).to(a.device)
    B, T, losses = a.batch, a.seq, []
    for s in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = get_lr(s)
        x = torch.stack([tt[(s * B + b) * T:(s * B + b) * T + T] for b in range(B)])
        y = torch.stack([tt[(s * B + b) * T + 1:(s * B + b) * T + T + 1] for b in range(B)])
        with torch.autocast(device_type="cuda" if a.device.startswith("cuda") else "cpu", dtype=torch.bfloat16,
                            enabled=bf16):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    return losses


def skiplm_run(wpath, tmp, bf16):
    out = os.path.join(tmp, "bf16" if bf16 else "fp32")
    cmd = [a.skiplm, "train", "--train", a.train, "--init", wpath, "--out", out, "--shuffle", "0",
           "--steps", str(a.steps), "--batch", str(a.batch), "--seq", str(a.seq), "--lr", str(a.lr),
           "--min-lr", str(MIN_LR), "--warmup", str(a.warmup), "--lr-decay-steps", str(a.steps),
           "--weight-decay", str(WD), "--beta1", str(BETAS[0]), "--beta2", str(BETAS[1]), "--grad-clip", str(CLIP),
           "--eval-every", "0", "--ckpt-every", "0", "--device", a.device.split(":")[0]] + (["--bf16"] if bf16 else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"skiplm train failed: {r.stderr.strip()[-500:]}")
    return [json.loads(line)["loss"] for line in open(os.path.join(out, "log.jsonl"))]


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    need = a.steps * a.batch * a.seq + 1
    version = int(np.fromfile(a.train, dtype="<i4", count=2)[1])
    if version not in (1, 2):
        sys.exit(f"{a.train}: shard version {version}: this script reads llm.c shards of version 1 (uint16) or 2 (uint32)")
    toks = np.fromfile(a.train, dtype="<u2" if version == 1 else "<u4", offset=1024)
    if len(toks) < need:
        sys.exit(f"{a.train}: {len(toks)} tokens, {need} needed for {a.steps} steps of {a.batch} x {a.seq}")
    toks = toks[:need]
    with tempfile.TemporaryDirectory() as tmp:
        wpath = os.path.join(tmp, "init.safetensors")
        r = subprocess.run([a.skiplm, "init", wpath, "--block_size", str(a.seq), "--seed", str(a.seed)] + a.model.split(),
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"skiplm init failed: {r.stderr.strip()}")
        w0, md = st.load_file(wpath)
        runs = {"skiplm fp32": skiplm_run(wpath, tmp, False), "torch fp32": torch_run(w0, md, toks, False)}
        if not a.no_bf16:
            runs["skiplm bf16"] = skiplm_run(wpath, tmp, True)
            runs["torch bf16"] = torch_run(w0, md, toks, True)
    names = list(runs)
    print("step " + "".join(f"{n:>13}" for n in names))
    for s in range(a.steps):
        if s == 0 or (s + 1) % a.every == 0:
            print(f"{s + 1:4d} " + "".join(f"{runs[n][s]:13.4f}" for n in names))
    first = min(10, a.steps)
    d0 = max(abs(x - y) / abs(y) for x, y in zip(runs["skiplm fp32"][:first], runs["torch fp32"][:first]))
    print(f"fp32: skiplm against PyTorch over the first {first} steps: max rel diff {d0:.2e}")
    half = a.steps // 2
    for who in ("skiplm", "torch"):
        if f"{who} bf16" in runs:
            d = [x - y for x, y in zip(runs[f"{who} bf16"][half:], runs[f"{who} fp32"][half:])]
            print(f"bf16 - fp32 ({who}), mean over steps {half + 1}-{a.steps}: {sum(d) / len(d):+.4f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(runs, f)


main()
