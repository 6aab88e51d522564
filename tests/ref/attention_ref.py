"""PyTorch references for skiplm's attention (PyTorch's SDPA contract).

math_sdpa   : explicit softmax(q k^T * scale + mask) v, any dtype, with optional fixed
              dropout keep-mask; used in float64 as the "exact" reference.
torch_sdpa  : Debian PyTorch 1.13's private F._scaled_dot_product_attention (float32),
              with GQA (repeat_interleave of K/V heads) and an explicit scale folded into q.
gqa_mha     : nn.MultiheadAttention-style module with n_kv_head < n_head, built from
              torch ops (nn.MultiheadAttention itself has no GQA).
"""
import math
import torch
import torch.nn.functional as F


def repeat_kv(x, group):
    """(B, Hkv, L, D) -> (B, Hkv*group, L, D): query head h reads kv head h // group."""
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def math_sdpa(q, k, v, mask=None, is_causal=False, scale=None, keep=None, p=0.0, causal_offset=0):
    """q (B,H,Lq,D), k/v (B,Hkv,Lk,D), mask bool broadcastable to (B,H,Lq,Lk), True = attend.
    keep: optional bool tensor (B,H,Lq,Lk) of kept dropout positions (scaled by 1/(1-p)).
    Fully masked rows give NaN, as in PyTorch."""
    if mask is not None and is_causal:
        raise RuntimeError("Explicit attn_mask should not be set when is_causal=True")
    H, Hkv = q.shape[1], k.shape[1]
    k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)
    Lq, Lk = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) * (scale if scale else 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        i = torch.arange(Lq).unsqueeze(1)
        j = torch.arange(Lk).unsqueeze(0)
        mask = j <= i + causal_offset
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    if keep is not None:
        w = w * keep.to(w.dtype) / (1.0 - p)
    return w @ v, w


def torch_sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    """PyTorch's own math path (float32). An explicit scale is folded into q (the private
    function of 1.13 always uses 1/sqrt(D))."""
    H, Hkv, D = q.shape[1], k.shape[1], q.shape[-1]
    if scale:
        q = q * (scale * math.sqrt(D))
    return F._scaled_dot_product_attention(q, repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv),
                                           attn_mask=mask, dropout_p=0.0,
                                           need_attn_weights=True, is_causal=is_causal)


def gqa_mha(xq, xkv, wq, wk, wv, wo, bq, bk, bv, bo, H, Hkv, mask=None, is_causal=False):
    """Batch-first MHA with grouped K/V heads; mask True = attend (SDPA meaning)."""
    B, Lq, _ = xq.shape
    Lk = xkv.shape[1]
    D = wq.shape[0] // H
    q = F.linear(xq, wq, bq).view(B, Lq, H, D).transpose(1, 2)
    k = F.linear(xkv, wk, bk).view(B, Lk, Hkv, D).transpose(1, 2)
    v = F.linear(xkv, wv, bv).view(B, Lk, Hkv, D).transpose(1, 2)
    att, w = math_sdpa(q, k, v, mask=mask, is_causal=is_causal)
    return F.linear(att.transpose(1, 2).reshape(B, Lq, H * D), wo, bo), w
