"""PyTorch side of the CPU training benchmark: the repo's reference model
(tests/ref/gpt_ref.py, explicit attention as Debian's PyTorch 1.13 has no fused SDPA),
fwd + bwd + AdamW with nanoGPT's parameter groups, random tokens, median step time.

    /usr/bin/python3 bench/torch_bench.py --n_layer 6 --n_head 6 --n_embd 384 --vocab_size 65 --batch 8 --seq 256
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "ref"))
from gpt_ref import GPT, GPTConfig  # noqa: E402

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
a = ap.parse_args()
torch.set_num_threads(a.threads)
cfg = GPTConfig(n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd, vocab_size=a.vocab_size, block_size=a.seq,
                n_skip_layer=a.n_skip_layer, n_skip_head=a.n_skip_head)
model = GPT(cfg)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                        lr=6e-4, betas=(0.9, 0.95))
x = torch.randint(0, a.vocab_size, (a.batch, a.seq))
y = torch.randint(0, a.vocab_size, (a.batch, a.seq))
times, t_opt = [], []
for s in range(a.steps + 1):
    t0 = time.perf_counter()
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
print(f"torch {torch.__version__} threads {a.threads}: {med * 1e3:.1f} ms/step (median of {a.steps}), "
      f"{n / med:.0f} tokens/s, optimizer {statistics.median(t_opt) * 1e3:.1f} ms")
