"""bench/gguf_write.py, the GGUF writer that bench/llama_cpp_bench.sh uses to run llama.cpp on
skiplm's weights (llama.cpp itself is not available here), read back by the test's own reader
written from the GGUF layout:

1. the header, the metadata (architecture, sizes, heads, RoPE base, norm epsilon, vocabulary,
   tokenizer "none") and every tensor's dimensions, type and 32-byte aligned offset;
2. F32: every tensor's values; q and k rows of each head from Hugging Face's rotate-half order
   to llama.cpp's adjacent pairs (row 2i + h of a head is row h * d/2 + i), the other tensors as
   they are; BF16: the matrices rounded to nearest even, the norms F32; Q8_0: each block the
   fp16 scale then the 32 int8 values of `skiplm quantize`'s file, rows permuted as in F32;
3. refusals: GPT-2, SLA, --type bf16 of an 8-bit file: a message, exit 1, no file.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402

GW = os.path.join(ROOT, "bench", "gguf_write.py")


def write(*args):
    return subprocess.run([sys.executable, GW, *args], capture_output=True, text=True)


def safetensors(path):
    """name -> numpy array (F32, I8, F16 as uint16 bits), and the metadata"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    meta = h.pop("__metadata__", {})
    dt = {"F32": "<f4", "I8": "i1", "F16": "<u2"}
    out = {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype=dt[v["dtype"]]).reshape(v["shape"])
           for k, v in h.items()}
    return out, meta


