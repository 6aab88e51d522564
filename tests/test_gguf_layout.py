"""GGUF files laid out as llama.cpp's own tools write them (tests/ref/gguf_lc_layout.py, from the
format's specification: custom general.alignment, the converter's and llama-quantize's tensor
orders, F16 and mixed-type files, a tied model without output.weight, the converter's general.*,
llama.* and tokenizer.ggml.* keys) load in skiplm with logits equal to PyTorch's on the weights
the file holds; what skiplm cannot run is refused by name. The same files from llama.cpp's real
tools: tests/test_gguf_llamacpp.py (where a llama.cpp build exists).

1. "convert --outtype f16": alignment 64, converter order, tied (no output.weight), F16 matrices,
   F32 norms, a "llama" vocabulary and chat template; the vocabulary, special ids and template read.
2. "llama-quantize Q8_0": alignment 128, llama-quantize's order, untied, Q8_0 matrices kept 8-bit
   (the 8-bit decoding kernel matches too).
3. mixed float matrices (F32 embedding, BF16 head, F16 blocks), alignment 16.
4. a Q8_0 file whose embedding is F16 (llama-quantize --token-embedding-type f16): skiplm keeps
   the file 8-bit, the F16 matrix quantized as `skiplm quantize` would (Q8_0's rounding).
5. refused by name: Q4_0, Q5_0 and IQ4_NL tensors (saying how to get a type skiplm reads), an
   unknown type number, architectures phi3 and gemma, a partial rotary dimension, experts, a
   key length other than the head's width, a "bert" vocabulary.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import SKIPLM, check, finish, run_tool  # noqa: E402
import gguf_ref as G  # noqa: E402
import gguf_lc_layout as L  # noqa: E402
from llama_ref import Llama, LlamaConfig  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)


def sk(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def model(cfg, seed):
    m = Llama(cfg, halves=True)
    m.randomize(seed=seed)
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    if not cfg.untied_head:
        sd.pop("lm_head.weight", None)
    return sd


def reference(cfg, held):
    ref = Llama(cfg, halves=True)
    sd = dict(held)
    if not cfg.untied_head:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    ref.load_state_dict(sd)
    return ref


def logits_check(tmp, what, path, cfg, held, bpath, idx, tgt, decode=False):
    with torch.no_grad():
        want, _ = reference(cfg, held)(idx, tgt)
    out = os.path.join(tmp, "out.safetensors")
    if not check(run_tool("tool_model", "run", path, bpath, out), f"{what}: skiplm loads the file"):
        return
    d = (st.load_file(out)[0]["logits"] - want).abs().max().item()
    check(d <= 1e-4, f"{what}: logits equal PyTorch's on the weights the file holds (max diff {d:.1e})")
    if decode:
        dec = os.path.join(tmp, "dec.safetensors")
        ok = run_tool("tool_model", "decode", path, bpath, dec, "fp32")
        dd = (st.load_file(dec)[0]["logits"] - want[0]).abs().max().item() if ok else 1.0
        check(dd <= 1e-4, f"{what}: cached decoding (8-bit kernel) equals PyTorch too (max diff {dd:.1e})")


def sk_q8(w):
    """skiplm's 8-bit rounding (src/core/quant.c, as `skiplm quantize`): per 32 weights the scale
    max|w| / 127 rounded up to fp16, each weight rounded to the nearest multiple of it"""
    x = w.numpy().astype(np.float32).reshape(-1, 32)
    want = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    h = want.astype(np.float16)
    h = np.where(h.astype(np.float32) < want, np.nextafter(h, np.float16(np.inf)), h)
    h = np.minimum(h, np.float16(65504)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(h[:, None] > 0, np.rint(x / h[:, None]), 0).clip(-127, 127)
    return torch.from_numpy((q * h[:, None]).astype(np.float32).reshape(w.shape))


def data_start(path):
    """where the file's data section starts (the reference reader's arithmetic)"""
    _, kv, tensors = G.read(path)
    b = open(path, "rb").read()
    name = next(iter(tensors))
    return b.find(tensors[name][2]) if tensors[name][2] else -1, kv


def main():
    tmp = tempfile.mkdtemp(prefix="skiplm_gguf_layout_")
    try:
        run_all(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


def run_all(tmp):
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=32, vocab_size=300, ffn_hidden=96,
                      norm_eps=1e-5, rope_theta=1e4, untied_head=0)
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, cfg.vocab_size, (2, 11), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (2, 11), generator=g)
    bpath = os.path.join(tmp, "batch.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, bpath)

    # 1. convert --outtype f16: tied, alignment 64, a sentencepiece vocabulary and a chat template
    sd = model(cfg, 1)
    tpl = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    p1 = os.path.join(tmp, "convert_f16.gguf")
    kv = L.kv_llama(cfg, 1, alignment=64, vocab=L.sp_vocab(cfg.vocab_size), chat_template=tpl)
    held = L.write(p1, cfg, sd, kv, lambda n, v: G.GGML_F16 if v.dim() == 2 else G.GGML_F32, "converter", 64)
    start, _ = data_start(p1)
    check(start > 0 and start % 64 == 0 and start % 128 != 0,
          f"the f16 file's data section starts at {start}: a multiple of 64, not of 128 (the alignment matters)")
    logits_check(tmp, "convert --outtype f16 layout (alignment 64, tied, no output.weight)", p1, cfg, held, bpath, idx, tgt)
    folder = os.path.join(tmp, "hf1")
    r = sk("export", p1, "--out", folder)
    tj = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8")) if r.returncode == 0 else {}
    tc = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8")) if r.returncode == 0 else {}
    vocab = tj.get("model", {}).get("vocab", {})
    check(vocab.get("<0x41>") == 3 + 0x41 and vocab.get("\u2581c") == 261 and tj.get("model", {}).get("byte_fallback") is True,
          "its \"llama\" vocabulary: the converter's token ids, byte tokens and byte fallback" + ("" if r.returncode == 0 else ": " + r.stderr[-200:]))
    check(tc.get("chat_template") == tpl and tc.get("eos_token") == "</s>" and tc.get("bos_token") == "<s>",
          f"its chat template and special tokens (bos <s>, eos </s>): {dict((k, tc.get(k)) for k in ('bos_token', 'eos_token'))}")
    c = sk("sample", p1, "--chat", "--prompt", "hi", "--tokens", "2", "--temperature", "0")
    check(c.returncode == 0 and "[user] hi</s>[assistant]" in c.stdout, "sample --chat renders the file's template with its eos token"
          + ("" if c.returncode == 0 else ": " + c.stderr[-200:]))

    # 2. llama-quantize Q8_0: untied, alignment 128, llama-quantize's order, 8-bit kept
    cfg2 = LlamaConfig(**{**cfg.__dict__, "untied_head": 1})
    sd2 = model(cfg2, 2)
    p2 = os.path.join(tmp, "quantize_q8_0.gguf")
    held2 = L.write(p2, cfg2, sd2, L.kv_llama(cfg2, 7, alignment=128), lambda n, v: G.GGML_Q8_0 if v.dim() == 2 else G.GGML_F32,
                    "quantize", 128)
    start, _ = data_start(p2)
    check(start % 128 == 0, f"the Q8_0 file's data section starts at {start}, a multiple of 128")
    logits_check(tmp, "llama-quantize Q8_0 layout (alignment 128, output first)", p2, cfg2, held2, bpath, idx, tgt, decode=True)

    # 3. mixed float matrices
    def mixed(n, v):
        if v.dim() == 1:
            return G.GGML_F32
        return {"token_embd.weight": G.GGML_F32, "output.weight": G.GGML_BF16}.get(n, G.GGML_F16)
    p3 = os.path.join(tmp, "mixed.gguf")
    held3 = L.write(p3, cfg2, sd2, L.kv_llama(cfg2, 1, alignment=16), mixed, "converter", 16)
    logits_check(tmp, "F32 embedding, BF16 head, F16 blocks in one file (alignment 16)", p3, cfg2, held3, bpath, idx, tgt)

    # 4. Q8_0 with an F16 embedding: the F16 matrix quantized to Q8_0 as skiplm's 8-bit models hold it
    p4 = os.path.join(tmp, "q8_f16emb.gguf")
    held4 = L.write(p4, cfg2, sd2, L.kv_llama(cfg2, 7),
                    lambda n, v: G.GGML_F32 if v.dim() == 1 else G.GGML_F16 if n == "token_embd.weight" else G.GGML_Q8_0, "quantize")
    held4["model.embed_tokens.weight"] = sk_q8(held4["model.embed_tokens.weight"])
    logits_check(tmp, "Q8_0 file with an F16 embedding (quantized to 8 bits on load)", p4, cfg2, held4, bpath, idx, tgt)

    # 5. refusals
    def expect(path, words, what):
        r = sk("eval", path, path)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        ok = r.returncode != 0 and all(w in r.stderr for w in words) and "Segmentation" not in r.stderr
        check(ok, f"refused: {what}: {msg[:170]}")
    f16 = lambda n, v: G.GGML_F32 if v.dim() == 1 else G.GGML_F16  # noqa: E731
    n_attn_q = 64 * 64
    for tname, gt, nbytes in (("Q4_0", 2, n_attn_q // 32 * 18), ("Q5_0", 6, n_attn_q // 32 * 22),
                              ("IQ4_NL", 20, n_attn_q // 32 * 18)):
        p = os.path.join(tmp, f"{tname}.gguf")
        L.write(p, cfg, sd, L.kv_llama(cfg, 1, alignment=64), f16, "converter", 64, raw={"blk.1.attn_q.weight": (gt, b"\0" * nbytes)})
        expect(p, [tname, "blk.1.attn_q.weight", "F32, F16, BF16 and Q8_0", "llama-quantize"], f"a {tname} tensor")
    p = os.path.join(tmp, "type99.gguf")
    L.write(p, cfg, sd, L.kv_llama(cfg, 1), f16, raw={"blk.0.ffn_up.weight": (99, b"\0" * 64)})
    expect(p, ["blk.0.ffn_up.weight", "99"], "an unknown tensor type number")
    for arch in ("phi3", "gemma"):
        p = os.path.join(tmp, arch + ".gguf")
        L.write(p, cfg, sd, [(k.replace("llama.", arch + "."), t, arch if k == "general.architecture" else v)
                             for k, t, v in L.kv_llama(cfg, 1)], f16)
        expect(p, [arch, "llama", "qwen2", "gpt2"], f"architecture {arch}")
    base = L.kv_llama(cfg, 1)
    for key, val, words, what in (("llama.rope.dimension_count", 8, ["rope.dimension_count", "8", "16"], "a partial rotary dimension"),
                                  ("llama.attention.key_length", 32, ["key_length", "32"], "a key length other than the head's width"),
                                  ("llama.expert_count", 8, ["expert_count"], "a mixture of experts")):
        p = os.path.join(tmp, "kv.gguf")
        kv = [(k, t, val if k == key else v) for k, t, v in base]
        if key not in [k for k, _, _ in base]:
            kv.append((key, G.U32, val))
        L.write(p, cfg, sd, kv, f16)
        expect(p, words, what)
    p = os.path.join(tmp, "bert.gguf")
    kv = [(k, t, "bert" if k == "tokenizer.ggml.model" else v) for k, t, v in L.kv_llama(cfg, 1, vocab=L.sp_vocab(cfg.vocab_size))]
    L.write(p, cfg, sd, kv, f16)
    r = sk("sample", p, "--prompt", "hi", "--tokens", "2")
    check(r.returncode != 0 and "bert" in r.stderr and "\"llama\"" in r.stderr,
          f"refused: a \"bert\" vocabulary, naming the two skiplm reads: {r.stderr.strip()[-160:]}")


if __name__ == "__main__":
    main()
