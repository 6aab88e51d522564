"""LoRA training on a frozen base (src/train/lora.c, cli/train_lora.c, docs/training.md) against
a plain-PyTorch reference of PEFT's LoRA layer: result = base(x) + lora_B(lora_A(dropout(x))) *
alpha / r, one nn.Dropout per adapted module. skiplm's dropout masks are counter-based
(sk_dropout: keep element i when hash32(seed, stream, i) >= p * 2^32, scaled by 1/(1 - p));
the reference rebuilds them from that documented hash (adapter i: stream 2^32 + i, in the
model's tensor order; training step s, micro-batch a: seed --seed + s * 1000003 + a).

1. One forward and backward with dropout 0.25 (tests/tool_lora): loss and every lora_A / lora_B
   gradient equal PyTorch autograd's through the same masks; with other masks they do not.
2. `train --lora 4 --lora-dropout 0.1` for 3 steps (AdamW, warmup, cosine, clipping) from
   skiplm's own adapter init (reproduced here): the adapter it writes equals PyTorch's after
   the same 3 steps (torch.optim.AdamW, clip_grad_norm_).
3. Determinism and resume: the same run twice gives identical files; another --seed or dropout
   0 gives another adapter; a run stopped after step 2 (SKIPLM_TEST_FAIL_AT) and resumed with
   --resume ends with files identical to the uninterrupted run's; --resume with other options
   is refused, naming them.
4. Memory: train --lora reports base gradients 0 and base AdamW state 0 and allocates them
   not: its peak RSS is below full fine-tuning's (which reports 16 bytes per parameter) by at
   least half of the 12 bytes per base parameter that gradients, m and v take.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import SKIPLM, check, finish, run_tool  # noqa: E402
from llama_ref import Llama, LlamaConfig  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)
LLAMA_T = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
STREAM0 = 1 << 32
M64 = (1 << 64) - 1


def sk(*args, env=None):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True, env=env)


# ------------------------------------------------------------ skiplm's documented randomness

def hash32(seed, stream, n):
    """core/ops.h's sk_hash32 for i = 0 .. n-1 (wrapping uint64 arithmetic)"""
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed & M64) ^ np.uint64((stream * 0x9E3779B97F4A7C15) & M64) ^ (i * np.uint64(0xD1B54A32D192ED03))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(32)).astype(np.uint32)


def dropout_mask(p, seed, stream, shape):
    """sk_dropout's multiplier: 0, or 1 / (1 - p) in float32"""
    n = int(np.prod(shape))
    thr = np.uint32(min(float(np.float32(p)) * 4294967296.0, 4294967295.0))
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(p))
    keep = hash32(seed, stream, n) >= thr
    return torch.from_numpy(np.where(keep, scale, np.float32(0)).astype(np.float32).reshape(shape))


def splitmix_uniform(seed, n):
    """lora.c's A init: splitmix64 from the seed, bound * (2 u - 1) with u = (x >> 11) / 2^53"""
    s, out = seed if seed else 1, np.empty(n, dtype=np.float64)
    for k in range(n):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        out[k] = 2.0 * ((z >> 11) / 9007199254740992.0) - 1.0
    return out


# ------------------------------------------------------------------------ the reference

class PeftLora:
    """PEFT's LoRA on every target Linear of the model, in plain torch: each forward of an
    adapted module adds scale * (x * mask) A^T B^T, the mask its own (or none)"""

    def __init__(self, model, r, alpha, AB):
        self.scale, self.AB, self.masks = alpha / r, AB, None
        self.mods = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.split(".")[-1] in LLAMA_T}
        for n, lin in self.mods.items():
            lin.weight.requires_grad_(False)
            lin.forward = self._forward(n, lin)

    def _forward(self, name, lin):
        def fwd(x):
            A, B = self.AB[name]
            xd = x if self.masks is None else x * self.masks[name].view(x.shape)
            return F.linear(x, lin.weight) + self.scale * F.linear(F.linear(xd, A), B)
        return fwd

    def set_masks(self, p, seed, N, order):
        if p == 0:
            self.masks = None
            return
        self.masks = {n: dropout_mask(p, seed, STREAM0 + i, (N, self.mods[n].in_features)) for i, n in enumerate(order)}


