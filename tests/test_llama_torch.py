"""Llama family against PyTorch references (tests/ref/llama_ref.py):

1. A MiniMind-style model (RoPE through the complex view of adjacent pairs) writes random
   weights with HF Llama names (q/k rows permuted to HF's half layout); skiplm loads them:
   loss, logits and every gradient must match (same tolerances as the GPT-2 engine); one
   case with llama3 rope_scaling (frequencies in all three bands), from skiplm's metadata.
2. HF's formulation (rotate_half) reads a file skiplm wrote and gets skiplm's logits.
3. skiplm's own RoPE (tests/tool_model.c rope) against the reference's rotation, and its
   relative-position property: q_m . k_n depends only on m - n.
"""
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import check, finish, run_tool  # noqa: E402
from llama_ref import (Llama, LlamaConfig, config_from_metadata, halves_to_pairs,  # noqa: E402
                       load_file_into, precompute_freqs_cis, to_file)
import st  # noqa: E402

torch.set_num_threads(1)

CONFIGS = [
    ("mha", dict(n_layer=2, n_head=4, n_kv_head=4, n_embd=32, ffn_hidden=64), 2, 11),
    ("gqa", dict(n_layer=3, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=96), 2, 13),
    ("gqa-sla", dict(n_layer=4, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=96, n_skip_layer=1, n_skip_head=2), 2, 9),
    ("mqa-sla-all", dict(n_layer=4, n_head=4, n_kv_head=1, n_embd=32, ffn_hidden=64, n_skip_layer=2, n_skip_head=4), 1, 17),
    ("sla-3of4-theta1e4", dict(n_layer=4, n_head=4, n_kv_head=4, n_embd=32, ffn_hidden=64, n_skip_layer=3,
                               n_skip_head=3, rope_theta=1e4), 2, 21),
    ("rope-llama3-gqa-sla", dict(n_layer=3, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=64, block_size=64, n_skip_layer=1,
                                 n_skip_head=2, rope_theta=1e4, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 256}), 2, 63),
    ("qkv-bias-gqa-sla", dict(n_layer=3, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=64, qkv_bias=1, n_skip_layer=1,
                              n_skip_head=2, rope_theta=1e6), 2, 15),
    ("untied-head-gqa", dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=64, untied_head=1), 2, 11),
    ("long-T", dict(n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=32, block_size=150, n_skip_layer=1,
                    n_skip_head=2), 1, 149),
]


def direction1(name, kw, B, T, tmp):
    cfg = LlamaConfig(**kw)
    torch.manual_seed(0)
    model = Llama(cfg)
    model.randomize(seed=77)
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    tgt[0, 0] = -1
    w, b, o = (os.path.join(tmp, f"{name}.{s}.safetensors") for s in "wbo")
    st.save_file(to_file(model), w, metadata=cfg.metadata())
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, b)
    logits, loss = model(idx, tgt)
    loss.backward()
    if not check(run_tool("tool_model", "run", w, b, o), f"{name}: skiplm ran"):
        return
    out, _ = st.load_file(o)
    rel = abs(out["loss"].item() - loss.item()) / loss.item()
    check(rel <= 1e-5, f"{name}: loss {out['loss'].item():.7f} vs torch {loss.item():.7f} (rel {rel:.1e})")
    d = (out["logits"] - logits.detach()).abs().max().item()
    check(d <= 1e-4, f"{name}: logits max abs diff {d:.2e}")
    worst, wn = 0.0, ""
    for pname, p in model.named_parameters():
        if pname == "lm_head.weight" and not cfg.untied_head:
            continue                    # tied: its gradient is in the embedding's
        gc = out["grad." + pname]       # skiplm's gradient in its own (pair) row order
        tol = 1e-4 * max(1.0, p.grad.abs().max().item())
        diff = (gc - p.grad).abs().max().item()
        if diff > tol:
            check(False, f"{name}: grad {pname} max abs diff {diff:.2e} > {tol:.1e}")
        if diff / tol > worst:
            worst, wn = diff / tol, pname
    check(worst <= 1.0, f"{name}: all gradients within tolerance (worst {worst:.3f} of tol at {wn})")


