"""GGUF files written by llama.cpp's own tools, loaded by skiplm (docs/files.md), with llama.cpp
itself as the oracle. llama.cpp is not part of the suite's dependencies: it is the build that
bench/llama_cpp_bench.sh makes (`bash bench/llama_cpp_bench.sh --build-only`, the source that
npm's node-llama-cpp ships; then `cmake --build $BENCH_DIR/llama.cpp/build --target
llama-quantize`). Without it every part prints SKIP (and the script exits 0); the CI-run test of
llama.cpp's layout is tests/test_gguf_layout.py.

  LLAMA_CPP: the source tree (default $BENCH_DIR/llama.cpp, BENCH_DIR /tmp/skiplm-llama-bench);
  its gguf-py (llama.cpp's Python GGUF writer and reader), its build/bin/llama-quantize, and
  bench/llama_greedy.c compiled against its build/bin libraries.

1. llama.cpp's Python writer (gguf-py's GGUFWriter, the one convert_hf_to_gguf.py drives; the
   converter itself needs transformers, which this machine cannot install) writes a random Llama
   (GQA, untied head) from its Hugging Face state dict as the converter does for Llama: its
   metadata calls, tensor names from gguf-py's TensorNameMap, the converter's q/k permutation,
   and its "llama" vocabulary arrays; as --outtype f32, f16 and q8_0 would (2-D tensors F32 / F16
   / Q8_0 quantized by gguf-py, 1-D F32).
2. llama-quantize rewrites the F32 file as Q8_0, F16 and BF16 (its own C writer: its tensor
   order, its general.quantization_version and general.file_type).
3. Each file: skiplm's logits equal PyTorch's on the weights the file holds (read back and
   dequantized by gguf-py's GGUFReader, not by skiplm), max diff 1e-4; llama.cpp (llama_greedy)
   decodes 16 greedy tokens and skiplm's logits on the same ids pick the same tokens (F32: every
   token and the logits within 1e-4 of the largest; F16, BF16 and Q8_0, where llama.cpp also
   rounds the activations to F16/BF16/Q8_0 and skiplm keeps them fp32: the first token, the
   logits within 3% of the largest, the agreeing prefix printed).
"""
import glob
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
from llama_ref import Llama, LlamaConfig  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)
BENCH_DIR = os.environ.get("BENCH_DIR", "/tmp/skiplm-llama-bench")
LC = os.environ.get("LLAMA_CPP", os.path.join(BENCH_DIR, "llama.cpp"))
BIN = os.path.join(LC, "build", "bin")
QUANTIZE = os.path.join(BIN, "llama-quantize")
N_GREEDY = 16


def skip(what):
    print(f"SKIP {what}")
    sys.stdout.flush()


def greedy_tool(tmp):
    """bench/llama_greedy.c against llama.cpp's build, or None"""
    if not glob.glob(os.path.join(BIN, "libllama.so*")):
        return None
    exe = os.path.join(tmp, "llama_greedy")
    r = subprocess.run(["cc", "-O2", "-std=c11", os.path.join(ROOT, "bench", "llama_greedy.c"), "-I" + os.path.join(LC, "include"),
                        "-I" + os.path.join(LC, "ggml", "include"), "-L" + BIN, "-Wl,-rpath," + BIN, "-lllama", "-lggml",
                        "-lggml-base", "-o", exe], capture_output=True, text=True)
    if r.returncode:
        print(r.stderr[-400:])
        return None
    return exe


def vocab(V):
    """a "llama" (sentencepiece) vocabulary as the converter writes it: <unk> <s> </s>, the 256
    byte tokens <0xNN> (type 6), then word pieces"""
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


