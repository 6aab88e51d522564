#!/usr/bin/env python3
"""Export skiplm weights to the file formats of two reference C programs, for
bench/vs_ref.sh (a measured comparison on identical weights):

  llm.c's CPU trainer (train_gpt2.c): the GPT-2 checkpoint it reads ("gpt2_124M.bin"):
      256 int32 header [20240326, 3, maxT, V, L, NH, C, Vp, 0...], then float32
      wte (Vp rows, the padding rows zero), wpe, and each per-layer tensor stacked over
      the layers (ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb),
      then lnfw lnfb. Linear weights (out, in), as skiplm stores them.
  llama2.c's run.c: the legacy model file: 7 int32 (dim, hidden_dim, n_layers, n_heads,
      n_kv_heads, vocab_size (negative: an unshared classifier follows), seq_len), then
      float32 tok_emb, rms_att, wq, wk, wv, wo, rms_ffn, w1 (gate), w2 (down), w3 (up),
      rms_final, freq_cis_real, freq_cis_imag (seq_len x head_size/2 each; written with
      the RoPE cos/sin although recent run.c ignores them), then wcls if unshared.
      run.c rotates adjacent pairs (2i, 2i+1); skiplm's files hold the q/k rows in Hugging
      Face's rotate-half order, so each head's rows are put back into pair order.
  llama2.c's runq.c: its int8 file (export.py --version 2), the same tensors quantized in
      groups of 64 with float32 scales (export_llama2c_q8 below).
  llama2.c's tokenizer.bin: int32 max_token_length, then per token float32 score,
      int32 length, bytes. Token i > 0 gets the one-character piece chr(0xF0000 + i)
      (Unicode private use plane 15: printable by run.c, never a space or a <0xNN> byte
      piece) and token 0 the piece " " (run.c's prompt encoder looks up " " for its dummy
      prefix; `ids` below skips spaces, so a model should not emit id 0), so run.c's
      output text maps back to token ids; --char-vocab writes the same
      pieces as a skiplm character vocabulary (vocab.json) so that `skiplm sample` prints
      the same text for the same ids.

Usage:
  export_ref.py WEIGHTS.safetensors [--llmc OUT.bin] [--llama2c OUT.bin] [--llama2c-q8 OUT.bin]
                [--tokenizer OUT_TOK.bin] [--char-vocab OUT.json]
helpers used by bench/vs_ref.sh:
  export_ref.py ids TEXT_FILE            token ids of a text made of the pieces above
  export_ref.py shard IN OUT START COUNT [REPEAT]
                                          llm.c token shard of tokens [START, START+COUNT) of IN;
                                          with REPEAT: those COUNT tokens REPEAT times, then the
                                          first again, so that every window of COUNT+1 tokens at a
                                          multiple of COUNT is the same (llm.c's shuffled loader
                                          then serves one batch whatever its order)
  export_ref.py shard-ids OUT ID...       llm.c token shard of the given ids
  export_ref.py dump-check DUMP.safetensors [FIRST]
                                          loss (float64) from `skiplm eval --dump-logits`; with
                                          FIRST, checks that from position FIRST on the argmax is
                                          the target (the shard being a greedy reference sequence)

Only the Python standard library and numpy are used.
"""
import json
import struct
import sys

import numpy as np

PIECE_BASE = 0xF0000          # token i <-> chr(PIECE_BASE + i)
LLMC_MAGIC, LLMC_VERSION = 20240326, 3
SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def die(msg):
    sys.stderr.write("export_ref.py: " + msg + "\n")
    sys.exit(1)


# ----------------------------------------------------------------------------- safetensors

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "F64": np.float64,
           "I32": np.int32, "I64": np.int64, "U16": np.uint16}


