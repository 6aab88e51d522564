"""bf16 mixed precision as skiplm's CPU engine defines it (docs/training.md, "bf16 mixed
precision"), applied to the PyTorch references (gpt_ref.py, llama_ref.py) by replacing the
forward of every nn.Linear: each matrix product multiplies operands rounded to bf16 (round to
nearest even, torch's .bfloat16()) and sums in float64 here (skiplm: fp32), with the result in
fp32; the backward rounds dY once for dX = dY W and dW = dY^T X. The MLP's up-projection (c_fc,
gate_proj, up_proj) writes its output rounded to bf16 (the pre-activation is stored in bf16), and
its bias gradient sums that rounded dY. The attention's matrix products multiply bf16-rounded
operands too (attention_bf16 below, src/core/attention_bf16.c), with its softmax statistics in
fp32. Everything else (norms, softmax, loss) stays fp32, as in skiplm.
"""
import math

import torch
import torch.nn as nn


def bf16(t):
    """t rounded to bf16 (nearest even), back in t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


def mm(a, b):
    """a @ b of bf16-exact fp32 tensors, summed in float64, rounded once to fp32."""
    return (a.double() @ b.double()).float()


class Bf16Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, round_out):
        xr, wr = bf16(x), bf16(w)
        ctx.save_for_backward(xr, wr)
        ctx.has_b, ctx.round_out = b is not None, round_out
        y = mm(xr, wr.t())
        if b is not None:
            y = y + b
        return bf16(y) if round_out else y

    @staticmethod
    def backward(ctx, dy):
        xr, wr = ctx.saved_tensors
        dyr = bf16(dy)
        dx = mm(dyr, wr)
        dw = mm(dyr.reshape(-1, dyr.shape[-1]).t(), xr.reshape(-1, xr.shape[-1]))
        db = None
        if ctx.has_b:
            db = (dyr if ctx.round_out else dy).reshape(-1, dy.shape[-1]).sum(0)
        return dx, dw, db, None


ROUND_OUT = ("c_fc", "gate_proj", "up_proj")


class Bf16Attention(torch.autograd.Function):
    """Causal or masked attention as skiplm computes it with sk_attn.bf16 set: every matrix
    product multiplies operands rounded to bf16 (sums here in float64, skiplm's in fp32):
      S = scale (q . k) (fp32, masked: -inf)
      forward   O = (bf16(E) v) / l, E = exp(S - c), l = rowsum E, lse = c + log l, where c is
                an integer multiple of ln 2 at the row's max: rounding commutes with a power of
                two, so any such c gives the same rounded weights
      backward  P = exp(S - lse), dP = dO . v, D = rowsum(dO * O), dS = P (dP - D),
                dV = bf16(P)^T dO, dQ = scale bf16(dS) k, dK = scale bf16(dS)^T q
    q, k, v (B, H, L, D), k and v already repeated over a GQA group (autograd sums the group's
    gradients); allowed (Lq, Lk) bool, True = may attend; every row must allow a key."""

    @staticmethod
    def forward(ctx, q, k, v, allowed, scale):
        qr, kr, vr = bf16(q).double(), bf16(k).double(), bf16(v).double()
        s = ((qr @ kr.transpose(-2, -1)).float() * scale).masked_fill(~allowed, float("-inf")).double()
        c = torch.ceil(s.amax(-1, keepdim=True) / math.log(2)) * math.log(2)
        e = torch.exp(s - c)
        l = e.sum(-1, keepdim=True)
        o = ((bf16(e) @ vr) / l).float()
        ctx.save_for_backward(qr, kr, vr, s, c + torch.log(l), o)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, do):
        qr, kr, vr, s, lse, o = ctx.saved_tensors
        p = torch.exp(s - lse)
        dor = bf16(do).double()
        dp = dor @ vr.transpose(-2, -1)
        di = (do.double() * o.double()).sum(-1, keepdim=True)
        ds = p * (dp - di)
        dv = bf16(p).transpose(-2, -1) @ dor
        dsr = bf16(ds)
        dq = ctx.scale * (dsr @ kr)
        dk = ctx.scale * (dsr.transpose(-2, -1) @ qr)
        return dq.float(), dk.float(), dv.float(), None, None


def attention_bf16(q, k, v, scale):
    """Causal Bf16Attention (the models' attn_core hook)."""
    T = q.shape[-2]
    return Bf16Attention.apply(q, k, v, torch.tril(torch.ones(T, T, dtype=torch.bool)), scale)


def to_bf16(model):
    """Make every nn.Linear and every attention of model compute as skiplm's bf16 mode does (in
    place): the attention modules of gpt_ref.py and llama_ref.py call attn_core when it is set."""
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            ro = name.split(".")[-1] in ROUND_OUT
            mod.forward = (lambda x, mod=mod, ro=ro: Bf16Linear.apply(x, mod.weight, mod.bias, ro))
        elif hasattr(mod, "attn_core"):
            mod.attn_core = attention_bf16
    return model
