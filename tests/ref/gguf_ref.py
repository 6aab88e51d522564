"""A small GGUF writer and reader written from the format's specification (ggml's docs/gguf.md),
with Python's struct, independent of skiplm's C code:

  header: b"GGUF", u32 version (3), u64 tensor count, u64 key/value count;
  key/value: string key (u64 length + UTF-8 bytes), u32 value type, value;
  value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
               9 array (u32 element type, u64 count, elements), 10 u64, 11 i64, 12 f64;
  tensor info: string name, u32 n_dims, u64 ne[n_dims] (ne[0] the innermost, contiguous
               dimension: a PyTorch (rows, cols) matrix has ne = (cols, rows)), u32 ggml type,
               u64 offset within the data section (a multiple of the alignment);
  the data section starts at the next multiple of general.alignment (default 32).
ggml types written here: F32 0, F16 1, Q8_0 8 (per 32 consecutive elements: an fp16 scale d
then 32 int8 q, the value q * d), BF16 30; Q4_K 12 is written as raw bytes to test refusals.

And llama.cpp's conventions for the tensors of its converter (convert_hf_to_gguf.py), from an
HF state dict: names (token_embd, blk.N.attn_q, ...), llama's q/k rows permuted from HF's
halves to the interleaved pairs llama.cpp rotates, GPT-2's Conv1D weights transposed to
(out, in), 1-D tensors kept F32."""
import struct

import numpy as np
import torch

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_K, GGML_BF16 = 0, 1, 8, 12, 30
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
           I64: "<q", F64: "<d"}


def _s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def _value(t, v):
    if t == STR:
        return _s(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(_value(et, x) for x in items)
    return struct.pack(_SCALAR[t], v)


def q8_0(x):
    """llama.cpp's reference Q8_0 quantization of a float32 array (rows of a multiple of 32):
    d = max|x| / 127 of each block, q = round(x / d), d stored as fp16. Returns (bytes, dequantized)."""
    a = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(a).max(axis=1)
    d = amax / 127.0
    with np.errstate(divide="ignore"):
        idv = np.where(d > 0, 1.0 / d, 0.0).astype(np.float32)
    v = a * idv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)     # C's roundf: halves away from zero
    d16 = d.astype(np.float16)
    blocks = np.zeros((a.shape[0], 34), dtype=np.uint8)
    blocks[:, :2] = d16.view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = q.view(np.uint8)
    deq = (q.astype(np.float32) * d16.astype(np.float32)[:, None]).reshape(np.asarray(x).shape)
    return blocks.tobytes(), deq


def encode_tensor(t, ggml_type):
    """(bytes, the values as the file holds them, float32 tensor)"""
    x = t.detach().to(torch.float32).contiguous()
    if ggml_type == GGML_F32:
        return x.numpy().tobytes(), x
    if ggml_type == GGML_F16:
        h = x.to(torch.float16)
        return h.numpy().tobytes(), h.to(torch.float32)
    if ggml_type == GGML_BF16:
        b = x.to(torch.bfloat16)
        return b.view(torch.int16).numpy().tobytes(), b.to(torch.float32)
    if ggml_type == GGML_Q8_0:
        raw, deq = q8_0(x.numpy())
        return raw, torch.from_numpy(deq)
    raise ValueError(ggml_type)


