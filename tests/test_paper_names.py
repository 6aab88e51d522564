"""The SLA paper's own files (issue 34, item 5): a safetensors file whose metadata names the
Skip-Layer setting as the paper's listing does (nanoGPT's GPTConfig: num_skip_layer,
num_skip_head) loads as that SLA model, and `skiplm eval` gives the PyTorch reference's
logits (tests/ref/gpt_ref.py); a file without any SLA setting gets it from --n_skip_layer /
--n_skip_head (same logits); a file whose own setting differs from the options is refused;
an unknown metadata key that reads like a config field is a warning naming it."""
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import SKIPLM, check, finish  # noqa: E402
from gpt_ref import GPT, GPTConfig  # noqa: E402
import shards  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)


def skiplm(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def eval_logits(tmp, wpath, shard, name, *opts):
    dump = os.path.join(tmp, name + ".dump.safetensors")
    r = skiplm("eval", wpath, shard, "--batch", "2", "--seq", "16", "--max-batches", "1", "--dump-logits", dump, *opts)
    if r.returncode != 0:
        return None, r
    out, _ = st.load_file(dump)
    return out, r


def main():
    tmp = tempfile.mkdtemp(prefix="sk_paper_")
    try:
        cfg = GPTConfig(n_layer=4, n_head=4, n_embd=32, vocab_size=64, n_skip_layer=1, n_skip_head=2)
        torch.manual_seed(0)
        model = GPT(cfg)
        model.randomize(seed=4321)
        shard = os.path.join(tmp, "tok.bin")
        shards.write(shard, shards.periodic(200, seed=3))
        # the paper's names; no "format": skiplm, as the paper's code would not write it
        md = {k: v for k, v in cfg.metadata().items() if k not in ("format", "n_skip_layer", "n_skip_head")}
        plain = dict(md)
        md["num_skip_layer"], md["num_skip_head"] = "1", "2"
        md["n_skip_every"] = "2"          # a field skiplm does not know
        paper = os.path.join(tmp, "paper.safetensors")
        st.save_file(model.state_for_file(), paper, metadata=md)
        out, r = eval_logits(tmp, paper, shard, "paper")
        if check(out is not None, "eval runs on a file with num_skip_layer/num_skip_head" + ("" if out else ": " + r.stderr)):
            with torch.no_grad():
                ref, _ = model(out["inputs"].long())
            d = (out["logits"] - ref).abs().max().item()
            check(d <= 1e-4, f"paper-named SLA file: logits max abs diff {d:.2e} against the SLA reference")
            cfg0 = GPTConfig(**{**cfg.__dict__, "n_skip_layer": 0, "n_skip_head": 0})
            base = GPT(cfg0)
            base.load_state_dict(model.state_dict())
            with torch.no_grad():
                ref0, _ = base(out["inputs"].long())
            check((out["logits"] - ref0).abs().max().item() > 1e-2, "and they differ from the same weights without SLA")
        check("'n_skip_every'" in r.stderr and "warning" in r.stderr, "the unknown key n_skip_every is a warning naming it")
        check("num_skip_layer" not in r.stderr, "the paper's names are not warned about")

        # a file without SLA metadata: the options give it
        bare = os.path.join(tmp, "bare.safetensors")
        st.save_file(model.state_for_file(), bare, metadata=plain)
        out2, r = eval_logits(tmp, bare, shard, "bare", "--n_skip_layer", "1", "--n_skip_head", "2")
        if check(out2 is not None, "eval --n_skip_layer 1 --n_skip_head 2 on a file without SLA" + ("" if out2 else ": " + r.stderr)):
            check(torch.equal(out2["logits"], out["logits"]), "gives the paper-named file's logits exactly")
        out3, r = eval_logits(tmp, bare, shard, "route", "--routing", "1-3:2-3=-1")
        if check(out3 is not None, "eval --routing on a file without SLA" + ("" if out3 else ": " + r.stderr)):
            check(torch.equal(out3["logits"], out["logits"]), "the same table as --routing gives the same logits")
        # contradictions are refused, as --n_head's are
        _, r = eval_logits(tmp, paper, shard, "bad", "--n_skip_layer", "2")
        check(r.returncode != 0 and "n_skip_layer 2 was given but the file says 1" in r.stderr,
              "--n_skip_layer 2 on a file that says 1 is refused: " + r.stderr.strip()[-120:])
        _, r = eval_logits(tmp, paper, shard, "bad2", "--n_skip_layer", "1", "--n_skip_head", "2")
        check(r.returncode == 0, "options that agree with the file are accepted")
        md2 = dict(md)
        md2["n_skip_layer"] = "3"
        both = os.path.join(tmp, "both.safetensors")
        st.save_file(model.state_for_file(), both, metadata=md2)
        _, r = eval_logits(tmp, both, shard, "both")
        check(r.returncode != 0 and "num_skip_layer is 1 but n_skip_layer is 3" in r.stderr,
              "a file whose two names disagree is refused: " + r.stderr.strip()[-120:])
        # train --init: the paper's file fine-tunes as the SLA model it is
        run = os.path.join(tmp, "run")
        base_args = ["train", "--init", paper, "--train", shard, "--steps", "1", "--batch", "2", "--seq", "16",
                     "--eval-every", "0"]
        r = skiplm(*base_args, "--out", run)
        if check(r.returncode == 0, "train --init on the paper-named file" + ("" if r.returncode == 0 else ": " + r.stderr)):
            _, meta = st.load_file(os.path.join(run, "ckpt.safetensors"))
            check(meta.get("n_skip_layer") == "1" and meta.get("n_skip_head") == "2",
                  "its checkpoint keeps n_skip_layer 1, n_skip_head 2")
        r = skiplm(*base_args, "--out", run + "2", "--n_skip_layer", "2")
        check(r.returncode != 0 and "n_skip_layer" in r.stderr and not os.path.exists(run + "2"),
              "train --init --n_skip_layer 2 on it is refused, nothing written: " + r.stderr.strip()[-140:])
        r = skiplm("train", "--init", bare, "--train", shard, "--steps", "1", "--batch", "2", "--seq", "16",
                   "--eval-every", "0", "--out", run + "3", "--n_skip_layer", "1", "--n_skip_head", "2")
        if check(r.returncode == 0, "train --init --n_skip_layer 1 --n_skip_head 2 on a file without SLA"):
            _, meta = st.load_file(os.path.join(run + "3", "ckpt.safetensors"))
            check(meta.get("n_skip_layer") == "1", "its checkpoint has the SLA setting given")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
