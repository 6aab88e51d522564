#!/usr/bin/env bash
# skiplm against llama.cpp on the same weights: decoding of 1/4/16/32 sequences side by side and
# a prompt's prefill, in fp32, bf16 and 8 bits (llama.cpp's Q8_0 file holds skiplm's own int8
# values and fp16 scales, so the 8-bit weights are identical).
#
#   bash bench/llama_cpp_bench.sh [MODEL.safetensors]      (run from the repository, after make)
#   bash bench/llama_cpp_bench.sh --build-only              (fetch and build llama.cpp, then stop)
#
# 1. llama.cpp from the source that the npm package node-llama-cpp ships (a git bundle,
#    llama/gitRelease.bundle, in the package's tarball, fetched with `npm pack`), built with
#    -DGGML_NATIVE=ON and OpenMP into $BENCH_DIR (outside the repository); its
#    llama-batched-bench, and bench/llama_greedy.c against its library. Built once, reused.
# 2. The model: MODEL, or a random Llama of llama2.c's stories110M shape (12 layers, 768 wide,
#    12 heads, MLP 2048, vocabulary 32000; $INIT_OPTS replaces these options); `skiplm
#    quantize` writes its 8-bit weights; bench/gguf_write.py writes the three as GGUF
#    (F32, BF16, Q8_0). A Llama without SLA, routing, biases or RoPE scaling.
# 3. Greedy agreement first: $AGREE tokens after a 4-token prompt, skiplm `sample --greedy` (a
#    character vocabulary of one piece per id, bench/export_ref.py's) against llama_greedy
#    (fp32 KV cache, flash attention off), for each precision, and the logits llama.cpp chose its tokens from
#    against skiplm's (`eval --dump-logits` on the same ids). fp32 must agree on every token
#    and within 1e-4 of the largest logit (else it stops: FORCE=1 goes on); bf16 and 8 bits
#    are reported (llama.cpp rounds the activations to bf16 or quantizes them per block of 32
#    for those weights; skiplm keeps them fp32).
# 4. Timing, engines alternated in each cell, median of $ROUNDS rounds, $THREADS threads each:
#      llama-batched-bench -m F.gguf -t T -tb T -npp 1 -ntg $NTG -npl N   (its S_TG t/s; see
#      llama_rate below for the extra configuration after it)
#      skiplm bench --model F --gen $NTG --gen-seqs N [--bf16]            ("generate: ... tok/s")
#    for N in $SEQS, and prefill: -npp $NPP -ntg 1 -npl 1 (S_PP t/s) against
#    `skiplm bench --model F --prefill $NPP --gen 0` ("prefill: ... tok/s"). llama.cpp keeps
#    its defaults here (an F16 KV cache, flash attention on auto), skiplm an fp32 cache. Then the table, tokens/s summed over
#    the sequences.
#
# Environment: SKIPLM (build/skiplm), PY (python3 with numpy), BENCH_DIR
# (/tmp/skiplm-llama-bench), NLC_VERSION (3.22.1), THREADS (2), ROUNDS (3), SEQS ("1 4 16 32"),
# PRECS ("fp32 bf16 q8"), NTG (128), NPP (256; 0 skips the prefill rows), AGREE (200),
# INIT_OPTS, FORCE. Timing needs a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SKIPLM=${SKIPLM:-$ROOT/build/skiplm}
PY=${PY:-/usr/bin/python3}
BENCH_DIR=${BENCH_DIR:-/tmp/skiplm-llama-bench}
NLC_VERSION=${NLC_VERSION:-3.22.1}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
SEQS=${SEQS:-"1 4 16 32"}
PRECS=${PRECS:-"fp32 bf16 q8"}
NTG=${NTG:-128}
NPP=${NPP:-256}
AGREE=${AGREE:-200}
INIT_OPTS=${INIT_OPTS:-"--family llama --n_layer 12 --n_head 12 --n_kv_head 12 --n_embd 768 --ffn_hidden 2048 --vocab_size 32000 --block_size 1024 --bias 0"}
BUILD_ONLY=0
MODEL=""
for a in "$@"; do
    case "$a" in
        --build-only) BUILD_ONLY=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) MODEL=$a ;;
    esac