def write_gguf_py(gguf, path, cfg, sd, outtype):
    """gguf-py's GGUFWriter, as convert_hf_to_gguf.py's LlamaModel drives it"""
    Q = gguf.GGMLQuantizationType
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[outtype]
    w = gguf.GGUFWriter(path, "llama")
    w.add_type("model")
    w.add_name("Tiny Llama")
    w.add_size_label("tiny")
    w.add_block_count(cfg.n_layer)
    w.add_context_length(cfg.block_size)
    w.add_embedding_length(cfg.n_embd)
    w.add_feed_forward_length(cfg.ffn_hidden)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.n_kv_head)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_file_type(ftype)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.n_embd // cfg.n_head)
    w.add_key_length(cfg.n_embd // cfg.n_head)
    w.add_value_length(cfg.n_embd // cfg.n_head)
    toks, scores, types = vocab(cfg.vocab_size)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.n_layer)
    for k in sorted(sd):                    # a safetensors file's order, as the converter reads it
        v = sd[k].detach().to(torch.float32)
        if k.endswith("q_proj.weight"):     # the converter's LlamaModel.permute
            v = v.reshape(cfg.n_head, 2, v.shape[0] // cfg.n_head // 2, v.shape[1]).swapaxes(1, 2).reshape(v.shape)
        elif k.endswith("k_proj.weight"):
            v = v.reshape(cfg.n_kv_head, 2, v.shape[0] // cfg.n_kv_head // 2, v.shape[1]).swapaxes(1, 2).reshape(v.shape)
        name = names.get_name(k, try_suffixes=(".weight", ".bias"))
        data = v.numpy()
        if data.ndim == 2 and outtype == "f16":
            w.add_tensor(name, data.astype(np.float16))
        elif data.ndim == 2 and outtype == "q8_0":
            w.add_tensor(name, gguf.quants.quantize(data, Q.Q8_0), raw_dtype=Q.Q8_0)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def held(gguf, path, cfg):
    """the weights the file holds, read and dequantized by gguf-py's reader, back in HF's names and
    row order: a state dict for the PyTorch model"""
    r = gguf.GGUFReader(path)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.n_layer)
    ref = Llama(cfg, halves=True)
    sd = {}
    for k in ref.state_dict():
        sd[names.get_name(k, try_suffixes=(".weight", ".bias"))] = k
    out = {}
    for t in r.tensors:
        v = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
        v = v.reshape(tuple(int(n) for n in reversed(t.shape.tolist())))
        k = sd[t.name]
        for proj, nh in (("q_proj", cfg.n_head), ("k_proj", cfg.n_kv_head)):
            if k.endswith(proj + ".weight"):      # interleaved pairs -> HF's halves
                v = v.reshape(nh, v.shape[0] // nh // 2, 2, v.shape[1]).transpose(1, 2).reshape(v.shape)
        out[k] = v
    ref.load_state_dict(out)
    types = sorted({t.tensor_type.name for t in r.tensors})
    return ref, types, [t.name for t in r.tensors]


def shard(path, ids):
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = [20240520, 1, len(ids)]
    open(path, "wb").write(hdr.tobytes() + np.asarray(ids, dtype=np.uint16).tobytes())


def main():
    if not os.path.isdir(os.path.join(LC, "gguf-py", "gguf")):
        skip(f"llama.cpp's tools: no llama.cpp source tree at {LC} (bash bench/llama_cpp_bench.sh --build-only makes one)")
        finish()
    sys.path.insert(0, os.path.join(LC, "gguf-py"))
    try:
        import gguf
    except ImportError as e:
        skip(f"llama.cpp's gguf-py does not import here ({e})")
        finish()
    tmp = tempfile.mkdtemp(prefix="skiplm_gguf_lc_")
    try:
        run_all(gguf, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


def run_all(gguf, tmp):
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=64, vocab_size=320, ffn_hidden=96,
                      norm_eps=1e-5, rope_theta=1e4, untied_head=1)
    model = Llama(cfg, halves=True)
    model.randomize(seed=21)
    sd = model.state_dict()
    g = torch.Generator().manual_seed(6)
    idx = torch.randint(0, cfg.vocab_size, (2, 13), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (2, 13), generator=g)
    bpath = os.path.join(tmp, "batch.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, bpath)
    files = []
    for outtype in ("f32", "f16", "q8_0"):
        p = os.path.join(tmp, f"gguf-py-{outtype}.gguf")
        write_gguf_py(gguf, p, cfg, sd, outtype)
        files.append((f"gguf-py --outtype {outtype}", p))
    if os.access(QUANTIZE, os.X_OK):
        for t in ("Q8_0", "F16", "BF16"):
            p = os.path.join(tmp, f"quantize-{t}.gguf")
            r = subprocess.run([QUANTIZE, files[0][1], p, t], capture_output=True, text=True)
            if check(r.returncode == 0, f"llama-quantize F32 -> {t}" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
                files.append((f"llama-quantize {t}", p))
    else:
        skip(f"llama-quantize: not built ({QUANTIZE}; cmake --build {os.path.join(LC, 'build')} --target llama-quantize)")
    greedy = greedy_tool(tmp)
    if greedy is None:
        skip(f"llama.cpp's greedy tokens: no llama.cpp library in {BIN}")
    for what, p in files:
        ref, types, order = held(gguf, p, cfg)
        with torch.no_grad():
            want, _ = ref(idx, tgt)
        out = os.path.join(tmp, "out.safetensors")
        ok = run_tool("tool_model", "run", p, bpath, out)
        if not check(ok, f"{what}: skiplm loads the file ({'/'.join(types)} tensors, the first {order[0]})"):
            continue
        d = (st.load_file(out)[0]["logits"] - want).abs().max().item()
        check(d <= 1e-4, f"{what}: skiplm's logits equal PyTorch's on the weights gguf-py reads from the file (max diff {d:.1e})")
        if greedy is None:
            continue
        prompt = [5, 77, 160, 319]
        r = subprocess.run([greedy, p, str(N_GREEDY), "1", os.path.join(tmp, "ll.bin"), *map(str, prompt)],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, f"{what}: llama.cpp loads the file and decodes" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
            continue
        ll = [int(x) for x in r.stdout.split()]
        lg = np.fromfile(os.path.join(tmp, "ll.bin"), dtype="<f4").reshape(-1, cfg.vocab_size)
        seq = os.path.join(tmp, "seq.bin")
        shard(seq, prompt + ll)
        dump = os.path.join(tmp, "dump.safetensors")
        T = len(prompt) + N_GREEDY - 1
        e = subprocess.run([SKIPLM, "eval", p, seq, "--batch", "1", "--seq", str(T), "--max-batches", "1", "--dump-logits", dump],
                           capture_output=True, text=True)
        if not check(e.returncode == 0, f"{what}: skiplm eval --dump-logits on llama.cpp's tokens" + ("" if e.returncode == 0 else ": " + e.stderr[-300:])):
            continue
        t, _ = st.load_file(dump)
        sk = next(v for k, v in t.items() if "logit" in k).reshape(-1, cfg.vocab_size)[len(prompt) - 1:].numpy()
        picks = sk.argmax(axis=1).tolist()
        n = 0
        while n < N_GREEDY and picks[n] == ll[n]:
            n += 1
        rel = np.abs(sk - lg).max() / np.abs(lg).max()
        exact = "F32" in what.upper()
        if exact:
            check(n == N_GREEDY and rel < 1e-4, f"{what}: skiplm picks llama.cpp's {N_GREEDY} greedy tokens ({n} agree), "
                  f"logits within {rel:.1e} of the largest")
        else:
            print(f"INFO {what}: {n} of {N_GREEDY} greedy tokens agree (llama.cpp rounds the activations too)")
            check(n >= 1 and rel < 3e-2, f"{what}: skiplm picks llama.cpp's first greedy token, logits within {rel:.1e} of the largest")
    # the tokenizer arrays gguf-py wrote: skiplm reads them (an exported tokenizer.json of the same pieces)
    folder = os.path.join(tmp, "hf")
    r = subprocess.run([SKIPLM, "export", files[0][1], "--out", folder], capture_output=True, text=True)
    import json
    tj = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8")) if r.returncode == 0 else {}
    vocab_ok = tj.get("model", {}).get("vocab", {}).get("\u2581b") == 260 and tj.get("model", {}).get("byte_fallback") is True
    check(r.returncode == 0 and vocab_ok, "export --out: the sentencepiece vocabulary gguf-py wrote, ids and byte fallback kept"
          + ("" if r.returncode == 0 else ": " + r.stderr[-200:]))


if __name__ == "__main__":
    main()
