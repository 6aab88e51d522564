"""PyTorch references of the Llama family, written from the formulas:

- MiniMind: minimind-style model; RoPE through the complex-number view of adjacent pairs
  (x[2j], x[2j+1]) rotated by pos * theta^(-2j/d); RMSNorm; GQA by repeating K/V heads;
  SwiGLU w2(silu(w1 x) * w3 x); no biases; lm_head tied to the embedding (or its own
  matrix: untied_head).
- HFLlama: the same model the way Hugging Face's Llama code computes it: rotate_half on
  halves (x[j], x[j + d/2]). A file with HF names holds q/k rows permuted for this
  convention; MiniMind un-permutes them on load.

Skip-Layer Attention in KV-head groups: layer l >= n_skip_layer takes the K/V of
its last n_skip_head / group KV heads from the OWN K/V of layer l - n_skip_layer.
"""
import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 2
    n_embd: int = 32
    block_size: int = 64
    vocab_size: int = 101
    ffn_hidden: int = 96
    norm_eps: float = 1e-6
    rope_theta: float = 1e6
    n_skip_layer: int = 0
    n_skip_head: int = 0
    rope_scaling: dict = None      # Hugging Face's config.json rope_scaling (linear, llama3)
    untied_head: int = 0           # 1: lm_head its own matrix (HF's tie_word_embeddings false)
    qkv_bias: int = 0              # 1: biases on q, k, v (Qwen2)

    def metadata(self):
        md = {"format": "skiplm", "family": "llama", "bias": "0"}
        for f in fields(self):
            if f.name != "rope_scaling":
                md[f.name] = str(getattr(self, f.name))
        rs = self.rope_scaling
        if rs:
            md["rope_scaling"] = rs.get("rope_type", rs.get("type"))
            for k, name in (("factor", "rope_factor"), ("low_freq_factor", "rope_low_freq_factor"),
                            ("high_freq_factor", "rope_high_freq_factor"),
                            ("original_max_position_embeddings", "rope_original_ctx")):
                if k in rs:
                    md[name] = str(rs[k])
        return md


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


def rope_inv_freq(dim, theta, scaling=None):
    """theta^(-2j/dim), rescaled as Hugging Face's rope_scaling says: "linear" divides by
    factor; "llama3" keeps wavelengths below original / high_freq_factor, divides those above
    original / low_freq_factor by factor, and blends in between (float32, as HF computes it)."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    if not scaling:
        return inv
    kind, factor = scaling.get("rope_type", scaling.get("type")), scaling["factor"]
    if kind == "linear":
        return inv / factor
    assert kind == "llama3", kind
    lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
    ctx = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > ctx / lo, inv / factor, inv)
    s = (ctx / wavelen - lo) / (hi - lo)
    smooth = (1 - s) * scaled / factor + s * scaled
    medium = ~(wavelen < ctx / hi) & ~(wavelen > ctx / lo)
    return torch.where(medium, smooth, scaled)


def precompute_freqs_cis(dim, end, theta, scaling=None):
    freqs = rope_inv_freq(dim, theta, scaling)
    t = torch.arange(end).float()
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)      # complex64 (end, dim/2)


def apply_rotary_emb_complex(xq, xk, freqs_cis):
    """minimind: adjacent pairs as complex numbers. x: (B, T, H, d)."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * fc).flatten(3).type_as(xq), torch.view_as_real(xk_ * fc).flatten(3).type_as(xk)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb_halves(xq, xk, cos, sin):
    """HF Llama: halves. x: (B, T, H, d); cos/sin (T, d)."""
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return xq * c + rotate_half(xq) * s, xk * c + rotate_half(xk) * s


def repeat_kv(x, n_rep):
    B, T, H, d = x.shape
    return x if n_rep == 1 else x[:, :, :, None, :].expand(B, T, H, n_rep, d).reshape(B, T, H * n_rep, d)


