"""Unicode normalization form C (src/text/nfc.c, the NFC normalizer of tokenizer.json files such as
Qwen2's) against Python's unicodedata.normalize("NFC"), whose tables scripts/gen_nfc.py took:

1. every code point alone (1,112,064 of them);
2. known values: composition, a singleton, Hangul (LV, LVT, jamo runs), a composition
   exclusion, a blocked mark, reordering of marks by combining class; every pair of jamo and
   syllables at the edges of Hangul's ranges;
3. 20,000 random strings drawn to stress the algorithm (base letters, marks of many classes in
   any order, jamo, precomposed and excluded characters, compatibility characters), 300 runs
   of 17-300 marks, and a 320,000-mark run in linear time;
4. bytes that are not UTF-8 pass through unchanged, around composing text.
"""
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata as ud

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import BUILD, check, finish  # noqa: E402

TOOL = os.path.join(BUILD, "tests", "tool_nfc")


def nfc_c(records, tmp):
    """records: list of bytes -> list of bytes (the C NFC of each)"""
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    with open(src, "wb") as f:
        for r in records:
            f.write(struct.pack("<I", len(r)) + r)
    subprocess.run([TOOL, src, dst], check=True)
    data, out, i = open(dst, "rb").read(), [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def compare(name, texts, tmp):
    got = nfc_c([t.encode("utf-8", "surrogatepass") for t in texts], tmp)
    bad = [(t, g) for t, g in zip(texts, got) if g != ud.normalize("NFC", t).encode()]
    changed = sum(ud.normalize("NFC", t) != t for t in texts)
    check(not bad and len(got) == len(texts),
          f"{name}: {len(texts)} texts ({changed} changed by NFC) equal unicodedata's"
          + (f"; first mismatch {ascii(bad[0][0])}: C {bad[0][1]!r} vs {ud.normalize('NFC', bad[0][0]).encode()!r}" if bad else ""))


with tempfile.TemporaryDirectory() as tmp:
    print(f"Unicode {ud.unidata_version} (Python's unicodedata)")
    every = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    compare("every code point alone", every, tmp)

    known = [("e\u0301", "\u00e9"), ("\u212b", "\u00c5"), ("\u1100\u1161", "\uac00"), ("\u1100\u1161\u11a8", "\uac01"),
             ("\uac00\u11a8", "\uac01"), ("\u0958", "\u0915\u093c"), ("a\u0301\u0328", "\u0105\u0301"),
             ("a\u0328\u0301", "\u0105\u0301"), ("a\u0302\u0323", "\u1ead"), ("\u1e9b\u0323", "\u1e9b\u0323"),
             ("o\u031b\u0323\u0301", "\u1ee3\u0301"), ("A\u0300\u0300", "\u00c0\u0300"), ("\ufb01", "\ufb01"),
             ("\u0344", "\u0308\u0301"), ("\u1100\u1100\u1161", "\u1100\uac00"), ("\u00c5\u0301", "\u01fa")]
    for src, want in known:
        check(ud.normalize("NFC", src) == want, f"the reference agrees with the hand-written {ascii(src)} -> {ascii(want)}")
    got = nfc_c([s.encode() for s, _ in known], tmp)
    for (src, want), g in zip(known, got):
        check(g == want.encode(), f"NFC {ascii(src)} = {ascii(want)}: C gives {ascii(g.decode('utf-8', 'replace'))}")

    rng = random.Random(7)
    marks = [cp for cp in range(0x300, 0x370)] + [0x0323, 0x0328, 0x031B, 0x05B0, 0x0591, 0x093C, 0x094D, 0x0E38,
                                                   0x0F71, 0x0F72, 0x0F74, 0x1DCE, 0x20D0, 0x302A, 0x3099, 0x309A]
    bases = list("aeiouAEIOUcgknrsyzwCGKNRSYZW") + ["\u0391", "\u03b1", "\u0415", "\u0430", "\u0915", "\u304b", "\u30cf",
                                                    "\u0627", "\u05d0", "\u1e9b", "\u00c5", "\u212b", "\u0344", "\u0958"]
    jamo = [chr(c) for c in list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A8, 0x11C3))]
    other = ["\uac00", "\uac01", "\ud7a3", "\ufb01", "\u2126", "\u1f80", "\u0e33", " ", "\n", "1", "\u3000", "\U0001d15e",
             "\U0001d165", "\U0001d16e", "\u0b47", "\u0b3e", "\u0b57", "\u0dd9", "\u0dcf", "\u0dca", "\u1025", "\u102e"]
    pool = bases * 3 + [chr(m) for m in marks] * 2 + jamo + other
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 24))) for _ in range(20000)]
    compare("random strings of letters, marks (any order), jamo, composites", texts, tmp)
    # Hangul at the edges of its ranges: every pair of jamo and syllables from one below to one
    # above each range (L U+1100..1112, V U+1161..1175, T U+11A8..11C2; U+11A7 is no trailing
    # consonant), the first, last and neighbouring LV and LVT syllables
    edge = ([chr(c) for c in list(range(0x10FF, 0x1115)) + list(range(0x115F, 0x1178)) + list(range(0x11A6, 0x11C5))] +
            ["\uabff", "\uac00", "\uac01", "\uac1b", "\uac1c", "\ud788", "\ud789", "\ud7a3", "\ud7a4"])
    compare("Hangul at the edges of the L, V and T ranges and of the syllables, every pair",
            [a + b for a in edge for b in edge], tmp)

    # long runs of marks (sorted by counting there): against unicodedata up to 300 marks, then a
    # 320,000-mark run that an insertion sort would take minutes over
    longs = ["".join(rng.choice(bases)) + "".join(chr(rng.choice(marks)) for _ in range(rng.randint(17, 300)))
             for _ in range(300)]
    compare("runs of 17-300 combining marks", longs, tmp)
    n = 160000
    t0 = time.time()
    got = nfc_c([("a" + "\u0301\u0316" * n).encode()], tmp)[0]
    dt = time.time() - t0
    check(got == ("\u00e1" + "\u0316" * n + "\u0301" * (n - 1)).encode() and dt < 10,
          f"'a' + {2 * n} alternating marks: sorted (220 before 230), the first acute composed, in {dt:.2f} s")

    raw = [b"e\xcc\x81\xff\xcc\x81", b"\xc3", b"a\xe1\x84", b"\xed\xa0\x80e\xcc\x81", b"\xf4\x90\x80\x80a\xcc\x8a",
           b"\xc0\xafA\xcc\x8a"]
    want = [b"\xc3\xa9\xff\xcc\x81", b"\xc3", b"a\xe1\x84", b"\xed\xa0\x80\xc3\xa9", b"\xf4\x90\x80\x80\xc3\xa5",
            b"\xc0\xaf\xc3\x85"]
    got = nfc_c(raw, tmp)
    check(got == want, f"bytes that are not UTF-8 pass through, the text around them normalized: {got}")
finish()