def write(path, kv, tensors, alignment=32, version=3):
    """kv: list of (key, type, value) (arrays: (elem type, list)); tensors: list of (name,
    ggml type, shape as PyTorch's (outer first), raw bytes). Tensors are placed in order, each
    at a multiple of the alignment."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for k, t, v in kv:
        head += _s(k) + struct.pack("<I", t) + _value(t, v)
    off, data = 0, b""
    for name, gt, shape, raw in tensors:
        ne = list(reversed(shape))
        head += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", gt, off)
        pad = (-len(raw)) % alignment
        data += raw + b"\0" * pad
        off += len(raw) + pad
    head += b"\0" * ((-len(head)) % alignment)
    with open(path, "wb") as f:
        f.write(head + data)


def read(path):
    """(version, {key: (type, value)}, {name: (ggml type, ne list, raw bytes)})"""
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF"
    ver, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    pos = 24

    def rs():
        nonlocal pos
        n, = struct.unpack_from("<Q", b, pos)
        s = b[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s

    def rv(t):
        nonlocal pos
        if t == STR:
            return rs().decode()
        if t == ARR:
            et, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            return [rv(et) for _ in range(n)]
        v, = struct.unpack_from(_SCALAR[t], b, pos)
        pos += struct.calcsize(_SCALAR[t])
        return v
    kv = {}
    for _ in range(nkv):
        k = rs().decode()
        t, = struct.unpack_from("<I", b, pos)
        pos += 4
        kv[k] = (t, rv(t))
    align = kv.get("general.alignment", (U32, 32))[1]
    infos = []
    for _ in range(nt):
        name = rs().decode()
        nd, = struct.unpack_from("<I", b, pos)
        ne = list(struct.unpack_from("<%dQ" % nd, b, pos + 4))
        pos += 4 + 8 * nd
        gt, off = struct.unpack_from("<IQ", b, pos)
        pos += 12
        infos.append((name, gt, ne, off))
    start = (pos + align - 1) // align * align
    size = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2), GGML_Q8_0: (32, 34)}
    tensors = {}
    for name, gt, ne, off in infos:
        n = int(np.prod(ne))
        bl, by = size[gt]
        tensors[name] = (gt, ne, b[start + off:start + off + n // bl * by])
    return ver, kv, tensors


def decode(gt, ne, raw):
    """float32 tensor of PyTorch shape reversed(ne)"""
    shape = tuple(reversed(ne))
    if gt == GGML_F32:
        return torch.from_numpy(np.frombuffer(raw, dtype="<f4").copy()).view(shape)
    if gt == GGML_F16:
        return torch.from_numpy(np.frombuffer(raw, dtype="<f2").astype(np.float32)).view(shape)
    if gt == GGML_BF16:
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return torch.from_numpy(u.view(np.float32).copy()).view(shape)
    if gt == GGML_Q8_0:
        a = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
        d = a[:, :2].copy().view("<f2").astype(np.float32)
        q = a[:, 2:].copy().view(np.int8).astype(np.float32)
        return torch.from_numpy((q * d).reshape(shape))
    raise ValueError(gt)


# ----------------------------------------------------------- llama.cpp's conventions

def permute(w, n_head):
    """llama.cpp's converter: HF's q/k rows (halves) -> interleaved pairs"""
    w2 = w if w.dim() == 2 else w[:, None]
    d = w2.shape[0] // n_head
    return w2.reshape(n_head, 2, d // 2, w2.shape[1]).transpose(1, 2).reshape(w.shape)


LLAMA = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
GPT2 = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
        "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}


def from_hf(sd, arch, n_head=None, n_kv_head=None):
    """HF state dict -> list of (gguf name, tensor in llama.cpp's layout)"""
    out = []
    for k, v in sd.items():
        v = v.detach().to(torch.float32)
        if arch == "gpt2":
            k = k[len("transformer."):] if k.startswith("transformer.") else k
            if k.endswith((".attn.bias", ".attn.masked_bias")):
                continue
            top = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight", "ln_f.weight": "output_norm.weight",
                   "ln_f.bias": "output_norm.bias", "lm_head.weight": "output.weight"}
            if k in top:
                out.append((top[k], v))
                continue
            _, l, rest = k.split(".", 2)
            mod, kind = rest.rsplit(".", 1)
            if kind == "weight" and mod in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                v = v.t()                                       # Conv1D (in, out) -> (out, in)
            out.append((f"blk.{l}.{GPT2[mod]}.{kind}", v.contiguous()))
            continue
        top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
               "lm_head.weight": "output.weight"}
        if k in top:
            out.append((top[k], v))
            continue
        _, _, l, rest = k.split(".", 3)
        mod, kind = rest.rsplit(".", 1)
        if arch == "llama" and mod == "self_attn.q_proj":
            v = permute(v, n_head)
        elif arch == "llama" and mod == "self_attn.k_proj":
            v = permute(v, n_kv_head)
        out.append((f"blk.{l}.{LLAMA[mod]}.{kind}", v.contiguous()))
    return out


def write_model(path, kv, named, mtype, extra_tensors=()):
    """named: (name, float tensor) in llama.cpp's layout; 2-D ones as mtype, 1-D ones F32.
    Returns {name: the float32 values the file holds}."""
    tensors, held = [], {}
    for name, v in named:
        gt = mtype if v.dim() == 2 else GGML_F32
        raw, val = encode_tensor(v, gt)
        tensors.append((name, gt, tuple(v.shape), raw))
        held[name] = val
    write(path, kv, tensors + list(extra_tensors))
    return held