def order(cfg):
    """the adapters in skiplm's tensor order (its dropout streams)"""
    return [f"model.layers.{l}.{blk}.{m}" for l in range(cfg.n_layer)
            for blk, m in [("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
                           ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj")]]


def base(tmp, cfg, seed=3, name="base"):
    torch.manual_seed(0)
    model = Llama(cfg, halves=True)
    model.randomize(seed)
    folder = os.path.join(tmp, name)
    os.makedirs(folder, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
                 os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    json.dump({"model_type": "llama", "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
               "num_key_value_heads": cfg.n_kv_head, "hidden_size": cfg.n_embd, "intermediate_size": cfg.ffn_hidden,
               "max_position_embeddings": cfg.block_size, "vocab_size": cfg.vocab_size, "rms_norm_eps": cfg.norm_eps,
               "rope_theta": cfg.rope_theta, "tie_word_embeddings": True}, open(os.path.join(folder, "config.json"), "w"))
    return model, folder


def shard(path, toks):
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = [20240520, 1, len(toks)]
    open(path, "wb").write(hdr.tobytes() + np.asarray(toks, dtype=np.uint16).tobytes())
    return path


CFG = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, block_size=32, vocab_size=61, ffn_hidden=64, norm_eps=1e-5,
                  rope_theta=1e4)


def grad_with_dropout(tmp):
    model, folder = base(tmp, CFG)
    r, alpha, p, seed = 4, 8.0, 0.25, 77
    g = torch.Generator().manual_seed(5)
    AB, tensors = {}, {}
    for n in order(CFG):
        lin = dict(model.named_modules())[n]
        A = (0.2 * torch.randn(r, lin.in_features, generator=g)).requires_grad_()
        B = (0.2 * torch.randn(lin.out_features, r, generator=g)).requires_grad_()
        AB[n] = (A, B)
        tensors[f"base_model.model.{n}.lora_A.weight"] = A.detach()
        tensors[f"base_model.model.{n}.lora_B.weight"] = B.detach()
    ad = os.path.join(tmp, "adapter")
    os.makedirs(ad, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(ad, "adapter_model.safetensors"), metadata={"format": "pt"})
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": p,
               "target_modules": LLAMA_T, "bias": "none", "fan_in_fan_out": False, "use_rslora": False},
              open(os.path.join(ad, "adapter_config.json"), "w"))
    g2 = torch.Generator().manual_seed(6)
    idx = torch.randint(0, 61, (2, 13), generator=g2)
    tgt = torch.randint(0, 61, (2, 13), generator=g2)
    bpath = os.path.join(tmp, "batch.safetensors")
    st.save_file({"inputs": idx.int(), "targets": tgt.int()}, bpath)
    out = os.path.join(tmp, "grads")
    os.makedirs(out, exist_ok=True)
    if not check(run_tool("tool_lora", "grad", folder, ad, bpath, out, str(p), str(seed)),
                 "tool_lora: forward and backward with LoRA dropout 0.25"):
        return
    o, _ = st.load_file(os.path.join(out, "out.safetensors"))
    gr, _ = st.load_file(os.path.join(out, "adapter_model.safetensors"))
    lora = PeftLora(model, r, alpha, AB)
    with torch.no_grad():
        _, loss_eval = model(idx, tgt)
    check(abs(o["loss"].item() - loss_eval.item()) < 1e-5, "evaluation passes use no dropout (the loss of the undropped adapters)")
    check(o["model_grads"].item() == 0, "after a backward pass with the adapters attached the base holds no gradient buffer")

    def worst_with(seed_used):
        for A, B in AB.values():
            A.grad = B.grad = None
        lora.set_masks(p, seed_used, 2 * 13, order(CFG))
        _, loss = model(idx, tgt)
        loss.backward()
        w = max(((gr[f"base_model.model.{n}.{k}.weight"] - t.grad).abs().max() / max(1.0, t.grad.abs().max().item())).item()
                for n, (A, B) in AB.items() for k, t in (("lora_A", A), ("lora_B", B)))
        return loss.item(), w
    loss, worst = worst_with(seed)
    check(abs(o["loss_fb"].item() - loss) < 1e-5 and worst < 1e-4,
          f"dropout 0.25: the training loss and all {2 * len(AB)} adapter gradients equal PyTorch's through the same masks "
          f"(worst {worst:.1e})")
    _, other = worst_with(seed + 1)
    check(other > 1e-2, f"with another seed's masks the gradients differ ({other:.1e}): the masks are the ones compared")
    lora.masks = None


def train_cmd(folder, data, out, steps, *extra):
    return ["train", "--lora", "4", "--lora-alpha", "8", "--init", folder, "--train", data, "--out", out, "--steps", str(steps),
            "--batch", "2", "--seq", "16", "--lr", "1e-2", "--min-lr", "1e-3", "--warmup", "1", "--grad-clip", "0.5",
            "--log-every", "1", *extra]


def training_vs_reference(tmp):
    model, folder = base(tmp, CFG, seed=4, name="base_t")
    T, steps, p, seed = 16, 3, 0.1, 1234
    toks = (np.arange(T + 1) * 7 + 3) % CFG.vocab_size      # one window: every batch is the same two rows
    data = shard(os.path.join(tmp, "one.bin"), toks)
    out = os.path.join(tmp, "ad_t")
    r = sk(*train_cmd(folder, data, out, steps, "--lora-dropout", str(p), "--seed", str(seed)))
    if not check(r.returncode == 0, "train --lora --lora-dropout 0.1 runs" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
        return None
    cfgj = json.load(open(os.path.join(out, "adapter_config.json")))
    check(abs(cfgj["lora_dropout"] - 0.1) < 1e-7, f"adapter_config.json records lora_dropout {cfgj['lora_dropout']}")
    # the reference: skiplm's init, then 3 steps of PEFT-style training
    rank, alpha = 4, 8.0
    mods = dict(model.named_modules())
    names = order(CFG)
    u = splitmix_uniform(seed, sum(rank * mods[n].in_features for n in names))
    AB, k = {}, 0
    for n in names:
        fin = mods[n].in_features
        bound = np.float32(1.0) / np.sqrt(np.float32(fin), dtype=np.float32)
        A = torch.from_numpy((bound * u[k:k + rank * fin].astype(np.float32)).reshape(rank, fin)).requires_grad_()
        k += rank * fin
        AB[n] = (A, torch.zeros(mods[n].out_features, rank, requires_grad=True))
    lora = PeftLora(model, rank, alpha, AB)
    params = [t for n in names for t in AB[n]]
    opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, foreach=False)
    x = torch.tensor(np.stack([toks[:T], toks[:T]]).astype(np.int64))
    y = torch.tensor(np.stack([toks[1:], toks[1:]]).astype(np.int64))
    import math
    lr_sum = 0.0
    for s in range(1, steps + 1):
        it = s - 1
        lr = 1e-2 * (it + 1) / 2 if it < 1 else 1e-3 + 0.5 * (1 + math.cos(math.pi * (it - 1) / (steps - 1))) * (1e-2 - 1e-3)
        lr_sum += lr
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        opt.zero_grad()
        lora.set_masks(p, seed + s * 1000003, 2 * T, names)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
    got, _ = st.load_file(os.path.join(out, "adapter_model.safetensors"))
    diffs = torch.cat([(got[f"base_model.model.{n}.lora_{w}.weight"] - t.detach()).abs().flatten()
                       for n, (A, B) in AB.items() for w, t in (("A", A), ("B", B))])
    moved = min((got[f"base_model.model.{n}.lora_B.weight"]).abs().max().item() for n in names)
    # an Adam step moves a weight by up to about lr whatever its gradient's size, so an element
    # whose gradient is near zero amplifies rounding: the bound is 0.1% of the lr summed over
    # the steps (a wrong mask, scale or step moves weights by about lr), and nearly every
    # element agrees to 1e-6
    bound = 1e-3 * lr_sum
    close = (diffs <= 1e-6).float().mean().item()
    check(diffs.max().item() < bound and close > 0.99 and moved > 0,
          f"3 steps of train --lora with dropout 0.1: every A and B equals the PyTorch reference's (AdamW, warmup, cosine, "
          f"clipping, the masks): worst {diffs.max().item():.1e} (bound {bound:.1e}), {100 * close:.2f}% within 1e-6")
    # the merged model as skiplm's own weights file: the loss of the adapter applied at load
    merged = os.path.join(tmp, "merged.safetensors")
    e = sk("export", folder, "--merge-lora", out, "--weights", merged)
    a = sk("eval", merged, data, "--batch", "1", "--seq", "16", "--max-batches", "1")
    b = sk("eval", folder, data, "--lora", out, "--batch", "1", "--seq", "16", "--max-batches", "1")
    check(e.returncode == 0 and a.returncode == 0 and a.stdout.split("\n")[0] == b.stdout.split("\n")[0] and a.stdout.startswith("loss"),
          f"export --merge-lora --weights: eval gives the loss of --lora at load ({a.stdout.strip()[:30]})" +
          ("" if e.returncode == 0 else ": " + e.stderr[-200:]) + ("" if a.returncode == 0 else ": " + a.stderr[-200:]))
    return folder, data


def determinism_resume(tmp, folder, data):
    def files(d):
        return [open(os.path.join(d, f), "rb").read() for f in ("adapter_model.safetensors", "lora_state.safetensors")]
    runs = {}
    for tag, extra in (("a", ["--lora-dropout", "0.2"]), ("b", ["--lora-dropout", "0.2"]), ("seed", ["--lora-dropout", "0.2", "--seed", "9"]),
                       ("p0", [])):
        d = os.path.join(tmp, "det_" + tag)
        r = sk(*train_cmd(folder, data, d, 4, *extra))
        runs[tag] = files(d) if r.returncode == 0 else None
    check(runs["a"] is not None and runs["a"] == runs["b"], "the same train --lora --lora-dropout twice: identical adapter and state files")
    check(runs["seed"] is not None and runs["seed"][0] != runs["a"][0], "another --seed: another adapter")
    check(runs["p0"] is not None and runs["p0"][0] != runs["a"][0], "--lora-dropout 0.2 trains another adapter than 0")
    d = os.path.join(tmp, "det_resume")
    env = dict(os.environ, SKIPLM_TEST_FAIL_AT="0:3")
    r1 = sk(*train_cmd(folder, data, d, 4, "--lora-dropout", "0.2", "--ckpt-every", "2"), env=env)
    check(r1.returncode != 0 and "injected failure" in r1.stderr and os.path.exists(os.path.join(d, "lora_state.safetensors")),
          "a run stopped before step 3 leaves its step-2 state")
    r2 = sk(*train_cmd(folder, data, d, 4, "--lora-dropout", "0.2", "--ckpt-every", "2", "--resume", d))
    check(r2.returncode == 0 and "resumed at step 2" in r2.stdout and files(d) == runs["a"],
          "--resume: steps 3 and 4 end with files identical to the uninterrupted run's (bit for bit)"
          + ("" if r2.returncode == 0 else ": " + r2.stderr[-200:]))
    r3 = sk(*train_cmd(folder, data, os.path.join(tmp, "x"), 4, "--lora-dropout", "0.3", "--resume", d))
    check(r3.returncode != 0 and "other options" in r3.stderr and "dropout=0.2" in r3.stderr,
          f"--resume with another --lora-dropout refused: {r3.stderr.strip()[-140:]}")


def rss(stderr_or_out):
    m = re.search(r"peak RSS ([0-9.]+) MiB", stderr_or_out)
    return float(m.group(1)) if m else None


def memory(tmp):
    cfg = LlamaConfig(n_layer=4, n_head=4, n_kv_head=4, n_embd=256, block_size=32, vocab_size=2048, ffn_hidden=768,
                      norm_eps=1e-5, rope_theta=1e4)
    _, folder = base(tmp, cfg, name="big")
    n = sum(v.numel() for k, v in Llama(cfg, halves=True).state_dict().items() if k != "lm_head.weight")
    data = shard(os.path.join(tmp, "big.bin"), (np.arange(400) * 5) % 2048)
    full = sk("train", "--init", folder, "--train", data, "--out", os.path.join(tmp, "full"), "--steps", "2", "--batch", "2",
              "--seq", "16", "--eval-every", "0")
    lora = sk(*train_cmd(folder, data, os.path.join(tmp, "lm"), 2))
    fl = [l for l in full.stderr.splitlines() if "allocated:" in l]
    ll = [l for l in (lora.stdout if lora else "").splitlines() if "allocated:" in l]
    check(full.returncode == 0 and fl and f"gradients {4 * n}" in fl[0] and f"AdamW m and v {8 * n}" in fl[0],
          f"full fine-tuning reports its allocation: {fl[0][:150] if fl else full.stderr[-200:]}")
    check(lora.returncode == 0 and ll and "base gradients 0, base AdamW state 0" in ll[0] and
          f"base weights {4 * n} bytes" in ll[0], f"train --lora reports its allocation: {ll[0][:160] if ll else ''}")
    r_full, r_lora = rss(full.stderr), rss(lora.stdout)
    saved = (r_full - r_lora) * 1048576 if r_full and r_lora else 0
    check(r_full is not None and r_lora is not None and saved > 0.5 * 12 * n, f"peak RSS (each run's report): full fine-tuning {r_full} MiB, LoRA {r_lora} MiB: {saved / n:.1f} bytes per base "
          f"parameter saved (gradients, m and v are 12; {n} parameters)")


def main():
    tmp = tempfile.mkdtemp(prefix="skiplm_lora_train_")
    try:
        grad_with_dropout(tmp)
        res = training_vs_reference(tmp)
        if res:
            determinism_resume(tmp, *res)
        memory(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
