#!/usr/bin/env bash
# The shared library build/libskiplm.so (docs/library.md): its soname; `nm -D` lists exactly
# the functions that the public headers declare (include/*.h but skiplm_cuda.h: the default
# build is the CPU one), each of them, and none of the library's internal helpers (global
# functions of libskiplm.a that no public header declares); scripts/export_syms.sh's list
# equals gcc's own list of the headers' prototypes (-aux-info); a self-check links the same
# objects without the version script and must see the internal helpers leak. Then the
# examples built against the .so run: examples/generate prints what `skiplm sample --greedy`
# does, and a bad path gives the library's message; examples/score prints a loss;
# examples/train's checkpoint equals skiplm train's bit for bit. PASS/FAIL lines
# (tests/run_tests.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
SK=${SKIPLM:-$BUILD/skiplm}
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive LC_ALL=C
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SO=$BUILD/libskiplm.so
[ -f "$SO" ] || { fail "$SO is missing: run make"; exit 1; }

# --- soname
soname=$(readelf -d "$SO" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libskiplm.so.0 ] && pass "soname $soname" || fail "soname '$soname', want libskiplm.so.0"

# --- the public API, from the headers
HDRS=$(ls include/*.h | grep -v skiplm_cuda.h)
# shellcheck disable=SC2086
bash scripts/export_syms.sh cc "-Iinclude -D_GNU_SOURCE" $HDRS >"$tmp/public" || { fail "export_syms.sh failed"; exit 1; }
np=$(wc -l <"$tmp/public")
[ "$np" -gt 100 ] && pass "$np public functions declared in $(echo $HDRS | wc -w) headers" || fail "only $np public functions found"
# an independent list: gcc's prototypes of the functions declared (not defined) in include/
if printf '%s\n' $HDRS | sed "s|.*|#include \"$PWD/&\"|" >"$tmp/all.c" &&
   gcc -Iinclude -D_GNU_SOURCE -aux-info "$tmp/aux" -fsyntax-only "$tmp/all.c" 2>"$tmp/aux.err"; then
    grep -F "/* $PWD/include/" "$tmp/aux" | grep -v ':[NO]F \*/' | grep -v '\bstatic\b' |
        grep -oE '\bsk_[a-z0-9_]+ \(' | sed 's/ (//' | sort -u >"$tmp/aux.list"
    if cmp -s "$tmp/public" "$tmp/aux.list"; then pass "export_syms.sh's list equals gcc -aux-info's ($np names)"
    else fail "export_syms.sh's list differs from gcc -aux-info's: $(diff "$tmp/public" "$tmp/aux.list" | grep '^[<>]' | head -5 | tr '\n' ' ')"; fi
else
    echo "info: gcc -aux-info unavailable ($(head -c 200 "$tmp/aux.err")): export_syms.sh's list not cross-checked"
fi

# check_exports SO: prints what is wrong with SO's dynamic symbol table (nothing when right)
check_exports() {
    nm -D --defined-only "$1" | awk '{print $NF}' | sort -u >"$tmp/exported"
    comm -23 "$tmp/public" "$tmp/exported" | sed 's/^/not exported: /'
    comm -13 "$tmp/public" "$tmp/exported" | sed 's/^/exported but not public: /'
}
check_exports "$SO" >"$tmp/bad"
if [ ! -s "$tmp/bad" ]; then pass "nm -D lists exactly the $np public functions"
else fail "nm -D: $(head -5 "$tmp/bad" | tr '\n' ';') ($(wc -l <"$tmp/bad") problems)"; fi

# --- internal helpers: global functions of the archive that no header declares
nm -g --defined-only "$BUILD/libskiplm.a" 2>/dev/null | awk '$2 == "T" {print $3}' | sort -u | comm -23 - "$tmp/public" >"$tmp/internal"
ni=$(wc -l <"$tmp/internal")
leaked=$(comm -12 "$tmp/internal" "$tmp/exported" | head -5 | tr '\n' ' ')
if [ "$ni" -gt 0 ] && [ -z "$leaked" ]; then pass "none of the $ni internal helpers is exported (e.g. $(grep -m3 '^sk_' "$tmp/internal" | tr '\n' ' '))"
else fail "internal helpers: $ni found; exported: $leaked"; fi

# --- self-check: without the version script the internal helpers leak, and the check says so
pic=$(find "$BUILD/pic/src" -name '*.o' 2>/dev/null | sort)
if [ -n "$pic" ] && cc -shared -o "$tmp/leaky.so" $pic -fopenmp -lm 2>"$tmp/ld.err"; then
    check_exports "$tmp/leaky.so" >"$tmp/bad2"
    n_leak=$(grep -c '^exported but not public' "$tmp/bad2")
    [ "$n_leak" -ge "$ni" ] && pass "self-check: the same objects without the version script export $n_leak names the check refuses" ||
        fail "self-check: only $n_leak extra exports flagged without the version script"
else
    fail "self-check: could not link $BUILD/pic/src/*.o: $(head -c 300 "$tmp/ld.err")"
fi

# --- the examples against the .so: a small SLA model with weights far from the init (so that
# greedy text is not one character repeated), written by the PyTorch reference
"$PY" - "$tmp" <<'EOF' || { fail "writing the model"; exit 1; }
import json, os, sys
sys.path.insert(0, "tests/ref")
import torch
from gpt_ref import GPT, GPTConfig
import st
d = sys.argv[1]
cfg = GPTConfig(n_layer=3, n_head=4, n_embd=32, block_size=48, vocab_size=12, n_skip_layer=1, n_skip_head=2)
torch.manual_seed(0)
g = GPT(cfg); g.randomize(seed=7)
st.save_file(g.state_for_file(), os.path.join(d, "m.safetensors"), metadata=cfg.metadata())
json.dump({"type": "char", "vocab": list("abcdefghijk ")}, open(os.path.join(d, "vocab.json"), "w"))
EOF
linked=$(ldd "$BUILD/examples/generate" | sed -n 's/.*libskiplm.so.0 => \([^ ]*\).*/\1/p')
[ -n "$linked" ] && [ "$(realpath "$linked")" = "$(realpath "$SO")" ] &&
    pass "examples/generate links $SO (libskiplm.so.0 => $linked)" ||
    fail "examples/generate does not link $SO: $(ldd "$BUILD/examples/generate" | head -3 | tr '\n' ' ')"
"$BUILD/examples/generate" "$tmp/m.safetensors" "$tmp/vocab.json" "abc" 40 >"$tmp/ex.out" 2>"$tmp/ex.err"
rc=$?
"$SK" sample "$tmp/m.safetensors" --tokenizer "$tmp/vocab.json" --prompt abc --tokens 40 --greedy --quiet >"$tmp/sk.out" 2>"$tmp/sk.err"
distinct=$(head -c 40 "$tmp/ex.out" | fold -w1 | sort -u | wc -l)
if [ "$rc" = 0 ] && cmp -s "$tmp/ex.out" "$tmp/sk.out" && [ "$distinct" -ge 3 ]; then
    pass "examples/generate prints what skiplm sample --greedy does: '$(head -c 40 "$tmp/ex.out")' ($distinct distinct characters)"
else
    fail "examples/generate (rc $rc): '$(head -c 60 "$tmp/ex.out")' vs sample '$(head -c 60 "$tmp/sk.out")' $(head -c 200 "$tmp/ex.err")"
fi
if "$BUILD/examples/generate" "$tmp/none.safetensors" "$tmp/vocab.json" abc 4 >/dev/null 2>"$tmp/err"; then
    fail "examples/generate on a missing file succeeded"
else
    grep -q "none.safetensors: cannot open" "$tmp/err" && pass "examples/generate on a missing file: $(cat "$tmp/err")" ||
        fail "examples/generate on a missing file said: $(cat "$tmp/err")"
fi
"$BUILD/examples/score" "$tmp/m.safetensors" "$tmp/vocab.json" "abcabc abcabc" >"$tmp/score.out" 2>&1 &&
    grep -qE '^loss [0-9.]+ tokens 12$' "$tmp/score.out" && pass "examples/score: $(cat "$tmp/score.out")" ||
    fail "examples/score: $(cat "$tmp/score.out")"

# examples/train: 20 steps, then the tensors (weights, AdamW's m and v) of skiplm train's checkpoint
"$PY" - "$tmp/data/train.bin" <<'EOF' || fail "writing the shard"
import os, random, struct, sys
r = random.Random(1)
ids = []
for _ in range(2000):
    ids += [0, 1, 2, 11, r.randrange(3, 11), 11]
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253) + struct.pack(f"<{len(ids)}H", *ids))
EOF
cp "$tmp/data/train.bin" "$tmp/data/val.bin"; cp "$tmp/vocab.json" "$tmp/data/"
"$BUILD/examples/train" "$tmp/data/train.bin" 12 20 "$tmp/ex_train.safetensors" >"$tmp/tr.out" 2>&1
rc=$?
"$SK" train --data "$tmp/data" --out "$tmp/run" --n_layer 2 --n_head 4 --n_embd 64 --block_size 32 --sla --steps 20 \
    --batch 8 --seq 32 --lr 3e-3 --eval-every 0 >"$tmp/sktr.out" 2>&1 || fail "skiplm train: $(tail -2 "$tmp/sktr.out")"
same=$("$PY" - "$tmp/ex_train.safetensors" "$tmp/run/ckpt.safetensors" <<'EOF'
import sys
sys.path.insert(0, "tests/ref")
import st
a, _ = st.load_file(sys.argv[1])
b, _ = st.load_file(sys.argv[2])
print(len(a) if set(a) == set(b) and all(a[k].numpy().tobytes() == b[k].numpy().tobytes() for k in a) else 0)
EOF
)
first=$(sed -n 's/^step 1 loss //p' "$tmp/tr.out"); last=$(sed -n 's/^step 20 loss //p' "$tmp/tr.out")
if [ "$rc" = 0 ] && [ "${same:-0}" -gt 20 ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1) }'; then
    pass "examples/train: loss $first -> $last in 20 steps; its $same tensors equal skiplm train's checkpoint bit for bit"
else
    fail "examples/train (rc $rc, loss $first -> $last, $same equal tensors): $(tail -2 "$tmp/tr.out")"
fi

[ "$fails" -eq 0 ]
