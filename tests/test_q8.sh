#!/usr/bin/env bash
# 8-bit weights end to end: skiplm quantize and sample/eval/bench --q8 on a small model trained
# here. Greedy text with 8-bit weights (--q8, and the quantized file as it is) equals fp32's
# for 48 tokens; eval --q8 is within 0.5% of fp32's loss and equals the quantized file's;
# quantizing a quantized file writes the same bytes; training, export, --bf16 and CUDA refuse
# 8-bit weights with clear messages. Prints PASS/FAIL lines (counted by tests/run_tests.sh).
set -u
SK=${SKIPLM:-build/skiplm}
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# expect_err NAME TEXT CMD...: CMD fails and says TEXT
expect_err() {
    local name=$1 want=$2; shift 2
    if "$@" >"$tmp/out" 2>"$tmp/err"; then fail "$name: succeeded"; return; fi
    if grep -qF -- "$want" "$tmp/err"; then pass "$name: $(head -c 200 "$tmp/err")"; else fail "$name: wanted '$want', got: $(head -c 300 "$tmp/err")"; fi
}

# --- a small corpus of regular sentences, a Llama-family SLA model trained on it
mkdir -p "$tmp/text"
"$PY" - "$tmp/text/a.txt" <<'EOF'
import random, sys
r = random.Random(5)
who = ["the farmer", "a sailor", "the old king", "my sister", "the teacher", "a small dog"]
did = ["walked to", "looked at", "sang about", "painted", "remembered", "waited for"]
what = ["the river", "a green hill", "the harbour", "the market", "an open window", "the night sky"]
lines = [f"{r.choice(who)} {r.choice(did)} {r.choice(what)}." for _ in range(6000)]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
$SK prepare "$tmp/text" --out "$tmp/data" >/dev/null 2>"$tmp/prep.err" || { fail "prepare: $(cat "$tmp/prep.err")"; exit 1; }
t0=$SECONDS
$SK train --data "$tmp/data" --out "$tmp/run" --family llama --n_layer 2 --n_head 2 --n_embd 64 --block_size 64 \
    --n_skip_layer 1 --n_skip_head 1 --steps 200 --batch 8 --seq 64 --lr 3e-3 --warmup 10 --eval-every 100 \
    --eval-batches 4 >/dev/null 2>"$tmp/train.err" || { fail "train: $(tail -3 "$tmp/train.err")"; exit 1; }
echo "info: training took $((SECONDS - t0)) s"
ck=$tmp/run/ckpt.safetensors q8=$tmp/run/q8.safetensors

# --- quantize: a file of about a byte per weight that records the tokenizer
if $SK quantize "$ck" --out "$q8" >"$tmp/q.out" 2>"$tmp/q.err" && grep -q "q8_0" "$tmp/q.out"; then
    pass "quantize: $(cat "$tmp/q.out")"
else
    fail "quantize: $(cat "$tmp/q.out" "$tmp/q.err")"
fi
cs=$(stat -c %s "$ck"); qs=$(stat -c %s "$q8")
# the checkpoint holds fp32 weights and AdamW's m and v: 12 bytes a weight against 34/32
[ "$qs" -lt $((cs / 8)) ] && pass "quantize: $qs bytes against the checkpoint's $cs" || fail "quantize: $qs bytes against the checkpoint's $cs"
$SK quantize "$q8" --out "$tmp/q8b.safetensors" >"$tmp/q2.out" 2>&1
cmp -s "$q8" "$tmp/q8b.safetensors" && grep -q "as they were" "$tmp/q2.out" &&
    pass "quantize of a quantized file writes the same bytes" || fail "quantize of a quantized file: $(cat "$tmp/q2.out")"

# --- greedy text: fp32, --q8, the quantized file, the quantized file with --q8
P="--prompt the --greedy --tokens 48 --quiet"
$SK sample "$ck" $P >"$tmp/g32" 2>"$tmp/e1"
$SK sample "$ck" $P --q8 >"$tmp/gq8" 2>"$tmp/e2"
$SK sample "$q8" $P >"$tmp/gfile" 2>"$tmp/e3"
$SK sample "$q8" $P --q8 >"$tmp/gfile8" 2>"$tmp/e4"
n=$(wc -c <"$tmp/g32")
if [ "$n" -ge 48 ] && cmp -s "$tmp/g32" "$tmp/gq8" && cmp -s "$tmp/g32" "$tmp/gfile" && cmp -s "$tmp/g32" "$tmp/gfile8"; then
    pass "greedy: 48 tokens with 8-bit weights (--q8, the quantized file, both) equal fp32's: $(head -c 60 "$tmp/g32" | tr '\n' '|')"
