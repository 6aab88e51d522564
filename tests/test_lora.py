"""LoRA (src/train/lora.c, cli/train_lora.c, docs/training.md) against PyTorch and PEFT's layout:

1. Forward and backward: a Llama base (HF folder, GQA) with an adapter on every matrix (random A
   and B in PEFT's file layout, q/k rows in HF's order): skiplm's logits, loss and the gradients
   of every lora_A and lora_B equal PyTorch's LoRA (W0 + alpha/r B A in each nn.Linear, autograd).
   The same for GPT-2 (fan_in_fan_out: Conv1D weights).
2. train --lora: the adapter folder has PEFT's file names, config keys and tensor names/shapes;
   the loss falls; only the adapters change (the base file is untouched).
3. Applying: export --lora writes merged weights equal to base + alpha/r B A (computed in
   PyTorch from the adapter's files); eval --lora gives the merged folder's loss; sample --lora runs;
   train --lora --q8 (an 8-bit frozen base) runs and reports its memory per base parameter.
4. Refusals: --lora-dropout out of [0, 1), a DoRA adapter, a missing tensor, a wrong shape, an adapter of
   another model.
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
from llama_ref import Llama, LlamaConfig  # noqa: E402
import hf_gpt2_ref as hf  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)
LLAMA_T = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def sk(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def write_adapter(folder, tensors, r, alpha, targets, fan_in_fan_out=False, extra=None):
    os.makedirs(folder, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(folder, "adapter_model.safetensors"),
                 metadata={"format": "pt"})
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
           "target_modules": targets, "bias": "none", "fan_in_fan_out": fan_in_fan_out, "use_rslora": False}
    cfg.update(extra or {})
    json.dump(cfg, open(os.path.join(folder, "adapter_config.json"), "w"))


def shard(path, V, n, seed=8, pattern=False):
    """random tokens, or (pattern) a sequence the model can learn: each token 7 after the last"""
    toks = (torch.arange(n) * 7 + seed) % V if pattern else torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = [20240520, 1, n]
    open(path, "wb").write(hdr.tobytes() + toks.numpy().astype(np.uint16).tobytes())
    return path


def llama_base(tmp, name="base", seed=3):
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, block_size=32, vocab_size=61, ffn_hidden=64,
                      norm_eps=1e-5, rope_theta=1e4)
    torch.manual_seed(0)
    model = Llama(cfg, halves=True)
    model.randomize(seed)
    folder = os.path.join(tmp, name)
    os.makedirs(folder, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
                 os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    json.dump({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "hidden_size": 32, "intermediate_size": 64, "max_position_embeddings": 32, "vocab_size": 61,
               "rms_norm_eps": 1e-5, "rope_theta": 1e4, "tie_word_embeddings": True}, open(os.path.join(folder, "config.json"), "w"))
    return cfg, model, folder


def lora_modules(model, prefix_filter):
    return {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.split(".")[-1] in prefix_filter
            and ".layers." in "." + n}


def forward_backward(tmp):
    cfg, model, folder = llama_base(tmp)
    r, alpha = 4, 8.0
    s = alpha / r
    g = torch.Generator().manual_seed(5)
    mods = lora_modules(model, LLAMA_T)
    AB, tensors = {}, {}
    for n, lin in mods.items():
        A = (0.2 * torch.randn(r, lin.in_features, generator=g)).requires_grad_()
        B = (0.2 * torch.randn(lin.out_features, r, generator=g)).requires_grad_()
        AB[n] = (A, B)
        tensors[f"base_model.model.{n}.lora_A.weight"] = A.detach()
        tensors[f"base_model.model.{n}.lora_B.weight"] = B.detach()
    ad = os.path.join(tmp, "adapter_rand")
    write_adapter(ad, tensors, r, alpha, LLAMA_T)
    # PyTorch: each adapted Linear computes with W0 + s B A
    for n, lin in mods.items():
        W0 = lin.weight.detach().clone()
        del lin.weight
        A, B = AB[n]
        lin.weight = W0 + s * B @ A
    g2 = torch.Generator().manual_seed(6)
    idx = torch.randint(0, 61, (2, 13), generator=g2)
    tgt = torch.randint(0, 61, (2, 13), generator=g2)
    logits, loss = model(idx, tgt)
    loss.backward()
    bpath = os.path.join(tmp, "batch.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, bpath)
    out = os.path.join(tmp, "grads")
    os.makedirs(out, exist_ok=True)
    if not check(run_tool("tool_lora", "grad", folder, ad, bpath, out), "llama: skiplm loads the PEFT adapter and runs"):
        return
    o, _ = st.load_file(os.path.join(out, "out.safetensors"))
    gr, _ = st.load_file(os.path.join(out, "adapter_model.safetensors"))
    dl = (o["logits"] - logits.detach()).abs().max().item()
    check(dl < 1e-4 and abs(o["loss"].item() - loss.item()) < 1e-5 and abs(o["loss_fb"].item() - loss.item()) < 1e-5,
          f"llama + LoRA on every matrix: logits (max diff {dl:.1e}) and loss equal PyTorch's")
    worst = 0.0
    for n, (A, B) in AB.items():
        for key, ref in (("lora_A", A.grad), ("lora_B", B.grad)):
            got = gr[f"base_model.model.{n}.{key}.weight"]
            worst = max(worst, ((got - ref).abs().max() / max(1.0, ref.abs().max().item())).item())
    check(worst < 1e-4, f"every lora_A and lora_B gradient equals PyTorch autograd's ({len(AB)} matrices, worst {worst:.1e}; "
          "q/k lora_B rows in HF's order)")
    # GPT-2: Conv1D, fan_in_fan_out
    hcfg = {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 32, "vocab_size": 61, "layer_norm_epsilon": 1e-5,
            "activation_function": "gelu_new"}
    p = hf.random_params(hcfg, seed=7)
    gf = os.path.join(tmp, "gpt2")
    os.makedirs(gf, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in p.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))},
                 os.path.join(gf, "model.safetensors"), metadata={"format": "pt"})
    json.dump({**hcfg, "model_type": "gpt2"}, open(os.path.join(gf, "config.json"), "w"))
    leaves = {k: v.clone() for k, v in p.items()}
    tensors, AB = {}, {}
    for l in range(2):
        for mname in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            W = p[f"h.{l}.{mname}.weight"]              # Conv1D (in, out)
            A = (0.2 * torch.randn(r, W.shape[0], generator=g)).requires_grad_()
            B = (0.2 * torch.randn(W.shape[1], r, generator=g)).requires_grad_()
            AB[f"transformer.h.{l}.{mname}"] = (A, B)
            tensors[f"base_model.model.transformer.h.{l}.{mname}.lora_A.weight"] = A.detach()
            tensors[f"base_model.model.transformer.h.{l}.{mname}.lora_B.weight"] = B.detach()
            leaves[f"h.{l}.{mname}.weight"] = W + s * (B @ A).t()          # PEFT's fan_in_fan_out delta
    ad2 = os.path.join(tmp, "adapter_gpt2")
    write_adapter(ad2, tensors, r, alpha, ["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True)
    logits, loss = hf.forward(leaves, hcfg, idx, tgt)
    loss.backward()
    out2 = os.path.join(tmp, "grads2")
    os.makedirs(out2, exist_ok=True)
    if check(run_tool("tool_lora", "grad", gf, ad2, bpath, out2), "gpt2: skiplm loads the PEFT adapter (fan_in_fan_out) and runs"):
        o, _ = st.load_file(os.path.join(out2, "out.safetensors"))
        gr, _ = st.load_file(os.path.join(out2, "adapter_model.safetensors"))
        worst = max(((gr[f"base_model.model.{n}.{k}.weight"] - t.grad).abs().max() / max(1.0, t.grad.abs().max().item())).item()
                    for n, (A, B) in AB.items() for k, t in (("lora_A", A), ("lora_B", B)))
        check(abs(o["loss"].item() - loss.item()) < 1e-5 and worst < 1e-4,
              f"gpt2 + LoRA on c_attn, c_proj, c_fc: loss and every adapter gradient equal PyTorch's (worst {worst:.1e})")


def training(tmp):
    cfg, model, folder = llama_base(tmp, "base_t", seed=4)
    train = shard(os.path.join(tmp, "train.bin"), 61, 4000, pattern=True)
    before = open(os.path.join(folder, "model.safetensors"), "rb").read()
    out = os.path.join(tmp, "adapter")
    r = sk("train", "--lora", "4", "--lora-alpha", "8", "--init", folder, "--train", train, "--val", train, "--out", out,
           "--steps", "40", "--batch", "4", "--seq", "16", "--lr", "1e-2", "--log-every", "10")
    if not check(r.returncode == 0, f"train --lora runs {r.stderr.strip()[-300:]}"):
        return None
    lines = [l for l in r.stdout.splitlines() if l.startswith("lora: val loss")]
    vb, va = (float(l.split()[-1]) for l in lines)
    check(va < vb - 0.5, f"train --lora: the validation loss falls on a learnable sequence ({vb:.4f} -> {va:.4f})")
    check(any("bytes per base parameter" in l for l in r.stdout.splitlines()), "train --lora reports its memory per base parameter")
    check(open(os.path.join(folder, "model.safetensors"), "rb").read() == before, "the base's file is untouched")
    # PEFT's layout
    files = sorted(os.listdir(out))
    c = json.load(open(os.path.join(out, "adapter_config.json")))
    t, md = st.load_file(os.path.join(out, "adapter_model.safetensors"))
    want = {f"base_model.model.model.layers.{l}.{blk}.{m}.lora_{ab}.weight"
            for l in range(2) for blk, ms in (("self_attn", ["q_proj", "k_proj", "v_proj", "o_proj"]),
                                              ("mlp", ["gate_proj", "up_proj", "down_proj"])) for m in ms for ab in "AB"}
    check(files == ["adapter_config.json", "adapter_model.safetensors", "lora_state.safetensors"],
          f"the adapter folder holds PEFT's two files and the training state {files}")
    check(c["peft_type"] == "LORA" and c["r"] == 4 and c["lora_alpha"] == 8 and c["task_type"] == "CAUSAL_LM" and
          c["bias"] == "none" and c["fan_in_fan_out"] is False and sorted(c["target_modules"]) == sorted(LLAMA_T) and
          c["lora_dropout"] == 0.0 and c["use_rslora"] is False,
          "adapter_config.json has PEFT's keys: peft_type, r, lora_alpha, target_modules, bias, task_type, fan_in_fan_out")
    shapes_ok = set(t) == want and all(
        (t[k].shape[0] == 4 if ".lora_A." in k else t[k].shape[1] == 4) for k in t)
    check(shapes_ok and md.get("format") == "pt",
          "adapter_model.safetensors: PEFT's tensor names (base_model.model.<module>.lora_A/B.weight), A (r, in), B (out, r)")
    check(all(t[k].abs().max() > 0 for k in t if "lora_B" in k), "training moved every lora_B away from its zero init")
    return cfg, folder, out, train, t, c


def applying(tmp, cfg, folder, out, train, t, c):
    merged = os.path.join(tmp, "merged")
    r = sk("export", folder, "--lora", out, "--out", merged)
    if check(r.returncode == 0, f"export --lora merges the adapter {r.stderr.strip()[-200:]}"):
        base, _ = st.load_file(os.path.join(folder, "model.safetensors"))
        mt, _ = st.load_file(os.path.join(merged, "model.safetensors"))
        s = c["lora_alpha"] / c["r"]
        worst = 0.0
        for k, W in base.items():
            mod = k[:-len(".weight")]
            a = t.get(f"base_model.model.{mod}.lora_A.weight")
            want = W + s * t[f"base_model.model.{mod}.lora_B.weight"] @ a if a is not None else W
            worst = max(worst, (mt[k] - want).abs().max().item())
        check(worst < 1e-6, f"merged weights equal base + alpha/r B A for every matrix, in HF's layout (worst {worst:.1e})")
    val = shard(os.path.join(tmp, "val.bin"), 61, 1000, seed=9)
    a = sk("eval", folder, val, "--lora", out, "--batch", "2", "--seq", "16", "--max-batches", "4")
    b = sk("eval", merged, val, "--batch", "2", "--seq", "16", "--max-batches", "4")
    check(a.returncode == 0 and a.stdout.split("\n")[0] == b.stdout.split("\n")[0],
          f"eval --lora: the loss of the merged folder ({a.stdout.strip()[:30]})")
    a2 = sk("eval", folder, val, "--adapter", out, "--batch", "2", "--seq", "16", "--max-batches", "4")
    check(a2.stdout == a.stdout, "eval --adapter is eval --lora")
    tok = os.path.join(tmp, "chars.json")
    json.dump({"type": "char", "vocab": [chr(ord("a") + i) for i in range(26)]}, open(tok, "w"))
    p = sk("sample", folder, "--lora", out, "--prompt", "abc", "--tokens", "5", "--temperature", "0", "--tokenizer", tok, "--quiet")
    pm = sk("sample", merged, "--prompt", "abc", "--tokens", "5", "--temperature", "0", "--tokenizer", tok, "--quiet")
    check(p.returncode == 0 and "merged" in p.stderr and p.stdout == pm.stdout,
          f"sample --lora: the merged folder's greedy text ({p.stdout.strip()!r})")
    q = sk("train", "--lora", "2", "--init", folder, "--train", train, "--out", os.path.join(tmp, "qlora"), "--steps", "3",
           "--batch", "2", "--seq", "16", "--q8")
    check(q.returncode == 0 and "base in 8 bits" in q.stdout and os.path.exists(os.path.join(tmp, "qlora", "adapter_model.safetensors")),
          f"train --lora --q8: an 8-bit frozen base (QLoRA-style) {q.stderr.strip()[-150:]}")
    e8 = sk("eval", folder, val, "--lora", os.path.join(tmp, "qlora"), "--q8", "--batch", "2", "--seq", "16", "--max-batches", "2")
    check(e8.returncode == 0, "eval --lora --q8: the adapter on the 8-bit base")


def refusals(tmp, folder, out, train):
    r = sk("train", "--lora", "4", "--lora-dropout", "1.5", "--init", folder, "--train", train, "--out", os.path.join(tmp, "x"))
    check(r.returncode == 2 and "lora-dropout" in r.stderr, f"refused: --lora-dropout 1.5: {r.stderr.strip()[:120]}")
    t, _ = st.load_file(os.path.join(out, "adapter_model.safetensors"))
    c = json.load(open(os.path.join(out, "adapter_config.json")))
    val = os.path.join(tmp, "val.bin")

    def bad(what, tensors, extra, words):
        d = os.path.join(tmp, "bad_adapter")
        shutil.rmtree(d, ignore_errors=True)
        write_adapter(d, tensors, c["r"], c["lora_alpha"], c["target_modules"], extra=extra)
        e = sk("eval", folder, val, "--lora", d, "--batch", "2", "--seq", "16", "--max-batches", "1")
        check(e.returncode != 0 and all(w in e.stderr for w in words), f"refused: {what}: {e.stderr.strip()[-150:]}")
    bad("a DoRA adapter", t, {"use_dora": True}, ["use_dora"])
    k0 = "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"
    bad("a missing tensor", {k: v for k, v in t.items() if k != k0}, None, [k0, "missing"])
    bad("a wrong shape", {**t, k0: t[k0][:, :2]}, None, ["up_proj", "must be"])
    bad("another model's extra tensor", {**t, "base_model.model.lm_head.lora_A.weight": torch.zeros(4, 32)}, None, ["not used"])


def main():
    tmp = tempfile.mkdtemp(prefix="skiplm_lora_")
    try:
        forward_backward(tmp)
        res = training(tmp)
        if res:
            cfg, folder, out, train, t, c = res
            applying(tmp, cfg, folder, out, train, t, c)
            refusals(tmp, folder, out, train)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
