"""A bf16 KV cache (sk_kvcache_params.kv_type = SK_KV_BF16, `--kv-bf16`) against PyTorch.

skiplm stores K (after RoPE) and V rounded to bf16 (nearest even) and reads them back widened to
fp32, everything else in fp32. The references (tests/ref/gpt_ref.py, llama_ref.py) with
cfg.kv_bf16 round each layer's own K and V the same way (torch's bfloat16 conversion) before any
layer reads them. skiplm's cached decoding, one token at a time (tests/tool_model.c decode
fp32-kv16 and bf16-kv16), must give the reference's logits at every position up to fp32
summation order, and must be measurably farther from the unrounded reference (the rounding
happens, and is the only difference). GPT-2 (learned positions, SLA) and Llama (RoPE, GQA, SLA).
"""
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import check, finish, run_tool  # noqa: E402
from gpt_ref import GPT, GPTConfig  # noqa: E402
from llama_ref import Llama, LlamaConfig, to_file  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)


def bf16_weights(model):
    """What decoding with --bf16 weights computes: the 2-D weights rounded to bf16 in place, and
    every matrix product's input rows rounded to bf16 too (the CPU's bf16 dot products)."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(p.bfloat16().float())
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(lambda _m, inp: (inp[0].bfloat16().float(),))


def case(name, model, cfg, weights_file, T, tmp, bf16=False):
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(0, cfg.vocab_size, (1, T), generator=g)
    tag = "".join(c if c.isalnum() else "_" for c in name)
    b, o = os.path.join(tmp, f"{tag}.b.safetensors"), os.path.join(tmp, f"{tag}.o.safetensors")
    st.save_file({"inputs": idx.int()}, b)
    if not check(run_tool("tool_model", "decode", weights_file, b, o, "bf16-kv16" if bf16 else "fp32-kv16"),
                 f"{name}: skiplm decoded with a bf16 KV cache"):
        return
    got = st.load_file(o)[0]["logits"]
    if bf16:
        bf16_weights(model)
    with torch.no_grad():
        cfg.kv_bf16 = True
        want = model(idx)[0][0]
        cfg.kv_bf16 = False
        plain = model(idx)[0][0]
    scale = max(1.0, want.abs().max().item())
    diff, diff_plain = (got - want).abs(), (got - plain).abs()
    d, d_plain = diff.max().item(), diff_plain.max().item()
    # A value of K or V within an fp32 ulp of a bf16 rounding boundary may round the other way
    # in skiplm than in PyTorch (their fp32 sums differ in order): a bf16 step in that one value,
    # which moves the logits of its position and of the later ones a little. So the test asks
    # for the typical logit to agree to fp32 precision (the median, 100x closer than to the
    # unrounded reference) and for the worst to be 50x closer to the rounded reference.
    med, med_plain = diff.median().item(), diff_plain.median().item()
    pos_ok = (diff.max(dim=1).values <= 2e-5 * scale).float().mean().item()
    check(med <= 2e-5 * scale and med * 100 < med_plain and d * 50 < d_plain,
          f"{name}: {T} positions' logits equal PyTorch's with K and V rounded to bf16 (median diff {med:.1e}, max "
          f"{d:.1e}, |logits| {scale:.1f}; {pos_ok:.0%} of positions within 2e-5); from the unrounded reference: median "
          f"{med_plain:.1e}, max {d_plain:.1e}")


def scaled(model, s):
    """Larger weights than the references' randomize (0.1): K and V of order 1, so that their
    rounding moves the logits well past fp32 noise."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(s)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # GPT-2 family: learned positions, SLA 1/2 (layer 1's last 2 heads read layer 0's K/V)
        cfg = GPTConfig(n_layer=3, n_head=4, n_embd=32, block_size=80, vocab_size=61, n_skip_layer=1, n_skip_head=2)
        torch.manual_seed(0)
        model = GPT(cfg)
        model.randomize(seed=3)
        scaled(model, 4.0)
        w = os.path.join(tmp, "gpt.safetensors")
        st.save_file(model.state_for_file(), w, metadata=cfg.metadata())
        case("gpt2 sla 1/2", model, cfg, w, 75, tmp)
        case("gpt2 sla 1/2, bf16 weights", model, cfg, w, 40, tmp, bf16=True)
        # Llama family: RoPE (K rounded after its rotation), GQA, SLA by the 3/4 rule's shape
        for name, kw in (("llama gqa sla", dict(n_layer=4, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=64, block_size=80,
                                                 n_skip_layer=2, n_skip_head=2, rope_theta=1e4)),
                         ("llama sla 3/3", dict(n_layer=4, n_head=4, n_kv_head=4, n_embd=32, ffn_hidden=64, block_size=80,
                                                n_skip_layer=3, n_skip_head=3, rope_theta=1e4))):
            cfg = LlamaConfig(**kw)
            torch.manual_seed(0)
            model = Llama(cfg)
            model.randomize(seed=7)
            scaled(model, 4.0)
            w = os.path.join(tmp, name.replace(" ", "_").replace("/", "_") + ".safetensors")
            st.save_file(to_file(model), w, metadata=cfg.metadata())
            case(name, model, cfg, w, 70, tmp)
    finish()


if __name__ == "__main__":
    main()