def gguf(path):
    """(metadata dict, {name: (dims, type, bytes)}), checking the layout on the way"""
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF", "magic"
    version, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    assert version == 3, f"version {version}"
    pos = 24

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", b, pos)
        s = b[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        return s
    meta = {}
    for _ in range(n_kv):
        k = string()
        (t,) = struct.unpack_from("<I", b, pos)
        pos += 4
        if t == 8:
            meta[k] = string()
        elif t in (4, 6):
            meta[k] = struct.unpack_from("<I" if t == 4 else "<f", b, pos)[0]
            pos += 4
        else:
            raise AssertionError(f"value type {t} of {k}")
    infos = []
    for _ in range(n_t):
        name = string()
        (nd,) = struct.unpack_from("<I", b, pos)
        dims = list(struct.unpack_from(f"<{nd}Q", b, pos + 4))
        t, off = struct.unpack_from("<IQ", b, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        infos.append((name, dims, t, off))
    start = (pos + 31) // 32 * 32
    tensors = {}
    for name, dims, t, off in infos:
        assert off % 32 == 0, f"{name} offset {off}"
        n = int(np.prod(dims))
        size = {0: 4 * n, 30: 2 * n, 8: n // 32 * 34}[t]
        assert start + off + size <= len(b), f"{name} past the end"
        tensors[name] = (dims, t, b[start + off:start + off + size])
    return meta, tensors


def pairs(w, heads):
    """rotate-half rows to adjacent pairs, written out row by row"""
    d = w.shape[0] // heads
    out = np.empty_like(w)
    for hd in range(heads):
        for i in range(d // 2):
            for h in range(2):
                out[hd * d + 2 * i + h] = w[hd * d + h * (d // 2) + i]
    return out


def bf16(a):
    u = a.astype("<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def main():
    tmp = tempfile.mkdtemp()
    m, mq = os.path.join(tmp, "m.safetensors"), os.path.join(tmp, "mq.safetensors")
    r = subprocess.run([SKIPLM, "init", m, "--family", "llama", "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2",
                        "--n_embd", "64", "--ffn_hidden", "96", "--vocab_size", "50", "--block_size", "32", "--bias", "0",
                        "--rope_theta", "10000"], capture_output=True, text=True)
    r2 = subprocess.run([SKIPLM, "quantize", m, "--out", mq], capture_output=True, text=True)
    if not check(r.returncode == 0 and r2.returncode == 0, f"init and quantize a Llama{'' if r2.returncode == 0 else ': ' + r.stderr[-200:] + r2.stderr[-200:]}"):
        return
    w, _ = safetensors(m)
    wq, _ = safetensors(mq)
    H, Hkv = 4, 2
    src = {"token_embd.weight": ("model.embed_tokens.weight", 0), "output_norm.weight": ("model.norm.weight", 0)}
    for i in range(2):
        p = f"model.layers.{i}."
        src.update({f"blk.{i}.attn_norm.weight": (p + "input_layernorm.weight", 0),
                    f"blk.{i}.attn_q.weight": (p + "self_attn.q_proj.weight", H),
                    f"blk.{i}.attn_k.weight": (p + "self_attn.k_proj.weight", Hkv),
                    f"blk.{i}.attn_v.weight": (p + "self_attn.v_proj.weight", 0),
                    f"blk.{i}.attn_output.weight": (p + "self_attn.o_proj.weight", 0),
                    f"blk.{i}.ffn_norm.weight": (p + "post_attention_layernorm.weight", 0),
                    f"blk.{i}.ffn_gate.weight": (p + "mlp.gate_proj.weight", 0),
                    f"blk.{i}.ffn_up.weight": (p + "mlp.up_proj.weight", 0),
                    f"blk.{i}.ffn_down.weight": (p + "mlp.down_proj.weight", 0)})
    for kind, args in [("f32", [m]), ("bf16", [m, "--type", "bf16"]), ("q8_0", [mq])]:
        out = os.path.join(tmp, f"{kind}.gguf")
        r = write(args[0], out, *args[1:])
        if not check(r.returncode == 0, f"{kind}: written{'' if r.returncode == 0 else ' (' + r.stderr.strip()[-200:] + ')'}"):
            continue
        try:
            meta, ts = gguf(out)
        except AssertionError as e:
            check(False, f"{kind}: the file reads back: {e}")
            continue
        want = {"general.architecture": "llama", "llama.context_length": 32, "llama.embedding_length": 64,
                "llama.block_count": 2, "llama.feed_forward_length": 96, "llama.attention.head_count": 4,
                "llama.attention.head_count_kv": 2, "llama.rope.dimension_count": 16, "llama.vocab_size": 50,
                "tokenizer.ggml.model": "none", "general.alignment": 32}
        check(all(meta.get(k) == v for k, v in want.items()) and meta["llama.rope.freq_base"] == 10000.0 and
              abs(meta["llama.attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-12,
              f"{kind}: the metadata ({ {k: meta.get(k) for k in want} })")
        ok, shapes = set(ts) == set(src), True
        for name, (sname, heads) in src.items():
            if name not in ts:
                continue
            dims, t, data = ts[name]
            a = w[sname]
            shapes &= dims == list(reversed(a.shape))
            if a.ndim == 1:
                ok &= t == 0 and np.array_equal(np.frombuffer(data, "<f4"), a)
            elif kind == "f32":
                ok &= t == 0 and np.array_equal(np.frombuffer(data, "<f4").reshape(a.shape), pairs(a, heads) if heads else a)
            elif kind == "bf16":
                ok &= t == 30 and np.array_equal(np.frombuffer(data, "<u2").reshape(a.shape), bf16(pairs(a, heads) if heads else a))
            else:
                q, d = wq[sname], wq[sname + "_scale"]
                if heads:
                    q, d = pairs(q, heads), pairs(d, heads)
                blk = np.frombuffer(data, np.uint8).reshape(a.shape[0], a.shape[1] // 32, 34)
                ok &= t == 8 and np.array_equal(blk[:, :, :2].copy().view("<u2")[:, :, 0], d) and \
                    np.array_equal(blk[:, :, 2:].copy().view("i1"), q.reshape(a.shape[0], -1, 32))
        check(ok and shapes, f"{kind}: every tensor's dimensions, type and values (q/k rows in pair order)")
    for what, opts, msg in [("gpt2", ["--n_layer", "1", "--n_head", "2", "--n_embd", "32", "--vocab_size", "40"], "only Llama"),
                            ("sla", ["--family", "llama", "--n_layer", "2", "--n_head", "2", "--n_embd", "32", "--vocab_size", "40",
                                     "--bias", "0", "--n_skip_layer", "1", "--n_skip_head", "1"], "Skip-Layer Attention")]:
        p = os.path.join(tmp, what + ".safetensors")
        subprocess.run([SKIPLM, "init", p, *opts], capture_output=True)
        out = os.path.join(tmp, what + ".gguf")
        r = write(p, out)
        check(r.returncode == 1 and msg in r.stderr and r.stderr.startswith("gguf_write.py:") and not os.path.exists(out),
              f"{what} refused: {r.stderr.strip()[:160]}")
    out = os.path.join(tmp, "qb.gguf")
    r = write(mq, out, "--type", "bf16")
    check(r.returncode == 1 and "--type bf16 of a file with 8-bit weights" in r.stderr and not os.path.exists(out),
          f"--type bf16 of an 8-bit file refused: {r.stderr.strip()[:160]}")


if __name__ == "__main__":
    main()
    finish()
