"""GGUF files laid out the way llama.cpp's own writers lay them out, built with gguf_ref.py's
spec-level writer (ggml's docs/gguf.md), for tests/test_gguf_layout.py. What llama.cpp writes and
skiplm's own writer (src/io/gguf_model.c) does not:

  - general.alignment (u32) other than 32: every tensor's offset and the data section at a
    multiple of it (llama.cpp's writers record it when it is not the default);
  - the general.* keys of the converter (type, name, size_label, license, tags and languages as
    string arrays, file_type, quantization_version) and its llama.* keys: vocab_size,
    rope.dimension_count, attention.key_length / value_length;
  - a "llama" (sentencepiece) vocabulary as the converter writes it: tokens, scores (f32 array),
    token_type (i32 array), bos/eos/unknown/padding ids, add_bos_token / add_eos_token (bool),
    add_space_prefix, the chat template;
  - tensor orders: the converter's (the Hugging Face safetensors names sorted, each mapped to
    its GGUF name: within a block attn_norm, ffn_down, ffn_gate, ffn_up, ffn_norm, attn_k,
    attn_output, attn_q, attn_v), and llama-quantize's (output, output_norm, token_embd, then the
    blocks);
  - a tied model without output.weight (the converter writes none when the head is tied);
  - F16 matrices (convert --outtype f16), a Q8_0 file's 1-D tensors in F32, and files mixing
    F32 / F16 / BF16 / Q8_0 matrices (llama-quantize --token-embedding-type / --output-tensor-type).
"""
import gguf_ref as G

def kv_llama(cfg, file_type, alignment=None, vocab=None, chat_template=None):
    """the metadata llama.cpp's converter writes for a Llama, in its order"""
    hs = cfg.n_embd // cfg.n_head
    kv = [("general.architecture", G.STR, "llama"), ("general.type", G.STR, "model"), ("general.name", G.STR, "Tiny Llama"),
          ("general.size_label", G.STR, "0.1M"), ("general.license", G.STR, "mit"),
          ("general.tags", G.ARR, (G.STR, ["text-generation", "test"])), ("general.languages", G.ARR, (G.STR, ["en"])),
          ("llama.block_count", G.U32, cfg.n_layer), ("llama.context_length", G.U32, cfg.block_size),
          ("llama.embedding_length", G.U32, cfg.n_embd), ("llama.feed_forward_length", G.U32, cfg.ffn_hidden),
          ("llama.attention.head_count", G.U32, cfg.n_head), ("llama.attention.head_count_kv", G.U32, cfg.n_kv_head),
          ("llama.rope.freq_base", G.F32, cfg.rope_theta), ("llama.attention.layer_norm_rms_epsilon", G.F32, cfg.norm_eps),
          ("llama.attention.key_length", G.U32, hs), ("llama.attention.value_length", G.U32, hs),
          ("general.file_type", G.U32, file_type), ("llama.vocab_size", G.U32, cfg.vocab_size),
          ("llama.rope.dimension_count", G.U32, hs)]
    if alignment is not None:
        kv.append(("general.alignment", G.U32, alignment))
    if vocab is not None:
        toks, scores, types = vocab
        kv += [("tokenizer.ggml.model", G.STR, "llama"), ("tokenizer.ggml.pre", G.STR, "default"),
               ("tokenizer.ggml.tokens", G.ARR, (G.STR, toks)), ("tokenizer.ggml.scores", G.ARR, (G.F32, scores)),
               ("tokenizer.ggml.token_type", G.ARR, (G.I32, types)), ("tokenizer.ggml.bos_token_id", G.U32, 1),
               ("tokenizer.ggml.eos_token_id", G.U32, 2), ("tokenizer.ggml.unknown_token_id", G.U32, 0),
               ("tokenizer.ggml.padding_token_id", G.U32, 0), ("tokenizer.ggml.add_bos_token", G.BOOL, True),
               ("tokenizer.ggml.add_eos_token", G.BOOL, False), ("tokenizer.ggml.add_space_prefix", G.BOOL, True)]
        if chat_template is not None:
            kv.append(("tokenizer.chat_template", G.STR, chat_template))
    kv.append(("general.quantization_version", G.U32, 2))
    return kv


def sp_vocab(V):
    """a sentencepiece vocabulary as llama.cpp's converter writes one: <unk> (type 2), <s> </s>
    (type 3, control), the 256 byte tokens <0xNN> (type 6), then word pieces (type 1) with
    decreasing scores"""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    toks += ["<0x%02X>" % i for i in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    i = 0
    while len(toks) < V:
        toks.append("\u2581" + chr(ord("a") + i % 26) * (1 + i // 26))
        scores.append(-float(i))
        types.append(1)
        i += 1
    return toks, scores, types


HF_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}


def gguf_name(hf):
    if hf in HF_TOP:
        return HF_TOP[hf]
    _, _, l, rest = hf.split(".", 3)
    mod, kind = rest.rsplit(".", 1)
    return f"blk.{l}.{G.LLAMA[mod]}.{kind}"


def order(sd, how):
    """HF names in the order a llama.cpp tool writes their tensors"""
    names = list(sd)
    if how == "converter":
        return sorted(names)
    if how == "quantize":
        first = [n for n in ("lm_head.weight", "model.norm.weight", "model.embed_tokens.weight") if n in sd]
        return first + sorted((n for n in names if n not in first), key=gguf_name)
    raise ValueError(how)


def write(path, cfg, sd, kv, type_of, how="converter", alignment=32, raw=None):
    """sd: a Hugging Face Llama state dict (HF's q/k row order; without lm_head.weight for a tied
    model). type_of(gguf name, tensor) -> ggml type; raw: {gguf name: (ggml type, bytes)} written
    as they are (types skiplm refuses). Returns {HF name: the float32 values the file holds, in
    HF's row order}."""
    tensors, held = [], {}
    for hf in order(sd, how):
        name = gguf_name(hf)
        v = sd[hf].detach().float()
        if hf.endswith("q_proj.weight"):
            v = G.permute(v, cfg.n_head)
        elif hf.endswith("k_proj.weight"):
            v = G.permute(v, cfg.n_kv_head)
        if raw and name in raw:
            gt, b = raw[name]
            tensors.append((name, gt, tuple(v.shape), b))
            continue
        gt = type_of(name, v)
        b, val = G.encode_tensor(v, gt)
        tensors.append((name, gt, tuple(v.shape), b))
        if hf.endswith("q_proj.weight"):
            val = unpermute(val, cfg.n_head)
        elif hf.endswith("k_proj.weight"):
            val = unpermute(val, cfg.n_kv_head)
        held[hf] = val
    G.write(path, kv, tensors, alignment=alignment)
    return held


def unpermute(w, n_head):
    d = w.shape[0] // n_head
    return w.reshape(n_head, d // 2, 2, w.shape[1]).transpose(1, 2).reshape(w.shape)
