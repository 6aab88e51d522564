"""GPT-2 engine against the PyTorch reference (tests/ref/gpt_ref.py), both directions:

1. PyTorch writes random weights (safetensors) and a batch; skiplm loads them, runs
   forward and backward; loss, logits and every gradient are compared.
2. skiplm writes its own random init; PyTorch loads it and must give skiplm's logits.

Tolerances (issue #2): loss 1e-5 relative, logits max abs 1e-4, each gradient
max abs <= 1e-4 * max(1, max|g|).
"""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import check, finish, run_tool  # noqa: E402
from gpt_ref import GPT, GPTConfig, config_from_metadata  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)

def table(L, H, rules):
    """Explicit routing table, written out by hand for the test (independent of skiplm's parser)."""
    t = [[l] * H for l in range(L)]
    for layers, heads, src in rules:
        for l in layers:
            for h in heads:
                t[l][h] = src(l)
    return t


CONFIGS = [
    # name, config, B, T
    ("baseline", dict(n_layer=3, n_head=4, n_embd=32), 2, 13),
    ("skip1", dict(n_layer=4, n_head=4, n_embd=32, n_skip_layer=1, n_skip_head=2), 2, 17),
    ("skip3-h3", dict(n_layer=4, n_head=4, n_embd=32, n_skip_layer=3, n_skip_head=3), 2, 9),
    ("skip9-h6", dict(n_layer=12, n_head=12, n_embd=48, n_skip_layer=9, n_skip_head=6), 1, 11),
    ("skip9-h9", dict(n_layer=12, n_head=12, n_embd=48, n_skip_layer=9, n_skip_head=9), 2, 7),
    ("skip9-h12-all-heads", dict(n_layer=12, n_head=12, n_embd=48, n_skip_layer=9, n_skip_head=12), 1, 10),
    ("skip-ge-L", dict(n_layer=3, n_head=4, n_embd=32, n_skip_layer=3, n_skip_head=2), 2, 8),
    ("skip-gt-L", dict(n_layer=3, n_head=4, n_embd=32, n_skip_layer=7, n_skip_head=4), 1, 8),
    ("nobias", dict(n_layer=4, n_head=4, n_embd=32, bias=False, n_skip_layer=2, n_skip_head=2), 2, 19),
    ("tanh-gelu", dict(n_layer=3, n_head=2, n_embd=24, gelu="tanh", n_skip_layer=1, n_skip_head=1), 3, 23),
    ("routing-cla", dict(n_layer=4, n_head=4, n_embd=32, routing="1,3:*=-1",
                         route=table(4, 4, [([1, 3], range(4), lambda l: l - 1)])), 2, 12),
    ("routing-multi-source", dict(n_layer=6, n_head=4, n_embd=32, routing="3-5:1=-3;4-5:3=-1;5:0=@1",
                                  route=table(6, 4, [(range(3, 6), [1], lambda l: l - 3), ([4, 5], [3], lambda l: l - 1),
                                                     ([5], [0], lambda l: 1)])), 2, 10),
    ("sinusoidal-relu", dict(n_layer=3, n_head=4, n_embd=32, sinusoidal=True, relu=True, n_skip_layer=1, n_skip_head=2), 2, 15),
    ("long-T", dict(n_layer=2, n_head=2, n_embd=16, block_size=200, n_skip_layer=1, n_skip_head=1), 1, 197),
    ("untied-head-sla", dict(n_layer=3, n_head=4, n_embd=32, untied_head=True, n_skip_layer=1, n_skip_head=2), 2, 13),
]


def compare_direction1(name, kw, B, T, tmp):
    route = kw.pop("route", None)
    cfg = GPTConfig(**kw)
    cfg.route = route
    torch.manual_seed(0)
    model = GPT(cfg)
    model.randomize(seed=1234)
    g = torch.Generator().manual_seed(99)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    tgt[0, 1] = -1                      # ignored target
    wpath, bpath, opath = (os.path.join(tmp, f"{name}.{s}.safetensors") for s in ("w", "b", "o"))
    st.save_file(model.state_for_file(), wpath, metadata=cfg.metadata())
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, bpath)
    logits, loss = model(idx, tgt)
    loss.backward()
    if not check(run_tool("tool_model", "run", wpath, bpath, opath), f"{name}: skiplm ran"):
        return
    out, _ = st.load_file(opath)
    rel = abs(out["loss"].item() - loss.item()) / abs(loss.item())
    rel_fb = abs(out["loss_fb"].item() - loss.item()) / abs(loss.item())
    check(rel <= 1e-5 and rel_fb <= 1e-5, f"{name}: loss {out['loss'].item():.7f} vs torch {loss.item():.7f} (rel {rel:.1e}, fb {rel_fb:.1e})")
    d = (out["logits"] - logits.detach()).abs().max().item()
    check(d <= 1e-4, f"{name}: logits max abs diff {d:.2e}")
    worst, worst_name, n = 0.0, "", 0
    for pname, p in model.named_parameters():
        if pname == "lm_head.weight" and not cfg.untied_head:
            continue                    # tied: its gradient is in wte's
        gc = out["grad." + pname]
        gt = p.grad
        tol = 1e-4 * max(1.0, gt.abs().max().item())
        diff = (gc - gt).abs().max().item()
        n += 1
        if diff / tol > worst:
            worst, worst_name = diff / tol, f"{pname} diff {diff:.2e} tol {tol:.1e}"
        if diff > tol:
            check(False, f"{name}: grad {pname} max abs diff {diff:.2e} > {tol:.1e}")
    check(worst <= 1.0, f"{name}: all {n} gradients within tolerance (worst {worst:.3f} of tol: {worst_name})")