def direction2(tmp):
    path = os.path.join(tmp, "c_llama.safetensors")
    ok = run_tool("tool_model", "init", path, "11", "family=llama", "n_layer=3", "n_head=4", "n_kv_head=2", "n_embd=32",
                  "vocab_size=61", "block_size=32", "bias=0", "norm_eps=1e-6", "n_skip_layer=1", "n_skip_head=2")
    if not check(ok, "skiplm init wrote a llama model"):
        return
    tensors, md = st.load_file(path)
    cfg = config_from_metadata(md)
    check(cfg.n_kv_head == 2 and cfg.ffn_hidden == 128 and cfg.n_skip_head == 2,
          f"llama config in metadata (kv {cfg.n_kv_head}, ffn {cfg.ffn_hidden} = 8C/3 rounded up to 64)")
    check("model.layers.0.self_attn.q_proj.weight" in tensors and "model.layers.2.mlp.down_proj.weight" in tensors,
          "HF Llama tensor names")
    for p in tensors.values():
        p.mul_(5.0)                      # larger weights so RoPE placement matters more
    st.save_file(tensors, path, metadata=md)
    hf = Llama(cfg, halves=True)
    load_file_into(hf, tensors)
    mm = Llama(cfg, halves=False)
    load_file_into(mm, tensors)
    g = torch.Generator().manual_seed(8)
    idx = torch.randint(0, 61, (2, 25), generator=g)
    tgt = torch.randint(0, 61, (2, 25), generator=g)
    b, o = os.path.join(tmp, "c_b.safetensors"), os.path.join(tmp, "c_o.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, b)
    if not check(run_tool("tool_model", "run", path, b, o), "skiplm ran on its llama file"):
        return
    out, _ = st.load_file(o)
    with torch.no_grad():
        lh, _ = hf(idx)
        lm, _ = mm(idx)
    d1 = (out["logits"] - lh).abs().max().item()
    d2 = (out["logits"] - lm).abs().max().item()
    check(d1 <= 1e-4, f"HF-style rotate_half on skiplm's file: logits max abs diff {d1:.2e}")
    check(d2 <= 1e-4, f"MiniMind-style complex RoPE on skiplm's file: logits max abs diff {d2:.2e}")
    # the permutation matters: HF code on un-permuted rows would be wrong
    bad = {k: (halves_to_pairs(v, cfg.n_head) if k.endswith("q_proj.weight") else v) for k, v in tensors.items()}
    hf_bad = Llama(cfg, halves=True)
    load_file_into(hf_bad, bad)
    with torch.no_grad():
        lb, _ = hf_bad(idx)
    check((lb - lh).abs().max().item() > 1e-3, "a file without the q/k permutation would give HF other logits")


def rope_relative(tmp):
    """skiplm's RoPE (tool_model rope: sk_rope_freqs, sk_rope_table, sk_rope) on random q and k at
    positions m and n: each rotated vector equals the reference's complex rotation, and
    q_m . k_n depends only on m - n"""
    d = 16
    g = torch.Generator().manual_seed(1)
    q = torch.randn(d, generator=g)
    k = torch.randn(d, generator=g)
    pairs = [(m, n) for m in range(0, 40, 3) for n in range(0, m + 1, 2)]
    for theta in (1e6, 1e4):
        rows = torch.stack([q] * len(pairs) + [k] * len(pairs))
        pos = torch.tensor([m for m, _ in pairs] + [n for _, n in pairs], dtype=torch.int32)[:, None]
        i, o = os.path.join(tmp, "rope_in.safetensors"), os.path.join(tmp, "rope_out.safetensors")
        st.save_file({"x": rows, "pos": pos}, i)
        if not check(run_tool("tool_model", "rope", i, o, f"rope_theta={theta:g}"), f"skiplm's RoPE ran (theta {theta:g})"):
            return
        y = st.load_file(o)[0]["y"].double()
        fc = precompute_freqs_cis(d, 64, theta).to(torch.complex128)
        want = torch.stack([torch.view_as_real(torch.view_as_complex(r.double().view(-1, 2).contiguous()) * fc[int(p)]).flatten()
                            for r, p in zip(rows, pos[:, 0])])
        diff = (y - want).abs().max().item()
        check(diff < 1e-5, f"skiplm's RoPE, theta {theta:g}: each rotated vector equals the reference's complex rotation of "
                           f"adjacent pairs (max abs diff {diff:.1e})")
        base, worst = {}, 0.0
        for j, (m, n) in enumerate(pairs):
            s = torch.dot(y[j], y[len(pairs) + j]).item()
            if (m - n) in base:
                worst = max(worst, abs(s - base[m - n]))
            else:
                base[m - n] = s
        spread = max(base.values()) - min(base.values())
        check(worst < 1e-4 and spread > 0.1, f"skiplm's RoPE, theta {theta:g}: q_m . k_n depends only on m - n (max deviation "
                                            f"{worst:.1e}; across offsets the scores spread over {spread:.2f})")


with tempfile.TemporaryDirectory() as tmp:
    for name, kw, B, T in CONFIGS:
        direction1(name, kw, B, T, tmp)
    direction2(tmp)
    rope_relative(tmp)
finish()