done
case "$BENCH_DIR" in "$ROOT"|"$ROOT"/*) echo "BENCH_DIR must be outside the repository ($ROOT)"; exit 1 ;; esac
mkdir -p "$BENCH_DIR"
BENCH_DIR=$(cd "$BENCH_DIR" && pwd)
SRC=$BENCH_DIR/llama.cpp
BLD=$SRC/build
LBENCH=$BLD/bin/llama-batched-bench
GREEDY=$BENCH_DIR/llama_greedy

# ---------------------------------------------------------------- llama.cpp
if [ ! -x "$LBENCH" ]; then
    if [ ! -d "$SRC/.git" ]; then
        echo "== llama.cpp: the source node-llama-cpp@$NLC_VERSION ships (npm pack, its git bundle)"
        ( cd "$BENCH_DIR" && rm -rf package && npm pack --silent "node-llama-cpp@$NLC_VERSION" >/dev/null &&
          tar xzf "node-llama-cpp-$NLC_VERSION.tgz" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json )
        git -c advice.detachedHead=false clone --quiet "$BENCH_DIR/package/llama/gitRelease.bundle" "$SRC"
        cp "$BENCH_DIR/package/llama/llama.cpp.info.json" "$BENCH_DIR/llama.cpp.info.json"
    fi
    echo "== building llama.cpp ($(cat "$BENCH_DIR/llama.cpp.info.json" 2>/dev/null | tr -d '\n ' ), commit $(git -C "$SRC" rev-parse --short HEAD)) in $BLD"
    cmake -S "$SRC" -B "$BLD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
          -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$BENCH_DIR/cmake.log" 2>&1 ||
        { tail -30 "$BENCH_DIR/cmake.log"; exit 1; }
    cmake --build "$BLD" --target llama-batched-bench llama -j "$THREADS" >"$BENCH_DIR/build.log" 2>&1 ||
        { tail -30 "$BENCH_DIR/build.log"; exit 1; }
fi
if [ ! -x "$GREEDY" ] || [ "$ROOT/bench/llama_greedy.c" -nt "$GREEDY" ]; then
    cc -O2 -std=c11 "$ROOT/bench/llama_greedy.c" -I"$SRC/include" -I"$SRC/ggml/include" -L"$BLD/bin" \
       -Wl,-rpath,"$BLD/bin" -lllama -lggml -lggml-base -o "$GREEDY"
fi
echo "llama.cpp: $LBENCH"
[ "$BUILD_ONLY" = 1 ] && exit 0

# ---------------------------------------------------------------- the weights
[ -x "$SKIPLM" ] || { echo "no $SKIPLM: run make first"; exit 1; }
W=$BENCH_DIR/weights
mkdir -p "$W"
if [ -z "$MODEL" ]; then
    MODEL=$W/model.safetensors
    # shellcheck disable=SC2086
    "$SKIPLM" init "$MODEL" $INIT_OPTS >/dev/null
fi
"$SKIPLM" quantize "$MODEL" --out "$W/model-q8.safetensors" >/dev/null 2>"$BENCH_DIR/quantize.log" ||
    { cat "$BENCH_DIR/quantize.log"; exit 1; }
"$PY" bench/gguf_write.py "$MODEL" "$W/model-fp32.gguf" --type f32
"$PY" bench/gguf_write.py "$MODEL" "$W/model-bf16.gguf" --type bf16
"$PY" bench/gguf_write.py "$W/model-q8.safetensors" "$W/model-q8.gguf"
V=$("$PY" -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; print(json.loads(f.read(n))['__metadata__']['vocab_size'])" "$MODEL")
"$PY" bench/export_ref.py --vocab "$V" --char-vocab "$W/vocab.json" >/dev/null

sk_file() { case "$1" in q8) echo "$W/model-q8.safetensors" ;; *) echo "$MODEL" ;; esac; }
sk_flag() { case "$1" in bf16) echo "--bf16" ;; *) echo "" ;; esac; }

# ---------------------------------------------------------------- greedy agreement
# skiplm's logits on the prompt and llama.cpp's greedy tokens (eval --dump-logits: the full
# forward pass) against the logits llama.cpp chose them from: on a random model the tokens
# agree even where the weights are read wrongly (the attention is nearly uniform), the logits
# do not.
PROMPT_IDS="1 $((V / 3)) $((V / 2)) $((V - 1))"
echo "== greedy agreement: $AGREE tokens after the prompt ids $PROMPT_IDS"
for p in $PRECS; do
    prompt=$("$PY" -c "import sys; print(''.join(' ' if int(i) == 0 else chr(0xF0000 + int(i)) for i in sys.argv[1:]), end='')" $PROMPT_IDS)
    # shellcheck disable=SC2046
    sk=$(OMP_NUM_THREADS=$THREADS "$SKIPLM" sample "$(sk_file "$p")" $(sk_flag "$p") --tokenizer "$W/vocab.json" --prompt "$prompt" \
           --tokens "$AGREE" --greedy --quiet --ignore-eos | "$PY" -c "import sys; t=sys.stdin.read()[:-1]; print(' '.join(str(0 if c == ' ' else ord(c) - 0xF0000) for c in t))")
    # shellcheck disable=SC2086
    ll=$("$GREEDY" "$W/model-$p.gguf" "$AGREE" "$THREADS" "$W/llama-logits-$p.bin" $PROMPT_IDS 2>"$BENCH_DIR/greedy-$p.log")
    n=$("$PY" -c "import sys; a=sys.argv[1].split(); b=sys.argv[2].split(); n=0
while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
print(n)" "$sk" "$ll")
    # shellcheck disable=SC2086
    "$PY" bench/export_ref.py shard-ids "$W/seq-$p.bin" $PROMPT_IDS $ll >/dev/null
    # (eval has no bf16 weights on the CPU: bf16's row compares with the fp32 model's logits)
    OMP_NUM_THREADS=$THREADS "$SKIPLM" eval "$(sk_file "$p")" "$W/seq-$p.bin" --batch 1 \
        --seq $((4 + AGREE - 1)) --max-batches 1 --dump-logits "$W/skiplm-logits-$p.safetensors" >/dev/null \
        2>"$BENCH_DIR/eval-$p.log" || { cat "$BENCH_DIR/eval-$p.log"; exit 1; }
    rel=$(PYTHONPATH=bench "$PY" -c "
import sys, numpy as np
from export_ref import SafeTensors
st = SafeTensors(sys.argv[1]); name = next(n for n in st.names() if 'logit' in n)
V = int(sys.argv[3]); s = np.asarray(st.get(name), dtype=np.float64).reshape(-1, V)[3:]
l = np.fromfile(sys.argv[2], dtype='<f4').astype(np.float64).reshape(-1, V)
d = np.abs(s - l).max(); print(f'{d / np.abs(l).max():.2e} (max |diff| {d:.2e}, max |logit| {np.abs(l).max():.2f})')
" "$W/skiplm-logits-$p.safetensors" "$W/llama-logits-$p.bin" "$V")
    echo "$p: $n of $AGREE greedy tokens agree; logits along llama.cpp's tokens differ by $rel relative"
    if [ "$p" = fp32 ] && [ "${FORCE:-0}" != 1 ] &&
       { [ "$n" -lt "$AGREE" ] || ! awk -v r="${rel%% *}" 'BEGIN {exit !(r < 1e-4)}'; }; then
        echo "fp32: the engines disagree (skiplm ${sk:0:100} / llama.cpp ${ll:0:100}); FORCE=1 goes on"
        exit 1
    fi
done

# ---------------------------------------------------------------- timing
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# llama-batched-bench's table row: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
# Its log goes through a thread that is not flushed at exit, so the last row printed is lost at
# times: a small configuration runs after the timed one (-ntg NTG,2 or -npp NPP,2), and a run
# whose row is missing anyway is repeated.
llama_rate() {   # PREC NPP NTG NPL COLUMN (7: S_PP, 9: S_TG)
    local ctx=$(( $4 * ($2 + $3) + 16 )) pp=$2 tg=$3 try r
    if [ "$5" = 7 ]; then pp="$2,2"; else tg="$3,2"; fi
    for try in 1 2 3; do
        r=$("$LBENCH" -m "$W/model-$1.gguf" -t "$THREADS" -tb "$THREADS" -c "$ctx" -npp "$pp" -ntg "$tg" -npl "$4" 2>/dev/null |
            awk -F'|' -v c="$5" -v pp="$2" -v tg="$3" -v pl="$4" '$2 + 0 == pp && $3 + 0 == tg && $4 + 0 == pl {gsub(/ /, "", $c); print $c; exit}' || true)
        if [ -n "$r" ]; then echo "$r"; return; fi
    done
}
sk_gen() {       # PREC NPL
    # shellcheck disable=SC2046
    OMP_NUM_THREADS=$THREADS "$SKIPLM" bench --model "$(sk_file "$1")" $(sk_flag "$1") --gen "$NTG" --gen-seqs "$2" |
        sed -n 's/^generate: .*, \([0-9.]*\) tok\/s.*/\1/p'
}
sk_prefill() {   # PREC
    # shellcheck disable=SC2046
    OMP_NUM_THREADS=$THREADS "$SKIPLM" bench --model "$(sk_file "$1")" $(sk_flag "$1") --prefill "$NPP" --gen 0 |
        sed -n 's/^prefill: .*, \([0-9.]*\) tok\/s.*/\1/p'
}
ROWS=()
cell() {         # WHAT PREC N "LLAMA_RATE ARGS" SKIPLM_FUNCTION [ITS ARG]
    local what=$1 p=$2 n=$3 largs=$4 sfn=$5 sarg=${6:-} lr="" sr="" lm sm ratio
    for _ in $(seq "$ROUNDS"); do
        # shellcheck disable=SC2086
        lr+="$(llama_rate "$p" $largs) "
        # shellcheck disable=SC2086
        sr+="$($sfn "$p" $sarg) "
    done
    lm=$(echo "$lr" | tr ' ' '\n' | { grep . || true; } | median)
    sm=$(echo "$sr" | tr ' ' '\n' | { grep . || true; } | median)
    ratio=$(awk -v a="$sm" -v b="$lm" 'BEGIN {if (b + 0 > 0 && a + 0 > 0) printf "%.2fx", a / b; else print "-"}')
    echo "  $what $p x$n: llama.cpp [ $lr] skiplm [ $sr]"
    ROWS+=("| $what | $p | $n | $lm | $sm | $ratio |")
}
echo "== timing: $ROUNDS rounds, $THREADS threads, engines alternated"
for p in $PRECS; do
    for n in $SEQS; do cell decode "$p" "$n" "1 $NTG $n 9" sk_gen "$n"; done
    if [ "$NPP" -gt 0 ]; then cell "prefill $NPP" "$p" 1 "$NPP 1 1 7" sk_prefill; fi
done
echo
echo "model: $MODEL ($("$SKIPLM" info "$MODEL" 2>/dev/null | head -1)); llama.cpp $(git -C "$SRC" rev-parse --short HEAD) from node-llama-cpp@$NLC_VERSION"
echo "tokens/s summed over the sequences, median of $ROUNDS; $THREADS threads each; llama.cpp: llama-batched-bench -t $THREADS -tb $THREADS -npp 1 -ntg $NTG -npl N (prefill: -npp $NPP -ntg 1 -npl 1), skiplm: bench --model F --gen $NTG --gen-seqs N (prefill: --prefill $NPP --gen 0)"
echo
echo "| what | weights | sequences | llama.cpp | skiplm | skiplm / llama.cpp |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
