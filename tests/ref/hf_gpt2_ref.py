"""GPT-2 as Hugging Face's transformers computes it (GPT2LMHeadModel, eager attention), over
a state dict with HF's own names and layout, written from the model's definition rather
than from skiplm's conventions:

  - names of GPT2Model ("h.0.attn.c_attn.weight", "wte.weight", ...); GPT2LMHeadModel's
    files put "transformer." in front and may add "lm_head.weight" (tied to wte);
  - Conv1D layers: weight (in, out), y = addmm(b, x, W), i.e. x @ W + b;
  - the causal mask as a bool buffer "h.N.attn.bias" of (1, 1, n_positions, n_positions)
    where a file has it (else built), masked scores set to the dtype's minimum;
  - activation_function "gelu_new" (tanh approximation) or "gelu" (erf), LayerNorm with
    layer_norm_epsilon, logits = ln_f(x) @ wte^T (or @ lm_head.weight^T where config.json
    says tie_word_embeddings: false).

    params = random_params(cfg, seed)        # dict name -> tensor (HF names, no prefix)
    logits, loss = forward(params, cfg, idx, targets)
"""
import math

import torch
import torch.nn.functional as F


def conv1d(x, w, b, rin=None):
    """HF's Conv1D: weight (in, out); rin: applied to the input first (e.g. rounding it to bf16)."""
    if rin is not None:
        x = rin(x)
    shape = x.shape[:-1] + (w.shape[1],)
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(shape)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def random_params(cfg, seed):
    """cfg: dict with HF's config.json keys. Returns GPT2Model's state dict, buffers included."""
    g = torch.Generator().manual_seed(seed)
    C, L, P, V = cfg["n_embd"], cfg["n_layer"], cfg["n_positions"], cfg["vocab_size"]
    inner = cfg.get("n_inner") or 4 * C

    def rnd(*shape, base=0.0, scale=0.1):
        return base + scale * torch.randn(*shape, generator=g)

    p = {"wte.weight": rnd(V, C), "wpe.weight": rnd(P, C)}
    mask = torch.tril(torch.ones(P, P, dtype=torch.bool)).view(1, 1, P, P)
    for l in range(L):
        h = f"h.{l}."
        p[h + "ln_1.weight"], p[h + "ln_1.bias"] = rnd(C, base=1.0), rnd(C)
        p[h + "attn.bias"] = mask.clone()
        p[h + "attn.masked_bias"] = torch.tensor(-1e4)
        p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"] = rnd(C, 3 * C), rnd(3 * C)
        p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"] = rnd(C, C), rnd(C)
        p[h + "ln_2.weight"], p[h + "ln_2.bias"] = rnd(C, base=1.0), rnd(C)
        p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"] = rnd(C, inner), rnd(inner)
        p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"] = rnd(inner, C), rnd(C)
    p["ln_f.weight"], p["ln_f.bias"] = rnd(C, base=1.0), rnd(C)
    return p


def forward(p, cfg, idx, targets=None, rin=None):
    """rin: a function applied to every matrix product's input (None: none), as skiplm's bf16
    decoding rounds them: lambda t: t.bfloat16().float()."""
    C, H = cfg["n_embd"], cfg["n_head"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    act = {"gelu_new": gelu_new, "gelu": F.gelu}[cfg.get("activation_function", "gelu_new")]
    B, T = idx.shape
    d = C // H
    x = p["wte.weight"][idx] + p["wpe.weight"][torch.arange(T)]
    for l in range(cfg["n_layer"]):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps)
        q, k, v = conv1d(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"], rin).split(C, dim=2)
        q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        # the mask buffer, as older files store it; newer transformers builds it (not persistent)
        mask = p.get(h + "attn.bias", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))
        w = torch.where(mask[:, :, :T, :T], w, torch.tensor(torch.finfo(w.dtype).min))
        y = torch.matmul(torch.softmax(w, dim=-1), v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"], rin)
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps)
        m = act(conv1d(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"], rin))
        x = x + conv1d(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"], rin)
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps)
    untied = cfg.get("tie_word_embeddings", True) is False       # GPT2Config's default: tied
    logits = (rin(x) if rin is not None else x) @ (p["lm_head.weight"] if untied else p["wte.weight"]).t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
    return logits, loss
