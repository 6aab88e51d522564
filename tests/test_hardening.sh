#!/usr/bin/env bash
# Hardening of the command-line tool: bad option values, memory limits refused up front with
# the byte count (SKIPLM_MEM_LIMIT) by train/eval/bench/sample, damaged files named in the
# error, stale temp files of a killed writer removed by the next checkpoint write.
set -u
SK=${SKIPLM:-build/skiplm}
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# expect_err NAME NEEDLE CMD...: CMD fails (status != 0, no crash signal) and stderr has NEEDLE
expect_err() {
    local name=$1 needle=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qF -- "$needle" "$tmp/err"; then pass "$name: $(head -c 200 "$tmp/err" | head -1)"
    else fail "$name: status $rc, stderr: $(head -c 300 "$tmp/err")"; fi
}
"$PY" - "$tmp" <<'PYEOF'
import sys
sys.path.insert(0, "tests/ref")
from shards import write
write(sys.argv[1] + "/t.bin", [(i * 5) % 8 for i in range(4000)])
PYEOF
M="--vocab_size 8 --n_layer 1 --n_head 2 --n_embd 8 --block_size 64"
T="$SK train --train $tmp/t.bin $M --eval-every 0"

# --- option values
# an empty folder: a clear refusal (once an undefined qsort(NULL, 0) under UBSan)
mkdir -p "$tmp/empty"
expect_err "prepare an empty folder" "holds no files" $SK prepare "$tmp/empty" --out "$tmp/eo"
expect_err "tokenizer train on an empty folder" "holds no files" $SK tokenizer train "$tmp/empty" --vocab-size 300 --out "$tmp/eo2"
expect_err "train --batch -3" "--batch must be >= 1" $T --batch -3 --out "$tmp/r"
expect_err "train --seq non-numeric" "--seq: 'abc' is not a valid integer" $T --seq abc --out "$tmp/r"
expect_err "train --steps huge" "is not a valid integer" $T --steps 99999999999 --out "$tmp/r"
expect_err "train --lr nan" "--lr: 'nan' is not a valid number" $T --lr nan --out "$tmp/r"
expect_err "train --dropout inf" "dropout = 'inf' is not a finite number" $T --dropout inf --out "$tmp/r"
expect_err "train --seq > block_size" "64" $T --seq 65 --out "$tmp/r"
expect_err "train --rope_scaling yarn" "rope_scaling = 'yarn' (allowed: none, linear, llama3)" $T --rope_scaling yarn --out "$tmp/r"
expect_err "train --rope_scaling on GPT-2" "rope_scaling needs RoPE" $T --rope_scaling linear --rope_factor 2 --out "$tmp/r"
expect_err "train --rope_factor < 1" "rope_factor = 0.5 must be >= 1" $T --family llama --rope_scaling linear --rope_factor 0.5 --out "$tmp/r"
expect_err "train --qkv_bias on GPT-2" "qkv_bias is the llama family's" $T --qkv_bias 1 --out "$tmp/r"
expect_err "train --untied_head 2" "untied_head must be 0 or 1" $T --untied_head 2 --out "$tmp/r"
expect_err "train llama3 bands" "must satisfy 0 < low < high" $T --family llama --rope_scaling llama3 --rope_low_freq_factor 4 --out "$tmp/r"
# --- GPU options in a CPU build (this suite's skiplm is built without CUDA)
expect_err "train --device cuda (CPU build)" "built without CUDA" $T --device cuda --out "$tmp/r"
expect_err "train --device tpu" "--device must be cpu or cuda" $T --device tpu --out "$tmp/r"
expect_err "train --bf16 --fp32" "--fp32 and --bf16 exclude each other" $T --bf16 --fp32 --out "$tmp/r"
expect_err "train --bf16 --tf32" "--tf32 and --bf16 exclude each other" $T --bf16 --tf32 --out "$tmp/r"
expect_err "train --tf32 without --device cuda" "--tf32 needs --device cuda" $T --tf32 --out "$tmp/r"
expect_err "bench --tf32 --bf16" "--tf32 and --bf16 exclude each other" $SK bench $M --tf32 --bf16
expect_err "bench --gemm-rate --device cuda" "--gemm-rate measures the CPU's GEMMs" $SK bench $M --gemm-rate --device cuda
expect_err "bench --tf32 without --device cuda" "--tf32 needs --device cuda" $SK bench $M --tf32
expect_err "bench --device cuda (CPU build)" "built without CUDA" $SK bench $M --device cuda
expect_err "eval --device cuda (CPU build)" "built without CUDA" $SK eval "$tmp/t.bin" "$tmp/t.bin" --device cuda
expect_err "eval --tf32 without --device cuda" "--tf32 needs --device cuda" $SK eval "$tmp/t.bin" "$tmp/t.bin" --tf32
[ ! -e "$tmp/r/ckpt.safetensors" ] && pass "no checkpoint written by refused runs" || fail "a refused run wrote a checkpoint"