def compare_direction2(tmp):
    """skiplm's own init -> PyTorch -> same logits."""
    path = os.path.join(tmp, "c_init.safetensors")
    ok = run_tool("tool_model", "init", path, "7", "n_layer=4", "n_head=4", "n_embd=32", "vocab_size=77",
                  "block_size=32", "n_skip_layer=2", "n_skip_head=3", "gelu=tanh")
    if not check(ok, "skiplm init wrote weights"):
        return
    tensors, md = st.load_file(path)
    cfg = config_from_metadata(md)
    check(cfg.n_skip_layer == 2 and cfg.n_skip_head == 3 and cfg.gelu == "tanh" and cfg.vocab_size == 77,
          f"config travels in __metadata__ ({md.get('n_skip_layer')}, {md.get('gelu')})")
    model = GPT(cfg)
    model.load_from_file(tensors)
    # std of skiplm's init is nanoGPT's 0.02 (0.02/sqrt(2L) on residual projections)
    std = tensors["transformer.h.0.mlp.c_fc.weight"].std().item()
    check(abs(std - 0.02) < 0.002, f"init std of c_fc {std:.4f} ~ 0.02")
    std_p = tensors["transformer.h.0.mlp.c_proj.weight"].std().item()
    check(abs(std_p - 0.02 / (2 * 4) ** 0.5) < 0.001, f"init std of c_proj {std_p:.5f} ~ 0.02/sqrt(2L)")
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(0, 77, (2, 20), generator=g)
    tgt = torch.randint(0, 77, (2, 20), generator=g)
    bpath, opath = os.path.join(tmp, "c_b.safetensors"), os.path.join(tmp, "c_o.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, bpath)
    if not check(run_tool("tool_model", "run", path, bpath, opath), "skiplm ran on its own weights"):
        return
    out, _ = st.load_file(opath)
    logits, loss = model(idx, tgt)
    d = (out["logits"] - logits.detach()).abs().max().item()
    check(d <= 1e-4, f"skiplm-written weights in PyTorch: logits max abs diff {d:.2e}")
    check(abs(out["loss"].item() - loss.item()) <= 1e-5 * loss.item(), f"loss {out['loss'].item():.6f} vs {loss.item():.6f}")


def gelu_ops(tmp):
    """skiplm's two GELUs (sk_gelu_forward / _backward through tool_model gelu) on 4,001 points
    of [-8, 8] against torch's F.gelu in float64 (approximate 'none' and 'tanh') and its
    autograd derivative: a whole model's comparison hides a small change of the formula"""
    x = torch.linspace(-8, 8, 4001).view(-1, 1)
    i, o = os.path.join(tmp, "gelu_in.safetensors"), os.path.join(tmp, "gelu_out.safetensors")
    st.save_file({"x": x}, i)
    if not check(run_tool("tool_model", "gelu", i, o), "skiplm's GELUs ran"):
        return
    out = st.load_file(o)[0]
    for name, approx in (("erf", "none"), ("tanh", "tanh")):
        x6 = x.double().requires_grad_()
        y6 = torch.nn.functional.gelu(x6, approximate=approx)
        y6.sum().backward()
        d = (out[name].double() - y6.detach()).abs().max().item()
        dd = (out["d" + name].double() - x6.grad).abs().max().item()
        check(d <= 2e-6 and dd <= 1e-5, f"GELU ({name}) on [-8, 8]: forward max abs diff {d:.1e} (<= 2e-6), derivative "
                                        f"{dd:.1e} (<= 1e-5) from torch's float64")


with tempfile.TemporaryDirectory() as tmp:
    for name, kw, B, T in CONFIGS:
        compare_direction1(name, kw, B, T, tmp)
    compare_direction2(tmp)
    gelu_ops(tmp)
finish()
