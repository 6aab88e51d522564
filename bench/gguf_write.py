#!/usr/bin/env python3
"""Write a skiplm Llama as a GGUF file (llama.cpp's format, version 3), for
bench/llama_cpp_bench.sh: the same weights in both engines.

  gguf_write.py WEIGHTS.safetensors OUT.gguf [--type f32|bf16]

An fp32 file is written with its matrices as F32 or (--type bf16) BF16, rounded to nearest even
as `skiplm sample --bf16` rounds them; a file of `skiplm quantize` (8-bit weights) as Q8_0, its
own int8 values and fp16 scales (a Q8_0 block is the fp16 scale, then the 32 int8 values: the
same numbers, so both engines read identical weights). Norm weights stay F32.

The layout, from the GGUF specification: the magic "GGUF", the version, the tensor count and
the metadata count; the metadata as key (length-prefixed UTF-8), value type, value; per tensor
its name, dimension count, dimensions (innermost first: a (rows, cols) matrix is [cols, rows]),
type and offset in the data section; the data section aligned to 32 bytes, each tensor at a
multiple of 32. Metadata: general.architecture "llama" and the llama.* hyperparameters; the
tokenizer is "none" with llama.vocab_size tokens (the benchmark works on token ids).

skiplm's files hold each head's q and k rows in Hugging Face's rotate-half order; llama.cpp's
llama architecture rotates adjacent pairs, so those rows are put back into pair order (with
their scale rows, for Q8_0), as llama.cpp's own converter does. Refused: SLA, K/V routing
tables, biases, RoPE scaling, GPT-2 models.

Only the Python standard library and numpy are used (and bench/export_ref.py's safetensors
reader and checks).
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_ref  # noqa: E402
from export_ref import Config, SafeTensors, common_refusals, hf_to_pairs, refuse  # noqa: E402


def die(msg):
    sys.stderr.write(f"gguf_write.py: {msg}\n")
    sys.exit(1)


export_ref.die = die            # its reader's and checks' messages under this script's name

ALIGN = 32
T_F32, T_Q8_0, T_BF16 = 0, 8, 30
V_U32, V_F32, V_STR = 4, 6, 8
FILE_TYPE = {T_F32: 0, T_Q8_0: 7, T_BF16: 32}     # llama_ftype: ALL_F32, MOSTLY_Q8_0, MOSTLY_BF16


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, val):
    out = gstr(key) + struct.pack("<I", vtype)
    if vtype == V_STR:
        return out + gstr(val)
    return out + struct.pack("<I" if vtype == V_U32 else "<f", val)


def raw(st, name, npdt):
    """A tensor's stored values as they are (I8, F16 bits)."""
    e = st.header[name]
    b, end = e["data_offsets"]
    n = (end - b) // np.dtype(npdt).itemsize
    return np.memmap(st.path, dtype=npdt, mode="r", offset=st.data_start + b, shape=(n,)).reshape(e["shape"])


