"""The sampling step against transformers' logits processors written in PyTorch
(tests/ref/sampling_ref.py): the repetition penalty over the context, temperature, top-k, top-p
and min-p, alone and together, on random logits of 50, 1000 and 50257 tokens (the reference in
float64, so that its own float32 rounding of a 50k softmax does not count). skiplm's
distribution (sk_sample_dist) must keep the same tokens with the same probabilities (1e-6),
and sk_sample must draw only kept tokens (tests/tool_sample.c). Then the CLI: `sample
--repetition-penalty`'s greedy text equals a PyTorch model's through the reference processors,
`--min-p 1` is greedy, and bad values are refused."""
import itertools, json, os, subprocess, sys, tempfile
import torch
from sktest import BUILD, SKIPLM, check, finish

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sampling_ref import sampling_probs  # noqa: E402
from gpt_ref import GPT, GPTConfig  # noqa: E402
import st  # noqa: E402

TOOL = os.path.join(BUILD, "tests", "tool_sample")


def skiplm_probs(tmp, logits, ctx, t, k, p, mp, pen):
    lf, cf, of = (os.path.join(tmp, n) for n in ("l.bin", "c.bin", "o.bin"))
    logits.numpy().astype("float32").tofile(lf)
    torch.tensor(ctx, dtype=torch.int32).numpy().tofile(cf)
    r = subprocess.run([TOOL, str(logits.numel()), str(len(ctx)), str(t), str(k), str(p), str(mp), str(pen), lf, cf, of],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return torch.from_file(of, size=logits.numel(), dtype=torch.float32), ""


def main():
    tmp = tempfile.mkdtemp()
    g = torch.Generator().manual_seed(3)
    cases = bad = worst = 0
    msgs = []
    for V in (50, 1000, 50257):
        logits = torch.randn(V, generator=g) * 3
        logits[:5] = -logits[:5].abs()                  # negative logits in the context too
        ctx = [int(i) for i in torch.randint(0, V, (40,), generator=g)] + [0, 1, 2, 3, 4, 0, 0]   # repeats
        ctx += [int(torch.argmax(logits))]              # the top token in the context
        for t, k, p, mp, pen in itertools.product((0.0, 0.7, 1.0, 1.6), (0, 1, 20), (1.0, 0.9, 0.5),
                                                   (0.0, 0.05, 0.3), (1.0, 1.3, 0.8)):
            if t == 0 and (k or p < 1 or mp):
                continue
            want = sampling_probs(logits.double(), ctx, t, k, p, mp, pen).float()
            got, err = skiplm_probs(tmp, logits, ctx, t, k, p, mp, pen)
            cases += 1
            d = float((got - want).abs().max()) if got is not None else float("inf")
            same = got is not None and torch.equal(got > 0, want > 0)
            worst = max(worst, d)
            if not same or d > 1e-6:
                bad += 1
                if len(msgs) < 3:
                    msgs.append(f"V={V} T={t} k={k} p={p} min_p={mp} pen={pen}: max diff {d:.2e}, "
                                f"kept {int((got > 0).sum()) if got is not None else err} vs {int((want > 0).sum())}")
    check(bad == 0 and cases > 300, f"sampling distribution equals transformers' processors (repetition penalty, temperature, "
          f"top-k, top-p, min-p) in {cases - bad} of {cases} cases, max diff {worst:.1e}; draws stay inside it {msgs}")
    # min-p keeps exactly the tokens at least min_p as likely as the top one (known values)
    logits = torch.log(torch.tensor([0.5, 0.2, 0.1, 0.099, 0.101]))
    got, _ = skiplm_probs(tmp, logits, [], 1.0, 0, 1.0, 0.2, 1.0)
    check(got is not None and [i for i in range(5) if got[i] > 0] == [0, 1, 4] and abs(float(got[0]) - 0.5 / 0.801) < 1e-6,
          f"min-p 0.2 over (0.5, 0.2, 0.1, 0.099, 0.101) keeps 0.5, 0.2, 0.101, renormalised: {got}")
    # the penalty: a positive logit divided, a negative one multiplied, each id once however often
    logits = torch.tensor([2.0, -1.0, 1.9, 0.5])
    got, _ = skiplm_probs(tmp, logits, [0, 0, 0, 1], 1.0, 0, 1.0, 0.0, 2.0)
    want = torch.softmax(torch.tensor([1.0, -2.0, 1.9, 0.5]), 0)
    check(got is not None and float((got - want).abs().max()) < 1e-6, f"penalty 2 on ids 0, 0, 0, 1: logits (1, -2, 1.9, 0.5): {got}")
    got, _ = skiplm_probs(tmp, logits, [0, 0, 0, 1], 0.0, 0, 1.0, 0.0, 2.0)
    check(got is not None and int(torch.argmax(got)) == 2, "greedy with the penalty picks token 2 (1.9 over the penalised 2.0)")

    # the CLI: greedy text with the penalty equals a PyTorch model decoding greedily through the
    # reference processors (the whole context penalised at every step, prompt included)
    vocab = os.path.join(tmp, "vocab.json")
    json.dump({"type": "char", "vocab": list("abcdefgh")}, open(vocab, "w"))
    model = os.path.join(tmp, "m.st")
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=16, vocab_size=8, block_size=64, n_skip_layer=1, n_skip_head=1)
    torch.manual_seed(0)
    ref = GPT(cfg)
    ref.randomize(seed=2)
    with torch.no_grad():                           # larger weights: a text that is not one letter
        for w in ref.parameters():
            if w.dim() == 2:
                w.mul_(5)
    st.save_file(ref.state_for_file(), model, metadata=cfg.metadata())

    def sample(*a):
        return subprocess.run([SKIPLM, "sample", model, "--tokenizer", vocab, "--prompt", "ab", "--tokens", "30", "--quiet", *a],
                              capture_output=True, text=True)

    def ref_greedy(pen):
        ids = [0, 1]
        with torch.no_grad():
            for _ in range(30):
                lg = ref(torch.tensor([ids]))[0][0, -1]
                ids.append(int(torch.argmax(sampling_probs(lg.double(), ids, 0.0, 0, 1.0, 0.0, pen))))
        return "".join("abcdefgh"[i] for i in ids[2:])
    for pen in (1.0, 3.0, 0.5):
        r = sample("--greedy", "--repetition-penalty", str(pen))
        want = ref_greedy(pen)
        check(r.returncode == 0 and r.stdout.strip() == want,
              f"sample --greedy --repetition-penalty {pen}: {r.stdout.strip()!r} is the PyTorch reference's {want!r}")
    check(len({ref_greedy(1.0), ref_greedy(3.0), ref_greedy(0.5)}) == 3, "... and the penalty changes that text")
    b = sample("--greedy").stdout
    m1 = sample("--min-p", "1", "--seed", "3").stdout
    check(m1 == b, f"--min-p 1 keeps only the most likely token: the greedy text ({m1.strip()[:12]!r} vs {b.strip()[:12]!r})")
    for opt, val, msg in [("--min-p", "-0.1", "--min-p"), ("--min-p", "1.5", "--min-p"), ("--repetition-penalty", "0", "--repetition-penalty"),
                          ("--repetition-penalty", "-1", "--repetition-penalty")]:
        r = sample(opt, val)
        check(r.returncode == 2 and msg in r.stderr, f"sample {opt} {val} refused: {r.stderr.strip()}")
    finish()


if __name__ == "__main__":
    main()
