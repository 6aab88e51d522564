"""PyTorch side of the CPU training benchmark: the repo's reference model
(tests/ref/gpt_ref.py), fwd + bwd + AdamW with nanoGPT's parameter groups, random tokens,
median step time.

    /usr/bin/python3 bench/torch_bench.py --n_layer 6 --n_head 6 --n_embd 384 --vocab_size 65 --batch 8 --seq 256
    /usr/bin/python3 bench/torch_bench.py ... --autocast --attn sdpa     PyTorch's fastest CPU training path

--attn sdpa runs the attention through F.scaled_dot_product_attention where the PyTorch has it
(2.0 on), else through 1.13's F._scaled_dot_product_attention (is_causal, no weights returned; on
the CPU a composite of matmuls and softmax, not a fused kernel: 1.13 has none for the CPU);
--attn explicit (the default, what bench/compare.sh measures) is gpt_ref's own (q k^T,
masked_fill, softmax, @ v), which also runs SLA.
--autocast runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) (oneDNN's
bf16 GEMMs, PyTorch's CPU mixed precision); the backward and AdamW stay as they are.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "ref"))
import torch.nn.functional as F  # noqa: E402
from gpt_ref import GPT, GPTConfig, CausalSelfSkipLayerAttention  # noqa: E402


def sdpa(q, k, v):
    """causal attention through PyTorch's own scaled_dot_product_attention"""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]   # torch 1.13


class SdpaAttention(CausalSelfSkipLayerAttention):
    """gpt_ref's attention (no SLA, no dropout) with PyTorch's SDPA"""

    def forward(self, x, kv_store):
        B, T, C = x.size()
        H = self.cfg.n_head
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        return self.c_proj(sdpa(q, k, v).transpose(1, 2).reshape(B, T, C))


ap = argparse.ArgumentParser()
ap.add_argument("--n_layer", type=int, default=12)
ap.add_argument("--n_head", type=int, default=12)
ap.add_argument("--n_embd", type=int, default=768)
ap.add_argument("--vocab_size", type=int, default=50304)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--seq", type=int, default=64)
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--n_skip_layer", type=int, default=0)
ap.add_argument("--n_skip_head", type=int, default=0)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--autocast", action="store_true", help='forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)')
ap.add_argument("--attn", choices=("sdpa", "explicit"), default="explicit", help="the attention (see above)")
a = ap.parse_args()
torch.set_num_threads(a.threads)
cfg = GPTConfig(n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd, vocab_size=a.vocab_size, block_size=a.seq,
                n_skip_layer=a.n_skip_layer, n_skip_head=a.n_skip_head)
model = GPT(cfg)
if a.attn == "sdpa":
    if a.n_skip_layer and a.n_skip_head:
        sys.exit("torch_bench.py: --attn sdpa has no SLA; give --attn explicit")
    for blk in model.transformer.h:
        blk.attn.__class__ = SdpaAttention
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                        lr=6e-4, betas=(0.9, 0.95))
x = torch.randint(0, a.vocab_size, (a.batch, a.seq))
y = torch.randint(0, a.vocab_size, (a.batch, a.seq))
times, t_opt = [], []
for s in range(a.steps + 1):
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
        _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    t1 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    t2 = time.perf_counter()
    if s:
        times.append(t2 - t0)
        t_opt.append(t2 - t1)
med = statistics.median(times)
n = a.batch * a.seq
how = ("autocast bf16" if a.autocast else "fp32") + (", SDPA" if a.attn == "sdpa" else ", explicit attention")
print(f"torch {torch.__version__} threads {a.threads} ({how}): {med * 1e3:.1f} ms/step (median of {a.steps}), "
      f"{n / med:.0f} tokens/s, optimizer {statistics.median(t_opt) * 1e3:.1f} ms")
