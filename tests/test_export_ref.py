"""bench/export_ref.py, the exporter that bench/vs_ref.sh uses to run llm.c and llama2.c on
skiplm's weights (the reference programs themselves are not available here):

1. llm.c's GPT-2 checkpoint: the 256-int header and every tensor at the offset train_gpt2.c
   reads it from (wte padded to Vp rows with zeros), against the safetensors file read by the
   tests' own reader;
2. llama2.c's model file: the 7-int config and every tensor at its offset; q and k go from
   Hugging Face's rotate-half order to llama2.c's adjacent pairs, checked by what matters: the
   attention scores q(p).k(p') with RoPE applied each program's way are the same;
   tokenizer.bin and --char-vocab give token i the same piece;
3. bad input: a file that is not skiplm's, a truncated one, models a program cannot represent
   (SLA, erf GELU for llm.c, rope_theta 1e6 or GPT-2 for llama2.c): a clear refusal, no output.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402
import st  # noqa: E402

EX = os.path.join(ROOT, "bench", "export_ref.py")


def export(*args):
    return subprocess.run([sys.executable, EX, *args], capture_output=True, text=True)


def init(path, *opts):
    r = subprocess.run([SKIPLM, "init", path, *opts], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return {k: v.float().numpy() for k, v in st.load_file(path)[0].items()}


def floats(buf, off, n):
    return np.frombuffer(buf, dtype="<f4", count=n, offset=off), off + 4 * n


def llmc_case(tmp):
    L, H, C, V, T = 2, 2, 16, 70, 32
    w = init(os.path.join(tmp, "g.safetensors"), "--n_layer", str(L), "--n_head", str(H), "--n_embd", str(C),
             "--vocab_size", str(V), "--block_size", str(T), "--gelu", "tanh")
    out = os.path.join(tmp, "g.bin")
    r = export(os.path.join(tmp, "g.safetensors"), "--llmc", out)
    buf = open(out, "rb").read() if r.returncode == 0 else b""
    head = struct.unpack("<256i", buf[:1024]) if len(buf) >= 1024 else (0,) * 256
    Vp = head[7]
    check(r.returncode == 0 and head[:7] == (20240326, 3, T, V, L, H, C) and Vp >= V and not any(head[8:]),
          f"llm.c header: magic, version 3, maxT V L NH C Vp: {head[:8]} {r.stderr.strip()}")
    if r.returncode:
        return
    p, off = "transformer.", 1024
    a, off = floats(buf, off, Vp * C)
    ok = np.array_equal(a[:V * C], w[p + "wte.weight"].ravel()) and not a[V * C:].any()
    a, off = floats(buf, off, T * C)
    ok &= np.array_equal(a, w[p + "wpe.weight"].ravel())
    for suffix in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                   "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                   "mlp.c_proj.weight", "mlp.c_proj.bias"]:
        for l in range(L):
            t = w[f"{p}h.{l}.{suffix}"]
            a, off = floats(buf, off, t.size)
            ok &= np.array_equal(a, t.ravel())
    for name in ["ln_f.weight", "ln_f.bias"]:
        a, off = floats(buf, off, C)
        ok &= np.array_equal(a, w[p + name])
    check(ok and off == len(buf), f"llm.c checkpoint: every tensor at train_gpt2.c's offset, wte padded with zeros "
          f"({off} of {len(buf)} bytes)")


def rope_half(x, pos, theta=10000.0):
    """Hugging Face: rotate the halves of each head (x: (heads, hs))"""
    hs = x.shape[-1]
    f = pos / theta ** (np.arange(0, hs, 2) / hs)
    c, s = np.concatenate([np.cos(f)] * 2), np.concatenate([np.sin(f)] * 2)
    rot = np.concatenate([-x[..., hs // 2:], x[..., :hs // 2]], axis=-1)
    return x * c + rot * s


def rope_pairs(x, pos, theta=10000.0):
    """llama2.c: rotate adjacent pairs (2i, 2i+1)"""
    hs = x.shape[-1]
    f = pos / theta ** (np.arange(0, hs, 2) / hs)
    c, s = np.cos(f), np.sin(f)
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    return y


def llama2c_case(tmp):
    L, H, Hkv, C, F, V, T = 2, 4, 2, 32, 48, 60, 16
    hs, kv = C // H, Hkv * C // H
    src = os.path.join(tmp, "l.safetensors")
    w = init(src, "--family", "llama", "--n_layer", str(L), "--n_head", str(H), "--n_kv_head", str(Hkv),
             "--n_embd", str(C), "--ffn_hidden", str(F), "--vocab_size", str(V), "--block_size", str(T),
             "--norm_eps", "1e-5", "--rope_theta", "10000")
    out, tok, voc = (os.path.join(tmp, n) for n in ("l.bin", "tok.bin", "vocab.json"))
    r = export(src, "--llama2c", out, "--tokenizer", tok, "--char-vocab", voc)
    buf = open(out, "rb").read() if r.returncode == 0 else b""
    cfg = struct.unpack("<7i", buf[:28]) if len(buf) >= 28 else ()
    check(r.returncode == 0 and cfg == (C, F, L, H, Hkv, V, T),
          f"llama2.c config: dim hidden layers heads kv_heads vocab (shared classifier) seq_len: {cfg} {r.stderr.strip()}")
    if r.returncode:
        return
    p, off = "model.", 28
    a, off = floats(buf, off, V * C)
    ok = np.array_equal(a, w[p + "embed_tokens.weight"].ravel())
    got = {}
    for name, shape in [("input_layernorm.weight", (C,)), ("self_attn.q_proj.weight", (C, C)),
                        ("self_attn.k_proj.weight", (kv, C)), ("self_attn.v_proj.weight", (kv, C)),
                        ("self_attn.o_proj.weight", (C, C)), ("post_attention_layernorm.weight", (C,)),
                        ("mlp.gate_proj.weight", (F, C)), ("mlp.down_proj.weight", (C, F)), ("mlp.up_proj.weight", (F, C))]:
        for l in range(L):
            a, off = floats(buf, off, int(np.prod(shape)))
            got[(name, l)] = a.reshape(shape)
            if "q_proj" not in name and "k_proj" not in name:
                ok &= np.array_equal(a.reshape(shape), w[f"{p}layers.{l}.{name}"])
    a, off = floats(buf, off, C)
    ok &= np.array_equal(a, w[p + "norm.weight"])
    off += 2 * 4 * T * hs // 2                          # freq_cis, which run.c skips
    check(ok and off == len(buf), f"llama2.c model: every tensor at run.c's offset ({off} of {len(buf)} bytes)")
    # q.k with RoPE each program's way: the same scores (and not without the reordering)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(C), rng.standard_normal(C)
    same, moved = True, False
    for l in range(L):
        wq, wk = w[f"{p}layers.{l}.self_attn.q_proj.weight"], w[f"{p}layers.{l}.self_attn.k_proj.weight"]
        eq, ek = got[("self_attn.q_proj.weight", l)], got[("self_attn.k_proj.weight", l)]
        for pq, pk in [(0, 0), (5, 2), (13, 7)]:
            q = rope_half((wq @ x).reshape(H, hs), pq); k = rope_half((wk @ y).reshape(Hkv, hs), pk)
            q2 = rope_pairs((eq @ x).reshape(H, hs), pq); k2 = rope_pairs((ek @ y).reshape(Hkv, hs), pk)
            q3 = rope_pairs((wq @ x).reshape(H, hs), pq); k3 = rope_pairs((wk @ y).reshape(Hkv, hs), pk)
            g = H // Hkv
            s1 = [q[h] @ k[h // g] for h in range(H)]
            s2 = [q2[h] @ k2[h // g] for h in range(H)]
            s3 = [q3[h] @ k3[h // g] for h in range(H)]
            same &= np.allclose(s1, s2, rtol=1e-4, atol=1e-4)
            moved |= not np.allclose(s1, s3, rtol=1e-4, atol=1e-4)
    check(same and moved, "llama2.c model: attention scores with run.c's pair RoPE on the exported q/k equal "
          "Hugging Face's rotate-half RoPE on skiplm's (and differ without the reordering)")
    tb = open(tok, "rb").read()
    pieces, o = [], 4
    while o < len(tb):
        _, n = struct.unpack_from("<fi", tb, o)
        pieces.append(tb[o + 8:o + 8 + n].decode("utf-8"))
        o += 8 + n
    vj = json.load(open(voc, encoding="utf-8"))
    same_pieces = vj.get("type") == "char" and vj.get("vocab") == pieces
    check(len(pieces) == V and len(set(pieces)) == V and pieces[0] == " " and same_pieces,
          f"tokenizer.bin: {len(pieces)} distinct pieces, id 0 the space run.c looks up; vocab.json gives each id the same piece")


def llama2c_q8_case(tmp):
    """--llama2c-q8 (runq.c's int8 file): header, fp32 norms, then each matrix as int8 values and
    fp32 group scales, in runq.c's order; dequantized, within half a step of the fp32 export's
    (run.c's file: the same q/k row order) and using the int8 range."""
    L, H, Hkv, C, F, V, T = 2, 4, 2, 64, 96, 60, 16
    kv = Hkv * C // H
    src = os.path.join(tmp, "q.safetensors")
    init(src, "--family", "llama", "--n_layer", str(L), "--n_head", str(H), "--n_kv_head", str(Hkv),
         "--n_embd", str(C), "--ffn_hidden", str(F), "--vocab_size", str(V), "--block_size", str(T),
         "--norm_eps", "1e-5", "--rope_theta", "10000")
    f32, q8 = os.path.join(tmp, "q32.bin"), os.path.join(tmp, "q8.bin")
    r = export(src, "--llama2c", f32, "--llama2c-q8", q8)
    if r.returncode:
        check(False, f"llama2.c int8 export: {r.stderr.strip()}")
        return
    a, b = open(f32, "rb").read(), open(q8, "rb").read()
    magic, version = struct.unpack_from("<Ii", b, 0)
    cfg = struct.unpack_from("<7i", b, 8)
    shared, gs = struct.unpack_from("<Bi", b, 36)
    check(magic == 0x616B3432 and version == 2 and cfg == (C, F, L, H, Hkv, V, T) and shared == 1 and gs == 32 and not any(b[41:256]),
          f"llama2.c int8 header: ak42, version 2, config {cfg}, shared classifier, group {gs} (64 halved to divide hidden {F})")
    # the fp32 file's tensors, in its order
    off, t32 = 28, {}
    t32["emb"], off = floats(a, off, V * C)
    order = [("att", (C,)), ("wq", (C, C)), ("wk", (kv, C)), ("wv", (kv, C)), ("wo", (C, C)), ("ffn", (C,)),
             ("w1", (F, C)), ("w2", (C, F)), ("w3", (F, C))]
    for k, shape in order:
        for l in range(L):
            t32[(k, l)], off = floats(a, off, int(np.prod(shape)))
    t32["norm"], off = floats(a, off, C)
    off, ok = 256, True
    for k in ("att", "ffn"):
        for l in range(L):
            x, off = floats(b, off, C)
            ok &= np.array_equal(x, t32[(k, l)])
    x, off = floats(b, off, C)
    ok &= np.array_equal(x, t32["norm"])
    worst, full = 0.0, True
    for w in [t32["emb"]] + [t32[(k, l)] for k, _ in order if k not in ("att", "ffn") for l in range(L)]:
        n = w.size
        q = np.frombuffer(b, dtype=np.int8, count=n, offset=off).astype(np.float64).reshape(-1, gs)
        s, off = floats(b, off + n, n // gs)
        err = np.abs(q * s.reshape(-1, 1) - w.reshape(-1, gs)) / s.reshape(-1, 1)
        worst = max(worst, float(err.max()))
        full &= bool((np.abs(q).max(axis=1) == 127).all())
    check(ok and off == len(b) and worst <= 0.5 + 1e-5 and full,
          f"llama2.c int8 model: norms as fp32, every matrix within {worst:.3f} of a step of run.c's file's, "
          f"each group reaching 127, {off} of {len(b)} bytes")


def bad_cases(tmp):
    def refused(name, args, needle):
        outs = [a for a in args if a.endswith(".bin")]
        for o in outs:
            if os.path.exists(o):
                os.remove(o)
        r = export(*args)
        check(r.returncode != 0 and needle in r.stderr and not any(os.path.exists(o) for o in outs),
              f"refused: {name}: {r.stderr.strip()[-160:]!r}")

    plain = os.path.join(tmp, "plain.safetensors")
    st.save_file({"a": torch.zeros(3)}, plain)
    refused("a safetensors file without skiplm's config", [plain, "--llmc", os.path.join(tmp, "x.bin")], "no skiplm config")
    good = os.path.join(tmp, "g.safetensors")
    cut = os.path.join(tmp, "cut.safetensors")
    open(cut, "wb").write(open(good, "rb").read()[:6])
    refused("a truncated file", [cut, "--llmc", os.path.join(tmp, "x.bin")], "too short")
    sla = os.path.join(tmp, "sla.safetensors")
    init(sla, "--n_layer", "2", "--n_head", "2", "--n_embd", "16", "--vocab_size", "70", "--block_size", "32",
         "--gelu", "tanh", "--n_skip_layer", "1", "--n_skip_head", "1")
    refused("SLA for llm.c", [sla, "--llmc", os.path.join(tmp, "x.bin")], "Skip-Layer Attention")
    erf = os.path.join(tmp, "erf.safetensors")
    init(erf, "--n_layer", "1", "--n_head", "2", "--n_embd", "16", "--vocab_size", "70", "--block_size", "32")
    refused("erf GELU for llm.c", [erf, "--llmc", os.path.join(tmp, "x.bin")], "--gelu tanh")
    theta = os.path.join(tmp, "theta.safetensors")
    init(theta, "--family", "llama", "--n_layer", "1", "--n_head", "2", "--n_embd", "16", "--vocab_size", "70",
         "--block_size", "32", "--norm_eps", "1e-5")
    refused("rope_theta 1e6 for llama2.c", [theta, "--llama2c", os.path.join(tmp, "x.bin")], "rope_theta")
    refused("GPT-2 for llama2.c", [erf, "--llama2c", os.path.join(tmp, "x.bin")], "family 'gpt2'")


with tempfile.TemporaryDirectory() as tmp:
    llmc_case(tmp)
    llama2c_case(tmp)
    llama2c_q8_case(tmp)
    bad_cases(tmp)
finish()