# --- memory limits, refused up front with the byte count
$SK init "$tmp/m.st" $M >/dev/null 2>&1 || fail "init"
expect_err "train over SKIPLM_MEM_LIMIT" "needs" env SKIPLM_MEM_LIMIT=64K $T --batch 8 --seq 64 --steps 2 --out "$tmp/r"
grep -q "AdamW m and v" "$tmp/err" && grep -q "memory limit is 65536 bytes" "$tmp/err" &&
    pass "train limit message lists the parts" || fail "train limit message: $(cat "$tmp/err")"
expect_err "eval --dump-logits over the limit" "keeping all logits for --dump-logits" \
    env SKIPLM_MEM_LIMIT=40K "$SK" eval "$tmp/m.st" "$tmp/t.bin" --dump-logits "$tmp/d.st"
expect_err "eval activations over the limit" "needs" env SKIPLM_MEM_LIMIT=200K "$SK" eval "$tmp/m.st" "$tmp/t.bin" --batch 60
expect_err "bench gpt2 with a huge batch" "needs" "$SK" bench --preset gpt2 --batch 100000 --steps 1 --gen 0
expect_err "bench preset over the limit" "parameters) needs" env SKIPLM_MEM_LIMIT=100M "$SK" bench --preset gpt2-medium --steps 1
printf '{"type": "char", "vocab": ["a", "b", "c", "d", "e", "f", "g", "h"]}' >"$tmp/vocab.json"
expect_err "sample KV cache over the limit (sized to the prompt and --tokens, not block_size 64)" "the KV cache for 5 positions" \
    env SKIPLM_MEM_LIMIT=12K "$SK" sample "$tmp/m.st" --tokenizer "$tmp/vocab.json" --tokens 4 --prompt a
out=$("$SK" sample "$tmp/m.st" --tokenizer "$tmp/vocab.json" --tokens 150 --prompt a 2>"$tmp/err150")
[ $? -eq 0 ] && [ ${#out} -eq 151 ] &&
    pass "sample past block_size 64: 150 tokens (the cache rebuilt from the newest half)" ||
    fail "sample past block_size: ${#out} characters, $(cat "$tmp/err150")"
env SKIPLM_MEM_LIMIT=1G "$SK" sample "$tmp/m.st" --tokenizer "$tmp/vocab.json" --tokens 4 --prompt a >/dev/null 2>&1 &&
    pass "sample under the limit runs" || fail "sample under the limit"
expect_err "sample --bf16 KV cache over the limit (the bf16 copy counted)" "a bf16 copy of the weights" \
    env SKIPLM_MEM_LIMIT=12K "$SK" sample "$tmp/m.st" --tokenizer "$tmp/vocab.json" --tokens 4 --prompt a --bf16
expect_err "sample --tf32 without --device cuda" "--tf32 needs --device cuda" \
    "$SK" sample "$tmp/m.st" --tokenizer "$tmp/vocab.json" --tokens 4 --prompt a --tf32
expect_err "sample --device cuda (CPU build)" "built without CUDA" \
    "$SK" sample "$tmp/m.st" --tokenizer "$tmp/vocab.json" --tokens 4 --prompt a --device cuda

# --- damaged files named in the error
head -c 3000 "$tmp/m.st" >"$tmp/torn.st"
expect_err "eval on torn weights" "$tmp/torn.st" "$SK" eval "$tmp/torn.st" "$tmp/t.bin"
head -c 2000 "$tmp/t.bin" >"$tmp/torn.bin"
expect_err "eval on a torn shard" "$tmp/torn.bin: header says 4000 tokens but file holds 488" "$SK" eval "$tmp/m.st" "$tmp/torn.bin"
printf '{"type": "char", "vocab": ["a", "b"' >"$tmp/bad.json"
expect_err "sample with a torn vocabulary" "$tmp/bad.json: invalid JSON" "$SK" sample "$tmp/m.st" --tokenizer "$tmp/bad.json"

# --- a temp file left by a killed writer is removed by the next checkpoint write
$T --batch 4 --seq 16 --steps 2 --out "$tmp/s" >/dev/null 2>&1 || fail "short run"
sh -c 'exit 0' & dead=$!; wait $dead
echo partial >"$tmp/s/ckpt.safetensors.tmp.$dead"
$T --batch 4 --seq 16 --steps 2 --out "$tmp/s" --overwrite >/dev/null 2>"$tmp/err" || fail "second run: $(tail -1 "$tmp/err")"
[ ! -e "$tmp/s/ckpt.safetensors.tmp.$dead" ] && pass "stale ckpt.safetensors.tmp.$dead of a dead pid removed" ||
    fail "stale temp file still there"
exit $((fails > 0))