else
    fail "greedy: fp32 '$(cat "$tmp/g32")' q8 '$(cat "$tmp/gq8")' file '$(cat "$tmp/gfile")' $(cat "$tmp/e1" "$tmp/e2" "$tmp/e3")"
fi
$SK sample "$q8" --prompt the --tokens 4 >/dev/null 2>"$tmp/stat"
grep -q "weights in 8 bits" "$tmp/stat" && pass "sample of a quantized file says its weights are 8-bit" || fail "sample's statistics: $(cat "$tmp/stat")"

# --- eval: --q8 within 0.5% of fp32's loss, and the quantized file's equal to --q8's
l32=$($SK eval "$ck" "$tmp/data/val.bin" --seq 64 2>/dev/null | grep -o 'loss [0-9.]*' | cut -d' ' -f2)
lq8=$($SK eval "$ck" "$tmp/data/val.bin" --seq 64 --q8 2>/dev/null | grep -o 'loss [0-9.]*' | cut -d' ' -f2)
lfile=$($SK eval "$q8" "$tmp/data/val.bin" --seq 64 2>/dev/null | grep -o 'loss [0-9.]*' | cut -d' ' -f2)
if [ -n "$l32" ] && [ -n "$lq8" ] && "$PY" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not abs(b - a) <= 0.005 * a)" "$l32" "$lq8" &&
   [ "$lq8" = "$lfile" ]; then
    pass "eval: loss fp32 $l32, --q8 $lq8, the quantized file $lfile"
else
    fail "eval: loss fp32 '$l32', --q8 '$lq8', the quantized file '$lfile'"
fi

# --- bench --q8
if $SK bench --preset nano --vocab_size 256 --no-train --gen 16 --q8 >"$tmp/b.out" 2>&1 && grep -q "q8_0 weights" "$tmp/b.out"; then
    pass "bench --q8: $(grep generate "$tmp/b.out")"
else
    fail "bench --q8: $(cat "$tmp/b.out")"
fi

# --- refusals
expect_err "train --init of a quantized file" "8-bit weights" $SK train --data "$tmp/data" --out "$tmp/r2" --init "$q8" --steps 1
expect_err "train --resume of a quantized file" "8-bit" $SK train --resume "$q8" --out "$tmp/r3" --steps 1
expect_err "export of a quantized file" "8-bit weights" $SK export "$q8" --out "$tmp/hf"
[ ! -e "$tmp/hf/model.safetensors" ] && pass "export wrote nothing" || fail "export wrote a model"
expect_err "sample --q8 --bf16" "--q8 is for the CPU, without --bf16" $SK sample "$ck" --q8 --bf16 --tokens 2
expect_err "sample --bf16 of a quantized file" "--bf16 does not apply" $SK sample "$q8" --bf16 --tokens 2
expect_err "sample --q8 --device cuda" "--q8 is for the CPU" $SK sample "$ck" --q8 --device cuda --tokens 2
expect_err "eval --q8 --device cuda" "--q8 is for the CPU" $SK eval "$ck" "$tmp/data/val.bin" --q8 --device cuda
expect_err "bench --q8 without generation" "--q8 applies to the CPU's generation benchmark" $SK bench --preset nano --vocab_size 256 --no-gen --q8
$SK init "$tmp/w48.safetensors" --n_layer 1 --n_head 2 --n_embd 48 --vocab_size 40 --block_size 16 >/dev/null 2>&1
expect_err "quantize of n_embd 48" "multiples of 32" $SK quantize "$tmp/w48.safetensors" --out "$tmp/w48q.safetensors"
[ ! -e "$tmp/w48q.safetensors" ] && pass "quantize wrote nothing on error" || fail "quantize left a file"
expect_err "quantize without --out" "give the weights and --out FILE" $SK quantize "$ck"
head -c 5000 "$q8" >"$tmp/torn.safetensors"
expect_err "sample of a truncated quantized file" "$tmp/torn.safetensors" $SK sample "$tmp/torn.safetensors" --tokens 2

echo "test_q8.sh: $fails failed"
[ "$fails" -eq 0 ]
