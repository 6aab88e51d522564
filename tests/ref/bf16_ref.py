"""bf16 mixed precision as skiplm's CPU engine defines it (docs/training.md, "bf16 mixed
precision"), applied to the PyTorch references (gpt_ref.py, llama_ref.py) by replacing the
forward of every nn.Linear: each matrix product multiplies operands rounded to bf16 (round to
nearest even, torch's .bfloat16()) and sums in float64 here (skiplm: fp32), with the result in
fp32; the backward rounds dY once for dX = dY W and dW = dY^T X. The MLP's up-projection (c_fc,
gate_proj, up_proj) writes its output rounded to bf16 (the pre-activation is stored in bf16), and
its bias gradient sums that rounded dY. Everything else (norms, attention, softmax, loss) stays
fp32, as in skiplm.
"""
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


def to_bf16(model):
    """Make every nn.Linear of model compute as skiplm's bf16 mode does (in place)."""
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            ro = name.split(".")[-1] in ROUND_OUT
            mod.forward = (lambda x, mod=mod, ro=ro: Bf16Linear.apply(x, mod.weight, mod.bias, ro))
    return model
