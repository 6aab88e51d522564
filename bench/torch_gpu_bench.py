"""The GPU yardstick for skiplm's CUDA trainer (docs/cuda.md): the same GPT-2 training step in
PyTorch, written the way nanoGPT writes it (pre-LayerNorm blocks, fused c_attn, exact-erf GELU,
tied lm_head, padded vocabulary 50304), bf16 autocast, fused causal attention
(F.scaled_dot_product_attention: FlashAttention on the GPU), fused AdamW, gradient clipping,
optionally torch.compile. Random tokens; median step time with the device synchronised.

    python3 bench/torch_gpu_bench.py --batch 8 --seq 1024 [--compile] [--fp32]

Prints one line: "torch: B=8 T=1024: X ms/step (median of N), Y tokens/s, ..." (a GPU with
PyTorch >= 2.0; on the project's CPU machines this script is not run).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--n_layer", type=int, default=12)
ap.add_argument("--n_head", type=int, default=12)
ap.add_argument("--n_embd", type=int, default=768)
ap.add_argument("--vocab_size", type=int, default=50304)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--seq", type=int, default=1024)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--compile", action="store_true")
ap.add_argument("--fp32", action="store_true", help="no autocast (TF32 matmuls allowed)")
a = ap.parse_args()


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.manual_seed(1337)
model = GPT(a.n_layer, a.n_head, a.n_embd, a.vocab_size, a.seq).to(dev)
decay = [p for p in model.parameters() if p.dim() >= 2]
other = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
step_fn = torch.compile(model) if a.compile else model
x = torch.randint(0, 50257, (a.batch, a.seq), device=dev)
y = torch.randint(0, 50257, (a.batch, a.seq), device=dev)


def step():
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=not a.fp32):
        loss = step_fn(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


t0 = time.time()
for _ in range(a.warmup):
    step()
torch.cuda.synchronize()
warm_s = time.time() - t0
times = []
for _ in range(a.steps):
    t = time.perf_counter()
    loss = step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
ms = statistics.median(times) * 1e3
print(f"torch: B={a.batch} T={a.seq}: {ms:.2f} ms/step (median of {a.steps}), {a.batch * a.seq / ms * 1e3:.0f} tokens/s, "
      f"{'fp32/TF32' if a.fp32 else 'bf16 autocast'}, {'torch.compile' if a.compile else 'eager'}, "
      f"torch {torch.__version__}, {torch.cuda.get_device_name()}, loss {loss.item():.4f}, warm-up {warm_s:.1f} s, "
      f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
