"""PyTorch reference of nanoGPT with the paper's Skip-Layer Attention (Chen et al.).

Written for Debian's PyTorch 1.13 (no fused SDPA): attention is explicit math.
CausalSelfSkipLayerAttention follows the paper's listing: every layer computes its own
K/V for all heads and stores them; a layer l >= n_skip_layer replaces the K/V of its last
n_skip_head heads by the OWN K/V of layer l - n_skip_layer (so borrowing never chains).

Weights are exchanged with skiplm through safetensors (tests/ref/st.py), nanoGPT names,
config in the metadata, lm_head tied to wte (or its own matrix: untied_head).
"""
import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    block_size: int = 64
    vocab_size: int = 101
    bias: bool = True
    dropout: float = 0.0
    gelu: str = "erf"          # "erf" (nanoGPT) or "tanh" (GPT-2)
    n_skip_layer: int = 0
    n_skip_head: int = 0
    norm_eps: float = 1e-5
    sinusoidal: bool = False   # fixed sinusoidal positions instead of learned wpe
    relu: bool = False         # ReLU MLP instead of GELU
    routing: str = ""          # skiplm's general routing string (metadata only; see route below)
    untied_head: bool = False  # lm_head its own matrix instead of wte

    def metadata(self):
        md = {"format": "skiplm", "family": "gpt2"}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "routing" and not v:
                continue
            md[f.name] = str(int(v)) if isinstance(v, bool) else str(v)
        return md


def sinusoidal_table(max_pos, d):
    """The seed's formula: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    pos = torch.arange(max_pos, dtype=torch.float64)[:, None]
    div = torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(max_pos, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe.float()


class LayerNorm(nn.Module):
    def __init__(self, n, bias, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class CausalSelfSkipLayerAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg, self.layer_idx = cfg, layer_idx
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.attn_core = None            # bf16_ref.to_bf16: softmax(q k^T * scale) v in bf16

    def forward(self, x, kv_store):
        cfg = self.cfg
        B, T, C = x.size()
        H, hs = cfg.n_head, C // cfg.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, hs).transpose(1, 2)
        k = k.view(B, T, H, hs).transpose(1, 2)
        v = v.view(B, T, H, hs).transpose(1, 2)
        if getattr(cfg, "kv_bf16", False):           # skiplm's bf16 KV cache: K and V stored rounded to bf16
            k, v = k.bfloat16().float(), v.bfloat16().float()
        kv_store.append((k, v))                      # this layer's OWN K/V
        nl, nh = cfg.n_skip_layer, cfg.n_skip_head
        route = getattr(cfg, "route", None)          # explicit table: route[l][h] = source layer
        if route is not None:
            src = route[self.layer_idx]
            k = torch.stack([kv_store[src[h]][0][:, h] for h in range(H)], dim=1)
            v = torch.stack([kv_store[src[h]][1][:, h] for h in range(H)], dim=1)
        elif nl > 0 and nh > 0 and nl < cfg.n_layer and self.layer_idx >= nl:
            split = H - nh
            k_lo, v_lo = kv_store[self.layer_idx - nl]
            k = torch.cat([k[:, :split], k_lo[:, split:]], dim=1)
            v = torch.cat([v[:, :split], v_lo[:, split:]], dim=1)
        if self.attn_core is not None:
            y = self.attn_core(q, k, v, 1.0 / math.sqrt(hs)).transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)
        self.approx = "tanh" if cfg.gelu == "tanh" else "none"

        self.relu = cfg.relu

    def forward(self, x):
        h = self.c_fc(x)
        h = F.relu(h) if self.relu else F.gelu(h, approximate=self.approx)
        return self.dropout(self.c_proj(h))


class Block(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.bias, cfg.norm_eps)
        self.attn = CausalSelfSkipLayerAttention(cfg, layer_idx)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.bias, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, kv_store):
        x = x + self.attn(self.ln_1(x), kv_store)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            **({} if cfg.sinusoidal else {"wpe": nn.Embedding(cfg.block_size, cfg.n_embd)}),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)]),
            ln_f=LayerNorm(cfg.n_embd, cfg.bias, cfg.norm_eps),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if not cfg.untied_head:
            self.lm_head.weight = self.transformer.wte.weight   # tied, as nanoGPT

    def forward(self, idx, targets=None):
        B, T = idx.size()
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        pe = sinusoidal_table(self.cfg.block_size, self.cfg.n_embd)[:T] if self.cfg.sinusoidal else self.transformer.wpe(pos)
        x = self.transformer.drop(self.transformer.wte(idx) + pe)
        kv_store = []
        for block in self.transformer.h:
            x = block(x, kv_store)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def randomize(self, seed):
        """Random weights with every parameter away from its default (norms and biases too),
        so a test exercises all of them."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                elif p.dim() == 1:
                    p.copy_(0.05 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))

    def state_for_file(self):
        """nanoGPT names, lm_head dropped when tied."""
        return {k: v.detach().contiguous() for k, v in self.state_dict().items()
                if k != "lm_head.weight" or self.cfg.untied_head}

    def load_from_file(self, tensors):
        sd = dict(tensors)
        if not self.cfg.untied_head:
            sd["lm_head.weight"] = sd["transformer.wte.weight"]
        self.load_state_dict(sd)


def config_from_metadata(md):
    kw = {}
    for f in fields(GPTConfig):
        if f.name in md:
            v = md[f.name]
            kw[f.name] = (bool(int(v)) if f.type in (bool, "bool") else
                          int(v) if f.type in (int, "int") else
                          float(v) if f.type in (float, "float") else v)
    return GPTConfig(**kw)
