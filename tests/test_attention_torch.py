"""skiplm attention vs PyTorch 1.13 (float32) and an explicit float64 math reference.

Each case writes raw inputs to a temp dir, runs build/tests/tool_attn (the fused path,
and the reference path with ref=1), and compares outputs and gradients.
Tolerances: SDPA forward and gradients rtol=1e-5, atol=1e-6, against float32 torch
autograd and the float64 reference. MHA forward rtol=1e-5, atol=1e-6; MHA input and
parameter gradients rtol=1e-5, atol=1e-5: they are float32 GEMM sums over B*L tokens on
both sides (observed max differences 1-5e-6), and d bk is 0 in exact arithmetic (softmax
is shift-invariant) so both sides only report cancellation noise.
"""
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import BUILD, check, finish  # noqa: E402
from attention_ref import math_sdpa, torch_sdpa, gqa_mha, repeat_kv  # noqa: E402

TOOL = os.path.join(BUILD, "tests", "tool_attn")
torch.manual_seed(0)
FWD = dict(rtol=1e-5, atol=1e-6)
GRAD = dict(rtol=1e-5, atol=1e-6)


def write(d, name, t):
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    elif t.dtype != torch.uint8:
        t = t.to(torch.float32)
    with open(os.path.join(d, name + ".bin"), "wb") as f:
        f.write(t.numpy().tobytes())