def bf16_bits(a):
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def q8_0_bytes(q, d):
    rows, cols = q.shape
    blk = np.empty((rows, cols // 32), dtype=[("d", "<u2"), ("q", "i1", (32,))])
    blk["d"] = d
    blk["q"] = np.asarray(q).reshape(rows, cols // 32, 32)
    return blk.tobytes()


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and (argv[2] != "--type" or argv[3] not in ("f32", "bf16"))):
        die("usage: gguf_write.py WEIGHTS.safetensors OUT.gguf [--type f32|bf16]")
    st = SafeTensors(argv[0])
    c = Config(st)
    q8 = st.meta.get("quantization") == "q8_0"
    want = argv[3] if len(argv) == 4 else "f32"
    r = common_refusals(c, st)
    if c.family != "llama":
        r.append(f"family {c.family} (only Llama models)")
    if c.bias or c.qkv_bias:
        r.append("biases (bias 1 or qkv_bias 1)")
    if c.rope_scaling not in ("none", "") or c.rope_factor != 1.0:
        r.append(f"RoPE scaling ('{c.rope_scaling}', factor {c.rope_factor:g})")
    if q8 and want != "f32":
        r.append("--type bf16 of a file with 8-bit weights")
    refuse("GGUF (bench/gguf_write.py)", r)
    mtype = T_Q8_0 if q8 else T_BF16 if want == "bf16" else T_F32
    hs = c.C // c.H

    # (GGUF name, skiplm name, rows permuted to pairs over this many heads or 0)
    names = [("token_embd.weight", "model.embed_tokens.weight", 0)]
    for i in range(c.L):
        p = f"model.layers.{i}."
        names += [(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight", 0),
                  (f"blk.{i}.attn_q.weight", p + "self_attn.q_proj.weight", c.H),
                  (f"blk.{i}.attn_k.weight", p + "self_attn.k_proj.weight", c.Hkv),
                  (f"blk.{i}.attn_v.weight", p + "self_attn.v_proj.weight", 0),
                  (f"blk.{i}.attn_output.weight", p + "self_attn.o_proj.weight", 0),
                  (f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight", 0),
                  (f"blk.{i}.ffn_gate.weight", p + "mlp.gate_proj.weight", 0),
                  (f"blk.{i}.ffn_up.weight", p + "mlp.up_proj.weight", 0),
                  (f"blk.{i}.ffn_down.weight", p + "mlp.down_proj.weight", 0)]
    names.append(("output_norm.weight", "model.norm.weight", 0))
    if c.untied:
        names.append(("output.weight", "lm_head.weight", 0))

    def data(src, heads):
        """The tensor's GGUF type and bytes."""
        shape = st.shape(src)
        if len(shape) == 1:
            return T_F32, np.ascontiguousarray(st.get(src), dtype="<f4").tobytes()
        if q8:
            if st.header[src]["dtype"] != "I8":
                die(f"{st.path}: {src} is {st.header[src]['dtype']}, not the I8 of a quantized file")
            q, d = raw(st, src, np.int8), raw(st, src + "_scale", "<u2")
            if heads:
                q, d = hf_to_pairs(q, heads), hf_to_pairs(d, heads)
            return T_Q8_0, q8_0_bytes(q, d)
        w = st.get(src)
        if heads:
            w = hf_to_pairs(w, heads)
        if mtype == T_BF16:
            return T_BF16, bf16_bits(w).tobytes()
        return T_F32, np.ascontiguousarray(w, dtype="<f4").tobytes()

    def nbytes(src):
        shape = st.shape(src)
        n = int(np.prod(shape))
        if len(shape) == 1 or mtype == T_F32:
            return 4 * n, T_F32 if len(shape) == 1 else mtype
        return (n // 32 * 34 if mtype == T_Q8_0 else 2 * n), mtype

    meta = [kv("general.architecture", V_STR, "llama"),
            kv("general.name", V_STR, os.path.basename(argv[0])),
            kv("general.file_type", V_U32, FILE_TYPE[mtype]),
            kv("general.alignment", V_U32, ALIGN),
            kv("llama.context_length", V_U32, c.T),
            kv("llama.embedding_length", V_U32, c.C),
            kv("llama.block_count", V_U32, c.L),
            kv("llama.feed_forward_length", V_U32, c.F),
            kv("llama.attention.head_count", V_U32, c.H),
            kv("llama.attention.head_count_kv", V_U32, c.Hkv),
            kv("llama.rope.dimension_count", V_U32, hs),
            kv("llama.rope.freq_base", V_F32, c.theta),
            kv("llama.attention.layer_norm_rms_epsilon", V_F32, c.eps),
            kv("llama.vocab_size", V_U32, c.V),
            kv("tokenizer.ggml.model", V_STR, "none")]
    infos, off = [], 0
    for gname, src, _ in names:
        n, t = nbytes(src)
        dims = list(reversed(st.shape(src)))
        infos.append(gstr(gname) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims) +
                     struct.pack("<IQ", t, off))
        off += (n + ALIGN - 1) // ALIGN * ALIGN
    with open(argv[1], "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(names), len(meta)))
        for m in meta:
            f.write(m)
        for i in infos:
            f.write(i)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for gname, src, heads in names:
            t, b = data(src, heads)
            if len(b) != nbytes(src)[0] or t != nbytes(src)[1]:
                die(f"internal: {gname}: {len(b)} bytes of type {t}")
            f.write(b)
            f.write(b"\0" * (-len(b) % ALIGN))
    kind = {T_F32: "F32", T_BF16: "BF16", T_Q8_0: "Q8_0"}[mtype]
    print(f"wrote {argv[1]}: GGUF v3, llama, {c.L} layers, {c.C} wide, {c.H} heads ({c.Hkv} K/V), MLP {c.F}, "
          f"vocabulary {c.V}, matrices {kind}, {len(names)} tensors")


if __name__ == "__main__":
    main(sys.argv[1:])
