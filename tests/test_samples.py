"""`skiplm sample --samples N`: N continuations of one prompt decoded side by side in one KV
cache (sk_model_decode_batch). Sample k must be exactly what `--samples 1 --seed SEED+k`
prints: both families, with SLA, fp32 and --bf16, top-k and top-p, past block_size (each
sequence's cache rebuilt from its newest half), and end-of-sequence ids stopping some samples
while the others go on. (That the batched logits equal one sequence's at a time, and that
those equal PyTorch's, is tests/test_infer.c's, tests/test_gemm_rows.c's and the torch tests'.)
Also 16 samples in fp32, bf16 and 8 bits, sample's rate line and bench --model."""
import json, os, subprocess, tempfile
from sktest import SKIPLM, check, finish

SEP = "---------------\n"
VOCAB = list("abcdefghijk ")


def skiplm(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def sample(model, vocab, *args):
    return skiplm("sample", model, "--tokenizer", vocab, "--prompt", "abc", *args)


def main():
    tmp = tempfile.mkdtemp()
    vocab = os.path.join(tmp, "vocab.json")
    json.dump({"type": "char", "vocab": VOCAB}, open(vocab, "w"))
    models = {
        "gpt2 sla": ["--n_layer", "3", "--n_head", "4", "--n_embd", "32", "--n_skip_layer", "1", "--n_skip_head", "2"],
        "llama gqa sla": ["--family", "llama", "--n_layer", "3", "--n_head", "4", "--n_kv_head", "2", "--n_embd", "32",
                          "--bias", "0", "--n_skip_layer", "2", "--n_skip_head", "2"],
    }
    for name, opts in models.items():
        path = os.path.join(tmp, name.replace(" ", "_") + ".st")
        r = skiplm("init", path, "--block_size", "24", "--vocab_size", str(len(VOCAB)), "--seed", "5", *opts)
        if not check(r.returncode == 0, f"{name}: init {r.stderr.strip()[-200:]}"):
            continue
        # 40 new tokens after a 3-token prompt: past block_size 24, so each cache is rebuilt
        for extra in [[], ["--bf16"], ["--top-k", "4"], ["--top-p", "0.7", "--temperature", "1.3"]]:
            r = sample(path, vocab, "--tokens", "40", "--samples", "4", "--seed", "100", "--quiet", *extra)
            got = r.stdout.split(SEP)
            want = [sample(path, vocab, "--tokens", "40", "--seed", str(100 + k), "--quiet", *extra).stdout for k in range(4)]
            check(r.returncode == 0 and got == want and len(set(want)) == 4 and all(len(w) == 41 for w in want),
                  f"{name} {' '.join(extra) or 'fp32'}: --samples 4 prints what --samples 1 --seed 100+k does, k = 0..3, "
                  f"past block_size ({[g[:12] for g in got]} vs {[w[:12] for w in want]}) {r.stderr.strip()[-200:]}")
        r = sample(path, vocab, "--tokens", "10", "--samples", "3")
        parts = r.stdout.split(SEP)
        check(r.returncode == 0 and len(parts) == 3 and all(p.startswith("abc") and len(p) == 14 for p in parts) and
              "3 samples, 30 new tokens" in r.stderr,
              f"{name}: without --quiet each sample starts with the prompt; the statistics count all: {r.stderr.strip()[-160:]}")
        # end-of-sequence: the first new character of sample 2 from its 4th on stops it there;
        # each sample stops at its own first, the others go on
        free = [sample(path, vocab, "--tokens", "30", "--seed", str(7 + k), "--quiet").stdout.rstrip("\n") for k in range(4)]
        i = next(i for i in range(3, 30) if free[2][i] not in free[2][:i])
        stop = free[2][i]
        json.dump({"eos_token_id": VOCAB.index(stop)}, open(os.path.join(tmp, "generation_config.json"), "w"))
        r = sample(path, vocab, "--tokens", "30", "--samples", "4", "--seed", "7")     # not --quiet: the notes
        want = ["abc" + f.split(stop)[0] + "\n" for f in free]
        notes = [f"[sample {k + 1}: end-of-sequence token {VOCAB.index(stop)} after {len(w) - 4} new tokens]" in r.stderr
                 for k, w in enumerate(want) if stop in free[k]]
        check(r.returncode == 0 and r.stdout.split(SEP) == want and all(notes) and len(notes) >= 2 and len(want[2]) == i + 4 and
              any(stop not in f or f.index(stop) > i for f in free),
              f"{name}: eos id {VOCAB.index(stop)} ({stop!r}) stops each sample at its first, the others go on: "
              f"{[len(w) - 4 for w in want]} new tokens {r.stderr.strip()[-200:]}")
        r = sample(path, vocab, "--tokens", "30", "--samples", "4", "--seed", "7", "--quiet", "--ignore-eos")
        check(r.returncode == 0 and r.stdout.split(SEP) == [f + "\n" for f in free], f"{name}: ... and --ignore-eos goes on")
        os.remove(os.path.join(tmp, "generation_config.json"))
    path = os.path.join(tmp, "gpt2_sla.st")
    for bad in ["0", "1025", "-2"]:
        r = sample(path, vocab, "--samples", bad)
        check(r.returncode == 2 and "--samples must be in [1, 1024]" in r.stderr, f"--samples {bad} refused: {r.stderr.strip()}")
    r = skiplm("bench", "--preset", "nano", "--no-train", "--gen", "4", "--gen-seqs", "0")
    check(r.returncode == 2 and "--gen-seqs must be in" in r.stderr, f"bench --gen-seqs 0 refused: {r.stderr.strip()}")
    r = subprocess.run([SKIPLM, "sample", path, "--tokenizer", vocab, "--prompt", "abc", "--samples", "300"],
                       capture_output=True, text=True, env=dict(os.environ, SKIPLM_MEM_LIMIT="1M"))
    check(r.returncode == 1 and "the KV cache for 300 sequences of" in r.stderr and "memory limit" in r.stderr and r.stdout == "",
          f"--samples 300 over a memory limit refused before anything is printed: {r.stderr.strip()[-160:]}")
    r = skiplm("bench", "--preset", "nano", "--no-train", "--gen", "8", "--gen-seqs", "3")
    check(r.returncode == 0 and "8 tokens x 3 sequences" in r.stdout, f"bench --gen-seqs 3 runs: {r.stdout.strip()[-160:]}")
    many(tmp, vocab)
    finish()


def many(tmp, vocab):
    """16 samples side by side (the batch kernels' tiles and every tail) print what 16 single
    runs print, in every weight kind, greedy and sampled; the printed rate counts the decoding
    steps; bench --model times a saved model."""
    path = os.path.join(tmp, "llama64.st")
    r = skiplm("init", path, "--family", "llama", "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2", "--n_embd", "64",
               "--ffn_hidden", "96", "--bias", "0", "--block_size", "64", "--vocab_size", str(len(VOCAB)), "--seed", "9")
    if not check(r.returncode == 0, f"llama 64 wide: init {r.stderr.strip()[-200:]}"):
        return
    for prec in [[], ["--bf16"], ["--q8"]]:
        for mode in [["--greedy"], ["--seed", "40", "--temperature", "1.5"]]:
            r = sample(path, vocab, "--tokens", "24", "--samples", "16", "--quiet", *prec, *mode)
            got = r.stdout.split(SEP)
            if mode[0] == "--greedy":
                want = [sample(path, vocab, "--tokens", "24", "--quiet", *prec, *mode).stdout] * 16
            else:
                want = [sample(path, vocab, "--tokens", "24", "--quiet", "--seed", str(40 + k), "--temperature", "1.5", *prec).stdout
                        for k in range(16)]
            check(r.returncode == 0 and got == want and (mode[0] == "--greedy" or len(set(want)) > 8),
                  f"llama 64 wide {' '.join(prec) or 'fp32'} {' '.join(mode)}: --samples 16 prints what 16 single runs print "
                  f"({len(set(want))} distinct) {r.stderr.strip()[-200:]}")
    r = sample(path, vocab, "--tokens", "20", "--greedy")
    check(r.returncode == 0 and "20 new tokens at " in r.stderr and "(19 decoding steps in " in r.stderr,
          f"sample's rate is over the 19 decoding steps of 20 new tokens (the first comes from the prompt's pass): {r.stderr.strip()[-200:]}")
    r = sample(path, vocab, "--tokens", "10", "--samples", "3", "--ignore-eos")
    check(r.returncode == 0 and "30 new tokens at " in r.stderr and "27 tokens decoded in " in r.stderr,
          f"--samples 3: the rate is over the 27 tokens decoded: {r.stderr.strip()[-200:]}")
    for extra in [[], ["--q8"]]:
        r = skiplm("bench", "--model", path, "--gen", "8", "--gen-seqs", "4", "--prefill", "16", *extra)
        check(r.returncode == 0 and "prefill: 16 tokens in " in r.stdout and "generate: 8 tokens x 4 sequences" in r.stdout and
              ("q8_0 weights" in r.stdout) == bool(extra) and "train:" not in r.stdout and "llama L=2" in r.stdout,
              f"bench --model {' '.join(extra)}: the saved model's prefill and 4 sequences timed, no training: {r.stdout.strip()[-200:]}")
    r = skiplm("bench", "--model", path, "--n_layer", "3")
    check(r.returncode == 2 and "--model takes the model's own configuration" in r.stderr,
          f"bench --model with a model option refused: {r.stderr.strip()}")
    r = skiplm("bench", "--model", path, "--prefill", "64")
    check(r.returncode == 2 and "leaves no position" in r.stderr, f"bench --prefill past block_size refused: {r.stderr.strip()}")
    r = skiplm("bench", "--prefill", "8", "--device", "cuda")
    check(r.returncode == 2 and "--prefill is for the CPU" in r.stderr, f"bench --prefill with --device cuda refused: {r.stderr.strip()}")


if __name__ == "__main__":
    main()