def read(d, name, shape):
    with open(os.path.join(d, name + ".bin"), "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(shape).clone()


def run_tool(d, params):
    with open(os.path.join(d, "params.txt"), "w") as f:
        f.write(params + "\n")
    r = subprocess.run([TOOL, d], capture_output=True, text=True)
    if r.returncode == 3:
        with open(os.path.join(d, "error.txt")) as f:
            return f.read()
    if r.returncode != 0:
        raise RuntimeError("tool_attn failed: %s" % r.stderr)
    return None


def sk_sdpa(q, k, v, dout, mask=None, causal=False, off=0, scale=0.0, p=0.0, training=0,
            seed=0, weights=0, avg=0, layout=0, ref=0):
    """q (B,H,Lq,D), k/v (B,Hkv,Lk,D); mask a bool tensor of rank 2/3/4 in skiplm's layout.
    Returns dict(out, lse, w, dq, dk, dv) as (B,H,...) tensors, or the error string."""
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    with tempfile.TemporaryDirectory() as d:
        lay = (lambda t: t.transpose(1, 2)) if layout == 1 else (lambda t: t)
        write(d, "q", lay(q)); write(d, "k", lay(k)); write(d, "v", lay(v)); write(d, "dout", lay(dout))
        s = [0, 0, 0, 0]
        rank = 0
        if mask is not None:
            rank = mask.dim()
            s[:rank] = list(mask.shape)
            write(d, "mask", mask)
        err = run_tool(d, "sdpa %d %d %d %d %d %d %d %d %d %r %r %d %d %d %d %d %d %d %d %d %d" % (
            B, H, Hkv, Lq, Lk, D, layout, int(causal), off, float(scale), float(p), training, seed,
            weights, avg, rank, s[0], s[1], s[2], s[3], ref))
        if err is not None:
            return err
        unl = (lambda t: t.transpose(1, 2).contiguous()) if layout == 1 else (lambda t: t)
        bl = lambda h, L: (B, L, h, D) if layout == 1 else (B, h, L, D)
        r = dict(out=unl(read(d, "out", bl(H, Lq))), lse=read(d, "lse", (B, H, Lq)),
                 dq=unl(read(d, "dq", bl(H, Lq))), dk=unl(read(d, "dk", bl(Hkv, Lk))),
                 dv=unl(read(d, "dv", bl(Hkv, Lk))))
        if weights:
            r["w"] = read(d, "w", (B, Lq, Lk) if avg else (B, H, Lq, Lk))
        return r


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


def cmp(name, ours, theirs, tol):
    ok = ours.shape == theirs.shape and torch.allclose(ours.double(), theirs.double(), **tol)
    check(ok, "%s maxdiff %.2e" % (name, maxdiff(ours, theirs) if ours.shape == theirs.shape else float("inf")))


def to_bhlq(mask, B, H, Lq, Lk):
    """skiplm mask (rank 2 (Lq,Lk), rank 3 (B,Lq,Lk), rank 4) -> torch bool broadcastable
    to (B,H,Lq,Lk). skiplm's rank 3 is (B, Lq, Lk), i.e. torch's mask[:, None]."""
    if mask is None:
        return None
    if mask.dim() == 3:
        return mask[:, None]
    return mask


def sdpa_case(name, B, H, Hkv, Lq, Lk, D, mask=None, causal=False, scale=0.0, layout=0, weights=0, avg=0):
    q = torch.randn(B, H, Lq, D)
    k = torch.randn(B, Hkv, Lk, D)
    v = torch.randn(B, Hkv, Lk, D)
    dout = torch.randn(B, H, Lq, D)
    tm = to_bhlq(mask, B, H, Lq, Lk)
    # PyTorch float32: its own SDPA with autograd
    qt, kt, vt = (x.clone().requires_grad_() for x in (q, k, v))
    if tm is not None and tm.dim() == 4 or tm is None or H == 1:
        out_t, w_t = torch_sdpa(qt, kt, vt, mask=tm, is_causal=causal, scale=scale or None)
    else:
        out_t, w_t = torch_sdpa(qt, kt, vt, mask=tm.expand(B, H, Lq, Lk), is_causal=causal, scale=scale or None)
    out_t.backward(dout)
    # explicit float64 math
    q6, k6, v6 = (x.double().requires_grad_() for x in (q, k, v))
    out_6, w_6 = math_sdpa(q6, k6, v6, mask=tm, is_causal=causal, scale=scale or None)
    out_6.backward(dout.double())
    for ref in (0, 1):
        path = "ref" if ref else "fused"
        r = sk_sdpa(q, k, v, dout, mask=mask, causal=causal, scale=scale, layout=layout,
                    weights=weights, avg=avg, ref=ref)
        if isinstance(r, str):
            check(False, "%s [%s]: %s" % (name, path, r))
            continue
        cmp("%s [%s] out vs torch SDPA" % (name, path), r["out"], out_t.detach(), FWD)
        cmp("%s [%s] out vs float64 math" % (name, path), r["out"], out_6.detach(), FWD)
        s6 = q6.detach() @ repeat_kv(k6.detach(), H // Hkv).transpose(-2, -1) * (scale or 1 / math.sqrt(D))
        if causal:
            s6 = s6.masked_fill(torch.ones(Lq, Lk, dtype=torch.bool).tril().logical_not(), float("-inf"))
        elif tm is not None:
            s6 = s6.masked_fill(~tm, float("-inf"))
        cmp("%s [%s] lse vs logsumexp" % (name, path), r["lse"], torch.logsumexp(s6, -1), FWD)
        if weights:
            wt = w_t.detach().mean(1) if avg else w_t.detach()
            cmp("%s [%s] weights%s vs torch" % (name, path, " (avg)" if avg else ""), r["w"], wt, FWD)
        for g, gt, g6 in (("dq", qt.grad, q6.grad), ("dk", kt.grad, k6.grad), ("dv", vt.grad, v6.grad)):
            cmp("%s [%s] %s vs torch autograd" % (name, path, g), r[g], gt, GRAD)
            cmp("%s [%s] %s vs float64 autograd" % (name, path, g), r[g], g6, GRAD)


def seed_cases():
    # The seed's cases, (B, L, D) = H 1
    sdpa_case("seed B=2 L=5 D=8 unmasked", 2, 1, 1, 5, 5, 8)
    sdpa_case("seed B=2 L=6 D=8 causal", 2, 1, 1, 6, 6, 8, causal=True)
    pad = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    sdpa_case("seed padding mask (B,1,Lk)", 2, 1, 1, 6, 6, 8, mask=pad[:, None, :])
    # causal + mask: both raise, with PyTorch's message
    q = torch.randn(2, 1, 6, 8)
    r = sk_sdpa(q, q, q, q, mask=torch.ones(6, 6, dtype=torch.bool), causal=True)
    try:
        torch_sdpa(q, q, q, mask=torch.ones(6, 6, dtype=torch.bool), is_causal=True)
        terr = ""
    except RuntimeError as e:
        terr = str(e)
    check(r == "Explicit attn_mask should not be set when is_causal=True" and r in terr,
          "causal + mask error: skiplm %r, torch %r" % (r, terr))


def multihead_cases():
    sdpa_case("4-D B=2 H=3 L=7 D=16", 2, 3, 3, 7, 7, 16)
    sdpa_case("4-D Lq=5 != Lk=9, causal (top-left)", 2, 3, 3, 5, 9, 16, causal=True)
    sdpa_case("4-D Lq=9 != Lk=5, causal", 1, 2, 2, 9, 5, 8, causal=True, layout=1)
    m2 = torch.rand(6, 11) > 0.3
    m2[:, 0] = True
    sdpa_case("rank-2 mask (Lq,Lk)", 2, 3, 3, 6, 11, 8, mask=m2, weights=1)
    m3 = torch.rand(2, 6, 11) > 0.3
    m3[..., 1] = True
    sdpa_case("rank-3 mask (B,Lq,Lk)", 2, 3, 3, 6, 11, 8, mask=m3, weights=1, avg=1)
    m4 = torch.rand(2, 3, 6, 11) > 0.3
    m4[..., 2] = True
    sdpa_case("rank-4 mask (B,H,Lq,Lk), strided (B,L,H,D)", 2, 3, 3, 6, 11, 8, mask=m4, layout=1, weights=1)
    m4b = torch.rand(1, 3, 1, 11) > 0.3
    m4b[..., 0] = True
    sdpa_case("rank-4 broadcast mask (1,H,1,Lk)", 2, 3, 3, 6, 11, 8, mask=m4b)
    sdpa_case("explicit scale 0.3", 2, 2, 2, 7, 7, 8, scale=0.3, weights=1)
    sdpa_case("GQA H=4 Hkv=2", 2, 4, 2, 7, 9, 8, weights=1, avg=1)
    sdpa_case("MQA H=4 Hkv=1 causal strided", 2, 4, 1, 8, 8, 16, causal=True, layout=1)
    sdpa_case("longer L=150 D=64 causal (several tiles)", 1, 2, 2, 150, 150, 64, causal=True)
    sdpa_case("longer Lq=70 Lk=140 mask", 1, 2, 1, 70, 140, 32, mask=torch.rand(70, 140) > 0.2)


def fully_masked_row():
    B, H, L, D = 2, 2, 5, 8
    q, k, v, dout = torch.randn(B, H, L, D), torch.randn(B, H, L, D), torch.randn(B, H, L, D), torch.randn(B, H, L, D)
    mask = torch.rand(B, H, L, L) > 0.3
    mask[..., 0] = True
    mask[0, 1, 3, :] = False         # one row with no visible key
    qt, kt, vt = (x.clone().requires_grad_() for x in (q, k, v))
    out_t, w_t = torch_sdpa(qt, kt, vt, mask=mask)
    r = sk_sdpa(q, k, v, dout, mask=mask, weights=1)
    row = torch.zeros(B, H, L, dtype=torch.bool)
    row[0, 1, 3] = True
    check(torch.isnan(out_t.detach()[row]).all().item(), "fully masked row: torch gives NaN")
    check((r["out"][row] == 0).all().item() and (r["w"][row] == 0).all().item() and
          torch.isfinite(r["out"]).all().item(), "fully masked row: skiplm out 0, weights 0")
    cmp("fully masked row: other rows equal torch", r["out"][~row], out_t.detach()[~row], FWD)
    # gradients: the dead row must contribute nothing. Reference: float64 math where that
    # row instead sees every key but receives zero upstream gradient (so it adds nothing).
    d2 = dout.clone()
    d2[row] = 0
    m2 = mask.clone()
    m2[row] = True
    q6, k6, v6 = (x.double().requires_grad_() for x in (q, k, v))
    o6, _ = math_sdpa(q6, k6, v6, mask=m2)
    o6.backward(d2.double())
    check((r["dq"][row] == 0).all().item(), "fully masked row: skiplm dq of that row is 0")
    for g, g6 in (("dq", q6.grad), ("dk", k6.grad), ("dv", v6.grad)):
        cmp("fully masked row: %s vs float64 (row excluded)" % g, r[g], g6, GRAD)


def dropout_case():
    """skiplm's dropout keep-mask is a hash; recover it from the returned (post-dropout)
    weights and check out and gradients against the float64 math with that fixed mask; the
    dropped fraction within 4 standard deviations of p."""
    B, H, Lq, Lk, D, p = 2, 3, 9, 12, 8, 0.3
    q, k, v, dout = torch.randn(B, H, Lq, D), torch.randn(B, H, Lk, D), torch.randn(B, H, Lk, D), torch.randn(B, H, Lq, D)
    for causal in (False, True):
        for ref in (0, 1):
            r = sk_sdpa(q, k, v, dout, causal=causal, p=p, training=1, seed=17, weights=1, ref=ref)
            q6, k6, v6 = (x.double().requires_grad_() for x in (q, k, v))
            _, w0 = math_sdpa(q6.detach(), k6.detach(), v6.detach(), is_causal=causal)
            keep = (r["w"] != 0) | (w0 == 0)
            frac = 1 - keep[w0 != 0].double().mean().item()
            o6, w6 = math_sdpa(q6, k6, v6, is_causal=causal, keep=keep, p=p)
            o6.backward(dout.double())
            tag = "dropout p=0.3 causal=%d [%s]" % (causal, "ref" if ref else "fused")
            n = int((w0 != 0).sum())
            sd = (p * (1 - p) / n) ** 0.5
            check(abs(frac - p) < 4 * sd, "%s: dropped fraction %.3f of %d weights, within 4 sd (%.3f) of p" % (tag, frac, n, 4 * sd))
            cmp(tag + " weights (post-dropout) vs math", r["w"], w6.detach(), FWD)
            cmp(tag + " out vs math with same keep mask", r["out"], o6.detach(), FWD)
            for g, g6 in (("dq", q6.grad), ("dk", k6.grad), ("dv", v6.grad)):
                cmp("%s %s vs float64 autograd" % (tag, g), r[g], g6, GRAD)
    # the rate on many weights: the dropped fraction within 4 standard deviations of p (for p = 0.3
    # on 32,768 weights, 4 sd is 0.010: a dropout that drops 0.7 p is 36 sd away)
    qb, kb, vb, db = torch.randn(2, 4, 64, 8), torch.randn(2, 4, 64, 8), torch.randn(2, 4, 64, 8), torch.randn(2, 4, 64, 8)
    for pr in (0.1, 0.3, 0.5):
        for ref in (0, 1):
            r = sk_sdpa(qb, kb, vb, db, p=pr, training=1, seed=5, weights=1, ref=ref)
            n = r["w"].numel()
            frac = (r["w"] == 0).double().mean().item()
            sd = (pr * (1 - pr) / n) ** 0.5
            check(abs(frac - pr) < 4 * sd, "dropout p=%.1f [%s]: dropped fraction %.4f of %d weights, within 4 sd (%.4f) of p" % (
                pr, "ref" if ref else "fused", frac, n, 4 * sd))
    r1 = sk_sdpa(q, k, v, dout, p=p, training=1, seed=17)
    r2 = sk_sdpa(q, k, v, dout, p=p, training=1, seed=17)
    r3 = sk_sdpa(q, k, v, dout, p=p, training=1, seed=18)
    r4 = sk_sdpa(q, k, v, dout, p=p, training=0, seed=17)
    r5 = sk_sdpa(q, k, v, dout)
    check(torch.equal(r1["out"], r2["out"]) and torch.equal(r1["dq"], r2["dq"]), "dropout: same seed reproduces")
    check(not torch.equal(r1["out"], r3["out"]), "dropout: different seed differs")
    check(torch.equal(r4["out"], r5["out"]), "dropout: off when not training")
    err = sk_sdpa(q, k, v, dout, p=1.0, training=1)
    check(isinstance(err, str) and "dropout_p" in err, "dropout p=1 rejected: %r" % err)


# ------------------------------------------------------------------------- MHA

def run_mha(xq, xkv, W, H, Hkv, dout, mask=None, causal=False, weights=0, avg=0):
    B, Lq, E = xq.shape
    Lk = xkv.shape[1]
    D = W["wq"].shape[0] // H
    self_attn = xkv is xq
    bias = W.get("bq") is not None
    with tempfile.TemporaryDirectory() as d:
        write(d, "xq", xq)
        if not self_attn:
            write(d, "xkv", xkv)
        for n in ("wq", "wk", "wv", "wo") + (("bq", "bk", "bv", "bo") if bias else ()):
            write(d, n, W[n])
        write(d, "dout", dout)
        s = [0, 0, 0, 0]
        rank = 0
        if mask is not None:
            rank = mask.dim()
            s[:rank] = list(mask.shape)
            write(d, "mask", mask)
        err = run_tool(d, "mha %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d" % (
            B, Lq, Lk, E, H, Hkv, D, int(bias), int(self_attn), int(causal), weights, avg,
            rank, s[0], s[1], s[2], s[3]))
        if err is not None:
            return err
        r = dict(out=read(d, "out", (B, Lq, E)), dxq=read(d, "dxq", (B, Lq, E)))
        if weights:
            r["w"] = read(d, "w", (B, Lq, Lk) if avg else (B, H, Lq, Lk))
        if not self_attn:
            r["dxkv"] = read(d, "dxkv", (B, Lk, E))
        for n in ("wq", "wk", "wv", "wo") + (("bq", "bk", "bv", "bo") if bias else ()):
            r["g" + n] = read(d, "g" + n, tuple(W[n].shape))
        return r


MHA_FWD = dict(rtol=1e-5, atol=1e-6)
# parameter gradients sum over B*L tokens on both sides (and d bk is exactly 0 in exact
# arithmetic: softmax is shift-invariant, so both sides report cancellation noise ~1e-6)
MHA_GRAD = dict(rtol=1e-5, atol=1e-5)


def mha_case(name, B, Lq, Lk, E, H, bias=True, self_attn=True, attn_mask=None, kpm=None, causal=False,
             weights=0, avg=1):
    """nn.MultiheadAttention(batch_first=True) with copied weights. attn_mask / kpm use
    PyTorch's MHA meaning (True = NOT allowed / ignore); the test converts them into one
    SDPA-style mask (True = attend) for skiplm."""
    mha = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True)
    with torch.no_grad():
        for prm in mha.parameters():
            prm.uniform_(-0.5, 0.5)
    xq = torch.randn(B, Lq, E, requires_grad=True)
    xkv = xq if self_attn else torch.randn(B, Lk, E, requires_grad=True)
    am = attn_mask
    if causal:
        am = torch.ones(Lq, Lk, dtype=torch.bool).triu(1)
    out_t, w_t = mha(xq, xkv, xkv, key_padding_mask=kpm, need_weights=bool(weights),
                     attn_mask=am, average_attn_weights=bool(avg))
    dout = torch.randn(B, Lq, E)
    out_t.backward(dout)
    W = dict(wq=mha.in_proj_weight[:E], wk=mha.in_proj_weight[E:2 * E], wv=mha.in_proj_weight[2 * E:],
             wo=mha.out_proj.weight)
    if bias:
        W.update(bq=mha.in_proj_bias[:E], bk=mha.in_proj_bias[E:2 * E], bv=mha.in_proj_bias[2 * E:],
                 bo=mha.out_proj.bias)
    # one SDPA mask, True = attend: rank 2 (Lq,Lk), rank 3 (B,1,Lk) or (B,Lq,Lk)
    mask = None
    if kpm is not None:
        mask = ~kpm[:, None, :]
        if attn_mask is not None:
            mask = (~attn_mask)[None] & mask
    elif attn_mask is not None:
        mask = ~attn_mask
    xq_d = xq.detach()
    r = run_mha(xq_d, xq_d if self_attn else xkv.detach(), {k: v.detach() for k, v in W.items()},
                H, H, dout, mask=mask, causal=causal, weights=weights, avg=avg)
    if isinstance(r, str):
        check(False, "%s: %s" % (name, r))
        return
    cmp(name + " out vs nn.MultiheadAttention", r["out"], out_t.detach(), MHA_FWD)
    if weights:
        cmp(name + " weights%s" % (" (avg)" if avg else " (per head)"), r["w"], w_t.detach(), FWD)
    cmp(name + " d query", r["dxq"], xq.grad, MHA_GRAD)
    if not self_attn:
        cmp(name + " d key/value input", r["dxkv"], xkv.grad, MHA_GRAD)
    gi = mha.in_proj_weight.grad
    cmp(name + " d Wq", r["gwq"], gi[:E], MHA_GRAD)
    cmp(name + " d Wk", r["gwk"], gi[E:2 * E], MHA_GRAD)
    cmp(name + " d Wv", r["gwv"], gi[2 * E:], MHA_GRAD)
    cmp(name + " d Wo", r["gwo"], mha.out_proj.weight.grad, MHA_GRAD)
    if bias:
        gb = mha.in_proj_bias.grad
        cmp(name + " d biases", torch.cat([r["gbq"], r["gbk"], r["gbv"]]), gb, MHA_GRAD)
        cmp(name + " d out bias", r["gbo"], mha.out_proj.bias.grad, MHA_GRAD)


def mha_cases():
    mha_case("MHA self, bias, need_weights avg", 2, 6, 6, 16, 4, weights=1, avg=1)
    am = torch.rand(6, 6) > 0.7
    am.fill_diagonal_(False)
    kpm = torch.tensor([[False] * 5 + [True], [False] * 4 + [True] * 2])
    mha_case("MHA self, attn_mask + key_padding_mask, weights per head", 2, 6, 6, 16, 4,
             attn_mask=am, kpm=kpm, weights=1, avg=0)
    mha_case("MHA self, attn_mask only", 2, 6, 6, 16, 2, attn_mask=am, weights=1)
    kpm2 = torch.tensor([[False] * 7 + [True] * 2, [False] * 9])
    mha_case("MHA cross Lq=5 Lk=9, no bias, key_padding_mask", 2, 5, 9, 12, 3, bias=False,
             self_attn=False, kpm=kpm2, weights=1, avg=1)
    mha_case("MHA self causal (is_causal vs triu attn_mask)", 2, 7, 7, 16, 4, causal=True, weights=1, avg=0)
    mha_case("MHA cross, no masks, need_weights=False", 1, 4, 6, 8, 2, self_attn=False)


def gqa_mha_case(name, B, Lq, Lk, E, H, Hkv, self_attn, causal):
    D = E // H
    P = dict(wq=torch.randn(H * D, E) * 0.3, wk=torch.randn(Hkv * D, E) * 0.3,
             wv=torch.randn(Hkv * D, E) * 0.3, wo=torch.randn(E, H * D) * 0.3,
             bq=torch.randn(H * D) * 0.1, bk=torch.randn(Hkv * D) * 0.1,
             bv=torch.randn(Hkv * D) * 0.1, bo=torch.randn(E) * 0.1)
    xq = torch.randn(B, Lq, E)
    xkv = xq if self_attn else torch.randn(B, Lk, E)
    dout = torch.randn(B, Lq, E)
    Pt = {k: v.clone().requires_grad_() for k, v in P.items()}
    xqt = xq.clone().requires_grad_()
    xkvt = xqt if self_attn else xkv.clone().requires_grad_()
    out_t, w_t = gqa_mha(xqt, xkvt, Pt["wq"], Pt["wk"], Pt["wv"], Pt["wo"], Pt["bq"], Pt["bk"], Pt["bv"],
                         Pt["bo"], H, Hkv, is_causal=causal)
    out_t.backward(dout)
    r = run_mha(xq, xkv, P, H, Hkv, dout, causal=causal, weights=1, avg=0)
    if isinstance(r, str):
        check(False, "%s: %s" % (name, r))
        return
    cmp(name + " out", r["out"], out_t.detach(), MHA_FWD)
    cmp(name + " weights", r["w"], w_t.detach(), FWD)
    cmp(name + " d query", r["dxq"], xqt.grad, MHA_GRAD)
    if not self_attn:
        cmp(name + " d key/value input", r["dxkv"], xkvt.grad, MHA_GRAD)
    for n in ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"):
        cmp(name + " d " + n, r["g" + n], Pt[n].grad, MHA_GRAD)


def main():
    if not os.path.exists(TOOL):
        check(False, "tool_attn built at %s (run make)" % TOOL)
        finish()
    seed_cases()
    multihead_cases()
    fully_masked_row()
    dropout_case()
    mha_cases()
    gqa_mha_case("GQA-MHA self causal H=4 Hkv=2", 2, 7, 7, 16, 4, 2, True, True)
    gqa_mha_case("MQA-MHA cross H=4 Hkv=1", 2, 5, 8, 16, 4, 1, False, False)
    finish()


if __name__ == "__main__":
    main()