class Attention(nn.Module):
    def __init__(self, cfg, layer_idx, halves):
        super().__init__()
        self.cfg, self.layer_idx, self.halves = cfg, layer_idx, halves
        d = cfg.n_embd // cfg.n_head
        qb = bool(cfg.qkv_bias)
        self.q_proj = nn.Linear(cfg.n_embd, cfg.n_head * d, bias=qb)
        self.k_proj = nn.Linear(cfg.n_embd, cfg.n_kv_head * d, bias=qb)
        self.v_proj = nn.Linear(cfg.n_embd, cfg.n_kv_head * d, bias=qb)
        self.o_proj = nn.Linear(cfg.n_head * d, cfg.n_embd, bias=False)
        self.attn_core = None            # bf16_ref.to_bf16: softmax(q k^T * scale) v in bf16

    def forward(self, x, pos, kv_store):
        cfg = self.cfg
        B, T, _ = x.shape
        H, KV, d = cfg.n_head, cfg.n_kv_head, cfg.n_embd // cfg.n_head
        q = self.q_proj(x).view(B, T, H, d)
        k = self.k_proj(x).view(B, T, KV, d)
        v = self.v_proj(x).view(B, T, KV, d)
        if self.halves:
            q, k = apply_rotary_emb_halves(q, k, *pos)
        else:
            q, k = apply_rotary_emb_complex(q, k, pos)
        if getattr(cfg, "kv_bf16", False):               # skiplm's bf16 KV cache: K (after RoPE) and V in bf16
            k, v = k.bfloat16().float(), v.bfloat16().float()
        kv_store.append((k, v))                          # OWN K/V (rotated at their positions)
        nl, nh = cfg.n_skip_layer, cfg.n_skip_head
        if nl > 0 and nh > 0 and nl < cfg.n_layer and self.layer_idx >= nl:
            split = KV - nh // (H // KV)
            k_lo, v_lo = kv_store[self.layer_idx - nl]
            k = torch.cat([k[:, :, :split], k_lo[:, :, split:]], dim=2)
            v = torch.cat([v[:, :, :split], v_lo[:, :, split:]], dim=2)
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.attn_core is not None:
            return self.o_proj(self.attn_core(q, k, v, 1.0 / math.sqrt(d)).transpose(1, 2).reshape(B, T, -1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        att = att.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        y = (F.softmax(att.float(), dim=-1).type_as(q) @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)   # w1
        self.up_proj = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)     # w3
        self.down_proj = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)   # w2

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg, i, halves):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.self_attn = Attention(cfg, i, halves)
        self.post_attention_layernorm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, pos, kv_store):
        x = x + self.self_attn(self.input_layernorm(x), pos, kv_store)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg, halves):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList([Layer(cfg, i, halves) for i in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.n_embd, cfg.norm_eps)


class Llama(nn.Module):
    """halves=False: MiniMind (complex view of pairs); halves=True: HF Llama (rotate_half)."""

    def __init__(self, cfg, halves=False):
        super().__init__()
        self.cfg, self.halves = cfg, halves
        self.model = Inner(cfg, halves)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if not cfg.untied_head:
            self.lm_head.weight = self.model.embed_tokens.weight
        d = cfg.n_embd // cfg.n_head
        self.freqs_cis = precompute_freqs_cis(d, cfg.block_size, cfg.rope_theta, cfg.rope_scaling)
        inv = rope_inv_freq(d, cfg.rope_theta, cfg.rope_scaling)
        ang = torch.outer(torch.arange(cfg.block_size).float(), inv)
        emb = torch.cat((ang, ang), dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()

    def forward(self, idx, targets=None):
        B, T = idx.shape
        pos = (self.cos[:T], self.sin[:T]) if self.halves else self.freqs_cis[:T]
        x = self.model.embed_tokens(idx)
        kv_store = []
        for layer in self.model.layers:
            x = layer(x, pos, kv_store)
        logits = self.lm_head(self.model.norm(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def randomize(self, seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(".bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
                elif p.dim() == 1:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))


def pairs_to_halves(w, n_heads):
    """Permute q/k projection rows (weights, or a bias's entries) from the adjacent-pair layout
    to HF's half layout."""
    w2 = w if w.dim() == 2 else w[:, None]
    out_dim, C = w2.shape
    d = out_dim // n_heads
    return w2.view(n_heads, d // 2, 2, C).transpose(1, 2).reshape(w.shape)


def halves_to_pairs(w, n_heads):
    w2 = w if w.dim() == 2 else w[:, None]
    out_dim, C = w2.shape
    d = out_dim // n_heads
    return w2.view(n_heads, 2, d // 2, C).transpose(1, 2).reshape(w.shape)


def to_file(model):
    """HF names and HF's q/k row order (from a MiniMind model)."""
    cfg = model.cfg
    out = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight" and not cfg.untied_head:
            continue
        v = v.detach().contiguous()
        if k.endswith(("q_proj.weight", "q_proj.bias")):
            v = pairs_to_halves(v, cfg.n_head).contiguous()
        elif k.endswith(("k_proj.weight", "k_proj.bias")):
            v = pairs_to_halves(v, cfg.n_kv_head).contiguous()
        out[k] = v
    return out


def load_file_into(model, tensors):
    """Load HF-named tensors; MiniMind un-permutes q/k to its pair layout."""
    cfg = model.cfg
    sd = {}
    for k, v in tensors.items():
        if not model.halves and k.endswith(("q_proj.weight", "q_proj.bias")):
            v = halves_to_pairs(v, cfg.n_head)
        elif not model.halves and k.endswith(("k_proj.weight", "k_proj.bias")):
            v = halves_to_pairs(v, cfg.n_kv_head)
        sd[k] = v
    if not cfg.untied_head:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd)


def config_from_metadata(md):
    kw = {}
    for f in fields(LlamaConfig):
        if f.name in md and f.name != "rope_scaling":
            kw[f.name] = float(md[f.name]) if f.type in (float, "float") else int(md[f.name])
    if md.get("rope_scaling") in ("linear", "llama3"):
        kw["rope_scaling"] = {"rope_type": md["rope_scaling"], "factor": float(md["rope_factor"]),
                              "low_freq_factor": float(md["rope_low_freq_factor"]),
                              "high_freq_factor": float(md["rope_high_freq_factor"]),
                              "original_max_position_embeddings": int(md["rope_original_ctx"])}
    return LlamaConfig(**kw)