class SafeTensors:
    """Minimal reader: 8-byte little-endian header length, JSON header, raw data."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                die(f"{path}: too short for a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > 100 * 1024 * 1024:
                die(f"{path}: header length {n} is not plausible")
            try:
                self.header = json.loads(f.read(n))
            except ValueError as e:
                die(f"{path}: bad JSON header ({e})")
        self.data_start = 8 + n
        self.meta = self.header.pop("__metadata__", None) or {}

    def names(self):
        return list(self.header.keys())

    def has(self, name):
        return name in self.header

    def shape(self, name):
        return tuple(self.header[name]["shape"])

    def get(self, name):
        """The tensor as float32 (a read-only memory map where the file holds F32)."""
        if name not in self.header:
            die(f"{self.path}: no tensor '{name}'")
        e = self.header[name]
        dt, shape = e["dtype"], tuple(e["shape"])
        begin, end = e["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if dt == "BF16":
            raw = np.memmap(self.path, dtype=np.uint16, mode="r", offset=self.data_start + begin, shape=(count,))
            return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        if dt not in _DTYPES:
            die(f"{self.path}: tensor '{name}' has dtype {dt}, which this reader does not handle")
        npdt = np.dtype(_DTYPES[dt]).newbyteorder("<")
        if end - begin != count * npdt.itemsize:
            die(f"{self.path}: tensor '{name}': {end - begin} bytes for shape {list(shape)} of {dt}")
        a = np.memmap(self.path, dtype=npdt, mode="r", offset=self.data_start + begin, shape=(count,))
        a = a.reshape(shape)
        return a if dt == "F32" else a.astype(np.float32)


# ----------------------------------------------------------------------------- config


class Config:
    def __init__(self, st):
        m = st.meta
        if m.get("format") != "skiplm":
            die(f"{st.path}: no skiplm config in __metadata__ (write the file with skiplm: "
                "`skiplm init`, `skiplm train`)")
        self.m = m

        def i(k, d=None):
            if k not in m:
                if d is None:
                    die(f"{st.path}: metadata lacks '{k}'")
                return d
            return int(float(m[k]))

        def f(k, d):
            return float(m[k]) if k in m else d

        self.family = m.get("family", "gpt2")
        self.gelu = m.get("gelu", "erf")
        self.L, self.H = i("n_layer"), i("n_head")
        self.Hkv = i("n_kv_head", self.H)
        self.C, self.T, self.V = i("n_embd"), i("block_size"), i("vocab_size")
        self.Vp = i("padded_vocab_size", self.V)
        self.bias, self.qkv_bias = i("bias", 0), i("qkv_bias", 0)
        self.F = i("ffn_hidden", 4 * self.C)
        self.n_skip_layer, self.n_skip_head = i("n_skip_layer", 0), i("n_skip_head", 0)
        self.routing = m.get("routing", "")
        self.sinusoidal, self.relu = i("sinusoidal", 0), i("relu", 0)
        self.untied = i("untied_head", 0)
        self.dropout = f("dropout", 0.0)
        self.eps = f("norm_eps", 1e-5)
        self.theta = f("rope_theta", 1e4)
        self.rope_scaling = m.get("rope_scaling", "none")
        self.rope_factor = f("rope_factor", 1.0)


def refuse(what, reasons):
    if reasons:
        die(f"{what} cannot represent this model:\n  - " + "\n  - ".join(reasons))


def common_refusals(c, st):
    r = []
    if c.n_skip_layer or c.n_skip_head:
        r.append(f"Skip-Layer Attention (n_skip_layer {c.n_skip_layer}, n_skip_head {c.n_skip_head})")
    if c.routing and c.routing not in ("none", "0"):
        r.append(f"a K/V routing table ('{c.routing}')")
    if c.sinusoidal:
        r.append("sinusoidal position embeddings (sinusoidal 1)")
    if c.relu:
        r.append("a ReLU MLP (relu 1)")
    if c.C % c.H:
        r.append(f"n_embd {c.C} not divisible by n_head {c.H}")
    if c.dropout:
        sys.stderr.write(f"export_ref.py: note: {st.path} was configured with dropout {c.dropout}; "
                         "the reference programs have no dropout (the weights export as they are)\n")
    return r


# ----------------------------------------------------------------------------- writers


def write_f32(f, a):
    np.ascontiguousarray(a, dtype="<f4").tofile(f)


def export_llmc(st, c, out):
    r = common_refusals(c, st)
    if c.family != "gpt2":
        r.append(f"family '{c.family}' (llm.c's train_gpt2.c is GPT-2 only: LayerNorm, learned positions, GELU MLP)")
    if c.gelu != "tanh":
        r.append(f"GELU '{c.gelu}' (train_gpt2.c uses the tanh approximation: create the model with --gelu tanh)")
    if not c.bias:
        r.append("a model without biases (bias 0): train_gpt2.c has biases in every Linear and LayerNorm")
    if c.untied:
        r.append("an untied classifier (untied_head 1): train_gpt2.c ties it to wte")
    if c.Hkv != c.H:
        r.append(f"grouped-query attention (n_kv_head {c.Hkv} != n_head {c.H})")
    if c.F != 4 * c.C:
        r.append(f"ffn_hidden {c.F} != 4 * n_embd")
    if abs(c.eps - 1e-5) > 1e-10:
        r.append(f"norm_eps {c.eps:g} (train_gpt2.c's LayerNorm uses 1e-5)")
    refuse("llm.c (train_gpt2.c)", r)
    Vp = max(c.Vp, c.V)
    L, C = c.L, c.C
    p = "transformer."
    wte = st.get(p + "wte.weight")
    if wte.shape != (c.V, C) and wte.shape != (Vp, C):
        die(f"{st.path}: wte has shape {list(wte.shape)}, expected [{c.V}, {C}]")
    per_layer = [("ln_1.weight", (C,)), ("ln_1.bias", (C,)),
                 ("attn.c_attn.weight", (3 * C, C)), ("attn.c_attn.bias", (3 * C,)),
                 ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                 ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                 ("mlp.c_fc.weight", (4 * C, C)), ("mlp.c_fc.bias", (4 * C,)),
                 ("mlp.c_proj.weight", (C, 4 * C)), ("mlp.c_proj.bias", (C,))]
    header = np.zeros(256, dtype="<i4")
    header[:8] = [LLMC_MAGIC, LLMC_VERSION, c.T, c.V, L, c.H, C, Vp]
    with open(out, "wb") as f:
        header.tofile(f)
        write_f32(f, wte[: c.V])
        if Vp > c.V:
            np.zeros((Vp - c.V) * C, dtype="<f4").tofile(f)
        write_f32(f, st.get(p + "wpe.weight"))
        for suffix, shape in per_layer:
            for l in range(L):
                name = f"{p}h.{l}.{suffix}"
                a = st.get(name)
                if a.shape != shape:
                    # HF's Conv1D layout (in, out) would need a transpose: skiplm writes (out, in)
                    if a.shape == shape[::-1] and len(shape) == 2:
                        a = a.T
                    else:
                        die(f"{st.path}: {name} has shape {list(a.shape)}, expected {list(shape)}")
                write_f32(f, a)
        write_f32(f, st.get(p + "ln_f.weight"))
        write_f32(f, st.get(p + "ln_f.bias"))
    n = Vp * C + c.T * C + L * (12 * C * C + 13 * C) + 2 * C
    print(f"wrote {out}: llm.c GPT-2 checkpoint, maxT {c.T} V {c.V} Vp {Vp} L {L} NH {c.H} C {C}, {n} floats")


def hf_to_pairs(w, n_heads):
    """Rows of each head from rotate-half order back to adjacent-pair order (llama2.c's
    export.py does the same to undo HF's permutation)."""
    d1, d2 = w.shape
    return np.asarray(w).reshape(n_heads, 2, d1 // n_heads // 2, d2).transpose(0, 2, 1, 3).reshape(d1, d2)


def llama2c_parts(st, c):
    """The tensors llama2.c's run.c and runq.c read, checked, in skiplm's names' order:
    the q/k rows put back in adjacent-pair order, the classifier None when tied."""
    r = common_refusals(c, st)
    if c.family != "llama":
        r.append(f"family '{c.family}' (run.c is Llama: RMSNorm, RoPE, SwiGLU)")
    if c.bias or c.qkv_bias:
        r.append("biases (bias/qkv_bias 1): run.c's Linears have none")
    if abs(c.eps - 1e-5) > 1e-10:
        r.append(f"norm_eps {c.eps:g} (run.c's RMSNorm hard-codes 1e-5)")
    if c.theta != 10000.0:
        r.append(f"rope_theta {c.theta:g} (run.c hard-codes 10000)")
    if c.rope_scaling not in ("none", "") or c.rope_factor != 1.0:
        r.append(f"RoPE scaling ('{c.rope_scaling}', factor {c.rope_factor:g})")
    if c.H % c.Hkv:
        r.append(f"n_head {c.H} not a multiple of n_kv_head {c.Hkv}")
    if (c.C // c.H) % 2:
        r.append(f"odd head size {c.C // c.H}")
    refuse("llama2.c (run.c)", r)
    L, C, F, hs = c.L, c.C, c.F, c.C // c.H
    kv = c.Hkv * hs
    p = "model."
    has_head = st.has("lm_head.weight")
    if c.untied and not has_head:
        die(f"{st.path}: untied_head 1 but no lm_head.weight")

    def layers(suffix, shape, fix=None):
        out = []
        for l in range(L):
            name = f"{p}layers.{l}.{suffix}"
            a = st.get(name)
            if a.shape != shape:
                die(f"{st.path}: {name} has shape {list(a.shape)}, expected {list(shape)}")
            out.append(fix(a) if fix else a)
        return out

    emb = st.get(p + "embed_tokens.weight")
    if emb.shape[0] < c.V or emb.shape[1] != C:
        die(f"{st.path}: embed_tokens has shape {list(emb.shape)}, expected [{c.V}, {C}]")
    return {
        "emb": emb[: c.V],
        "att_norm": layers("input_layernorm.weight", (C,)),
        "wq": layers("self_attn.q_proj.weight", (C, C), lambda a: hf_to_pairs(a, c.H)),
        "wk": layers("self_attn.k_proj.weight", (kv, C), lambda a: hf_to_pairs(a, c.Hkv)),
        "wv": layers("self_attn.v_proj.weight", (kv, C)),
        "wo": layers("self_attn.o_proj.weight", (C, C)),
        "ffn_norm": layers("post_attention_layernorm.weight", (C,)),
        "w1": layers("mlp.gate_proj.weight", (F, C)),
        "w2": layers("mlp.down_proj.weight", (C, F)),
        "w3": layers("mlp.up_proj.weight", (F, C)),
        "norm": st.get(p + "norm.weight"),
        "head": st.get("lm_head.weight")[: c.V] if c.untied else None,
    }


def export_llama2c(st, c, out):
    t = llama2c_parts(st, c)
    L, C, F, hs = c.L, c.C, c.F, c.C // c.H
    cfg = np.array([C, F, L, c.H, c.Hkv, -c.V if c.untied else c.V, c.T], dtype="<i4")
    with open(out, "wb") as f:
        cfg.tofile(f)
        write_f32(f, t["emb"])
        for k in ("att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"):
            for a in t[k]:
                write_f32(f, a)
        write_f32(f, t["norm"])
        # freq_cis (seq_len, head_size/2): cos and sin of pos * theta^(-2j/hs)
        freqs = 1.0 / (10000.0 ** (np.arange(0, hs, 2, dtype=np.float64) / hs))
        ang = np.outer(np.arange(c.T, dtype=np.float64), freqs)
        write_f32(f, np.cos(ang))
        write_f32(f, np.sin(ang))
        if c.untied:
            write_f32(f, t["head"])
    print(f"wrote {out}: llama2.c model, dim {C} hidden {F} layers {L} heads {c.H} kv_heads {c.Hkv} "
          f"vocab {c.V}{' (unshared classifier)' if c.untied else ''} seq_len {c.T}")


def export_llama2c_q8(st, c, out, group=64):
    """llama2.c's int8 file for runq.c (its export.py --version 2): a 256-byte header (uint32
    magic "ak42", int32 version 2, the 7 config ints, uint8 shared classifier, int32 group
    size, zeros), float32 RMSNorm weights (attention, MLP, final), then each matrix as int8
    values and float32 scales, one per group of `group` consecutive values (max|w| / 127;
    halved until it divides dim and hidden_dim): embedding, wq, wk, wv, wo, w1, w2, w3 of every layer, and
    the classifier if unshared. The same weights as --llama2c, quantized the way runq.c's
    exporter does (round half to even, no clipping)."""
    t = llama2c_parts(st, c)
    L, C, F = c.L, c.C, c.F
    while C % group or F % group:       # runq.c's products and activations go in whole groups
        group //= 2

    def quantized(a):
        w = np.asarray(a, dtype=np.float32).reshape(-1, group)
        scale = np.abs(w).max(axis=1) / 127.0
        safe = np.where(scale > 0, scale, 1.0).astype(np.float32)
        q = np.round(w / safe[:, None]).astype(np.int8)
        return q, scale.astype(np.float32)

    with open(out, "wb") as f:
        head = struct.pack("<Ii", 0x616B3432, 2) + struct.pack("<7i", C, F, L, c.H, c.Hkv, c.V, c.T)
        head += struct.pack("<Bi", 0 if c.untied else 1, group)
        f.write(head + b"\0" * (256 - len(head)))
        for k in ("att_norm", "ffn_norm"):
            for a in t[k]:
                write_f32(f, a)
        write_f32(f, t["norm"])
        mats = [t["emb"]] + [a for k in ("wq", "wk", "wv", "wo", "w1", "w2", "w3") for a in t[k]]
        if c.untied:
            mats.append(t["head"])
        for a in mats:
            q, s = quantized(a)
            f.write(q.tobytes())
            write_f32(f, s)
    print(f"wrote {out}: llama2.c int8 model (runq.c, group {group}), dim {C} hidden {F} layers {L} heads {c.H} "
          f"kv_heads {c.Hkv} vocab {c.V}{' (unshared classifier)' if c.untied else ''} seq_len {c.T}")


def piece(i):
    # id 0 is a space: run.c's prompt encoder always looks up " " (its dummy prefix)
    return " " if i == 0 else chr(PIECE_BASE + i)


def export_tokenizer(V, out):
    if PIECE_BASE + V > 0x10FFFF:
        die(f"vocabulary {V} too large for the one-character pieces")
    pieces = [piece(i).encode("utf-8") for i in range(V)]
    with open(out, "wb") as f:
        f.write(struct.pack("<i", max(len(b) for b in pieces)))
        for i, b in enumerate(pieces):
            f.write(struct.pack("<fi", 0.0, len(b)))
            f.write(b)
    print(f"wrote {out}: llama2.c tokenizer, {V} one-character pieces U+{PIECE_BASE:X}+id (BOS is id 1)")


def export_char_vocab(V, out):
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"type": "char", "vocab": [piece(i) for i in range(V)]}, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out}: skiplm character vocabulary with the same {V} pieces")


# ----------------------------------------------------------------------------- helpers


def text_ids(path):
    """Ids of a text made of the pieces; other characters (spaces, run.c's newline) are skipped."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="strict")
    return [ord(ch) - PIECE_BASE for ch in text if ord(ch) >= PIECE_BASE]


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    if len(raw) >= 1024 and head[0] == SHARD_MAGIC:
        n, width = int(head[2]), {1: 2, 2: 4}.get(int(head[1]))
        if width is None:
            die(f"{path}: shard version {int(head[1])}: this script reads versions 1 (uint16) and 2 (uint32)")
        toks = np.frombuffer(raw[1024:1024 + width * n], dtype="<u2" if width == 2 else "<u4")
        if len(toks) != n:
            die(f"{path}: header says {n} tokens, the file holds {len(toks)}")
        return toks
    return np.frombuffer(raw, dtype="<u2")   # headerless (nanoGPT)


def write_shard(path, toks):
    toks = np.asarray(toks)
    if toks.size and (toks.min() < 0 or toks.max() > 65535):
        die("token ids must fit uint16 for a shard")
    header = np.zeros(256, dtype="<i4")
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, toks.size]
    with open(path, "wb") as f:
        header.tofile(f)
        toks.astype("<u2").tofile(f)


def dump_check(path, first=None):
    st = SafeTensors(path)
    names = st.names()
    lname = next((n for n in names if "logit" in n), None)
    tname = next((n for n in names if "target" in n), None)
    if not lname or not tname:
        die(f"{path}: expected logits and targets tensors, found {names}")
    logits = np.asarray(st.get(lname), dtype=np.float64)
    targets = np.asarray(st.get(tname)).astype(np.int64).reshape(-1)
    V = logits.shape[-1]
    logits = logits.reshape(-1, V)
    mx = logits.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(logits - mx).sum(axis=1))
    loss = float(np.mean(lse - logits[np.arange(len(targets)), targets]))
    print(f"loss {loss:.7f} (float64, {len(targets)} positions of {path})")
    if first is None:
        return 0
    # the shard was the reference's whole sequence: from position `first` on, each target
    # is a greedy choice of the reference, so it must be this model's argmax too
    arg = logits.argmax(axis=1)
    srt = np.sort(logits, axis=1)
    margin = (srt[:, -1] - srt[:, -2])[first:]
    bad = int(np.sum(arg[first:] != targets[first:]))
    print(f"greedy check: {len(targets) - first} generated positions, {bad} argmax mismatches, smallest "
          f"top-1/top-2 logit margin {margin.min():.3e} (median {np.median(margin):.3e})")
    return 1 if bad else 0


# ----------------------------------------------------------------------------- main


def usage():
    sys.stderr.write(__doc__.split("Usage:")[1].split("Only the")[0].rstrip() + "\n")
    sys.exit(2)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        usage()
    if argv[0] == "ids":
        if len(argv) != 2:
            usage()
        print(" ".join(str(i) for i in text_ids(argv[1])))
        return 0
    if argv[0] == "shard":
        if len(argv) not in (5, 6):
            usage()
        toks = read_shard(argv[1])
        s, n = int(argv[3]), int(argv[4])
        if s + n > len(toks):
            die(f"{argv[1]} holds {len(toks)} tokens, fewer than {s + n}")
        part = toks[s:s + n]
        if len(argv) == 6:      # REPEAT copies and the first token again: every window of n+1 is the same
            part = np.concatenate([np.tile(part, int(argv[5])), part[:1]])
        write_shard(argv[2], part)
        return 0
    if argv[0] == "shard-ids":     # shard-ids OUT ID...  (a shard of the given ids)
        if len(argv) < 3:
            usage()
        write_shard(argv[1], [int(x) for x in argv[2:]])
        return 0
    if argv[0] == "dump-check":
        if len(argv) not in (2, 3):
            usage()
        return dump_check(argv[1], int(argv[2]) if len(argv) == 3 else None)
    weights, outs = None, {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--llmc", "--llama2c", "--llama2c-q8", "--tokenizer", "--char-vocab", "--vocab"):
            if i + 1 >= len(argv):
                die(f"{a} needs a value")
            outs[a] = argv[i + 1]
            i += 2
        elif a.startswith("-"):
            die(f"unknown option {a}")
        elif weights is None:
            weights = a
            i += 1
        else:
            die(f"unexpected argument {a}")
    if not outs:
        usage()
    st = SafeTensors(weights) if weights else None
    c = Config(st) if st else None
    if c is None and ("--llmc" in outs or "--llama2c" in outs or "--llama2c-q8" in outs):
        die("--llmc / --llama2c / --llama2c-q8 need a weights file")
    V = c.V if c else int(outs.get("--vocab", 0))
    if "--vocab" in outs and c and int(outs["--vocab"]) != c.V:
        die(f"--vocab {outs['--vocab']} contradicts the model's vocab_size {c.V}")
    if ("--tokenizer" in outs or "--char-vocab" in outs) and V < 1:
        die("--tokenizer / --char-vocab need a weights file or --vocab N")
    if "--llmc" in outs:
        export_llmc(st, c, outs["--llmc"])
    if "--llama2c" in outs:
        export_llama2c(st, c, outs["--llama2c"])
    if "--llama2c-q8" in outs:
        export_llama2c_q8(st, c, outs["--llama2c-q8"])
    if "--tokenizer" in outs:
        export_tokenizer(V, outs["--tokenizer"])
    if "--char-vocab" in outs:
        export_char_vocab(V, outs["--char-vocab"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
