#!/usr/bin/env bash
# skiplm against two reference C programs on identical weights:
#   llm.c's CPU trainer (train_gpt2.c, GPT-2 124M, B=4 T=64), llama2.c's run.c (fp32 generation)
#   and runq.c (int8 generation).
#
# usage: bash bench/vs_ref.sh LLMC_DIR LLAMA2C_DIR [runs]
#   LLMC_DIR     a directory with llm.c's built `train_gpt2`  (make train_gpt2, or
#                gcc -Ofast -march=native -fopenmp -DOMP train_gpt2.c -lm -lgomp -o train_gpt2)
#   LLAMA2C_DIR  a directory with llama2.c's built `run` and `runq` (make runomp, or
#                gcc -Ofast -fopenmp -march=native run.c -lm -o run, and the same for runq.c)
#   runs         timing runs of each program, alternated (default 3); 0 = correctness checks only
#
# Both programs get the same thread count: OMP_NUM_THREADS (default: all cores).
# Environment: VS_REF_SHAPES   (default "stories15M stories42M stories110M")
#              VS_REF_LLMC_STEPS  llm.c steps to time per run, after its step 0 (default 10)
#              VS_REF_SKIP_LLMC=1 skip everything llm.c (GPT-2 124M needs ~2 GB and minutes)
#              VS_REF_WORK     scratch directory (default: a new one under /tmp, removed at the end)
#              PYTHON          python3 with numpy (default /usr/bin/python3)
#
# What is compared:
#  - llm.c: its printed per-step time ("step N: train loss L (took X ms)": forward, backward,
#    AdamW lr 1e-4 betas 0.9/0.999 eps 1e-8 wd 0, and reading one batch), median of steps
#    1..VS_REF_LLMC_STEPS (step 0 excluded), against `skiplm bench --preset gpt2 --gelu tanh
#    --batch 4 --seq 64 --no-gen` (forward, backward, gradient norm and clipping, AdamW lr 1e-4),
#    median ms/step. Validation and sampling of train_gpt2 fall outside its timed region.
#  - llama2.c: run.c's "achieved tok/s" (greedy, 256 positions: BOS, its " " prefix, one prompt
#    token, 253 generated; timed after the first) against the "new tokens at R tok/s" of
#    `skiplm sample --greedy` on the same weights (same prompt, 253 new tokens), per shape of
#    llama2.c's stories models with random weights; and of `skiplm sample --bf16` (the weights
#    streamed as bf16, arithmetic fp32: a different precision, which llama2.c's run.c lacks).
#  - llama2.c's runq.c: the same, on the same weights quantized to its int8 file (groups of 64,
#    fp32 scales; bench/export_ref.py --llama2c-q8, as its export.py --version 2 writes it),
#    against `skiplm sample --q8` (groups of 32, fp16 scales, quantized from the same fp32
#    weights at load). Both read about a byte a weight; runq.c also quantizes the activations.
set -euo pipefail

if [ $# -lt 2 ]; then sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
LLMC_DIR=$(cd "$1" && pwd)
L2C_DIR=$(cd "$2" && pwd)
RUNS=${3:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SK=$ROOT/build/skiplm
EX=$ROOT/bench/export_ref.py
PY=${PYTHON:-/usr/bin/python3}
SHAPES=${VS_REF_SHAPES:-"stories15M stories42M stories110M"}
LLMC_STEPS=${VS_REF_LLMC_STEPS:-10}
SKIP_LLMC=${VS_REF_SKIP_LLMC:-0}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

[ -x "$SK" ] || { echo "build skiplm first (make)"; exit 1; }
[ -x "$L2C_DIR/run" ] || { echo "no executable $L2C_DIR/run"; exit 1; }
[ -x "$L2C_DIR/runq" ] || { echo "no executable $L2C_DIR/runq (llama2.c's make runomp builds it)"; exit 1; }
[ "$SKIP_LLMC" = 1 ] || [ -x "$LLMC_DIR/train_gpt2" ] || { echo "no executable $LLMC_DIR/train_gpt2"; exit 1; }
"$PY" -c "import numpy" 2>/dev/null || { echo "$PY lacks numpy (apt-get install python3-numpy)"; exit 1; }

if [ -n "${VS_REF_WORK:-}" ]; then W=$VS_REF_WORK; mkdir -p "$W"
else W=$(mktemp -d /tmp/vs_ref.XXXXXX); trap 'rm -rf "$W"' EXIT; fi
echo "vs_ref: threads $OMP_NUM_THREADS, runs $RUNS, scratch $W"
FAIL=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAIL=1; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
piece() { "$PY" -c "import sys; i=int(sys.argv[1]); sys.stdout.write(' ' if i==0 else chr(0xF0000+i))" "$1"; }

# ------------------------------------------------------------------ llama2.c: greedy check
# A 2-layer GQA Llama trained for a few seconds on sequences whose next token is a function of
# the token two back (so the greedy continuation depends on attention and RoPE), exported;
# run.c's greedy continuation of a prompt must be skiplm's (sample, KV cache) and every one of
# its tokens must be the argmax of skiplm's full forward (eval --dump-logits).
check_llama2c() {
    local d=$W/l2c_check m
    mkdir -p "$d"
    local cfg="--family llama --bias 0 --n_layer 2 --n_embd 64 --n_head 4 --n_kv_head 2 --vocab_size 512 --block_size 256 --norm_eps 1e-5 --rope_theta 10000"
    "$PY" "$EX" --vocab 512 --char-vocab "$d/vocab.json" >/dev/null
    "$PY" - "$d/chain.bin" "$EX" <<'EOF'
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location("ex", sys.argv[2]); ex = importlib.util.module_from_spec(spec); spec.loader.exec_module(ex)
r, g, toks = random.Random(7), (lambda x: (x * 37 + 11) % 510 + 2), []
for _ in range(1000):
    doc = [1, 0, r.randrange(2, 512), r.randrange(2, 512)]
    while len(doc) < 64: doc.append(g(doc[-2]))
    toks += doc
ex.write_shard(sys.argv[1], toks)
EOF
    # shellcheck disable=SC2086
    "$SK" train --train "$d/chain.bin" --tokenizer "$d/vocab.json" --out "$d/run" --overwrite --steps 400 \
        --batch 8 --seq 64 --lr 3e-3 --warmup 10 --eval-every 0 --ckpt-every 0 --print-every 400 $cfg > "$d/train.log" 2>&1 \
        || { fail "llama2.c check: skiplm train (see $d/train.log)"; return; }
    m=$d/run/ckpt.safetensors
    "$PY" "$EX" "$m" --llama2c "$d/m.bin" --tokenizer "$d/tok.bin" >/dev/null
    local p1 p2 prompt n=64
    p1=$(piece 17); p2=$(piece 291); prompt="$p1$p2"
    "$L2C_DIR/run" "$d/m.bin" -z "$d/tok.bin" -t 0 -n $n -i "$prompt" > "$d/run.txt" 2>/dev/null || { fail "llama2.c check: run.c failed"; return; }
    "$PY" "$EX" ids "$d/run.txt" > "$d/run_ids.txt"
    local gen=$((n - 3))
    "$SK" sample "$m" --tokenizer "$d/vocab.json" --prompt "$(piece 1) $prompt" --tokens $gen --greedy --quiet > "$d/sk.txt" 2>/dev/null
    "$PY" "$EX" ids "$d/sk.txt" > "$d/sk_ids.txt"
    local r s
    r=$(cut -d' ' -f3- "$d/run_ids.txt"); s=$(cat "$d/sk_ids.txt")
    if [ -n "$r" ] && [ "$r" = "$s" ]; then pass "llama2.c greedy: run.c and skiplm sample give the same $gen tokens after the prompt"
    else fail "llama2.c greedy: run.c [$r] vs skiplm sample [$s]"; fi
    # shellcheck disable=SC2046
    "$PY" "$EX" shard-ids "$d/seq.bin" 1 0 $(cat "$d/run_ids.txt")
    "$SK" eval "$m" "$d/seq.bin" --batch 1 --seq $n --max-batches 1 --dump-logits "$d/dump.safetensors" >/dev/null 2>&1 &&
        "$PY" "$EX" dump-check "$d/dump.safetensors" 3 | tail -1 | sed 's/^/  /' &&
        pass "llama2.c greedy: each run.c token is the argmax of skiplm eval's logits" ||
        fail "llama2.c greedy: run.c's tokens are not skiplm eval's argmax"
    # 8-bit: runq.c on its int8 file and skiplm --q8 (different quantizations of the same
    # weights) continue as run.c does until a near tie (this model's smallest top-1/top-2 margin
    # is about 0.005) turns one of them; a misread file would differ from the first tokens
    "$PY" "$EX" "$m" --llama2c-q8 "$d/mq.bin" >/dev/null
    "$L2C_DIR/runq" "$d/mq.bin" -z "$d/tok.bin" -t 0 -n $n -i "$prompt" > "$d/runq.txt" 2>/dev/null || { fail "llama2.c check: runq.c failed"; return; }
    "$SK" sample "$m" --tokenizer "$d/vocab.json" --prompt "$(piece 1) $prompt" --tokens $gen --greedy --quiet --q8 > "$d/skq.txt" 2>/dev/null
    local rq sq nq ns
    rq=$("$PY" "$EX" ids "$d/runq.txt" | cut -d' ' -f3-); sq=$("$PY" "$EX" ids "$d/skq.txt")
    same() { "$PY" -c "import sys; a, b = sys.argv[1].split(), sys.argv[2].split(); print(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))" "$1" "$2"; }
    nq=$(same "$rq" "$r"); ns=$(same "$sq" "$r")
    if [ "$nq" -ge 8 ] && [ "$ns" -ge 8 ]; then pass "llama2.c greedy, 8-bit: runq.c follows run.c for $nq tokens, skiplm sample --q8 for $ns (of $gen)"
    else fail "llama2.c greedy, 8-bit: runq.c [$rq] ($nq tokens as run.c) skiplm --q8 [$sq] ($ns) vs run.c [$r]"; fi
}

# ------------------------------------------------------------------ llm.c: step-0 loss check
# GPT-2 124M (tanh GELU) from skiplm init, exported as gpt2_124M.bin; shards in which every
# window of B*T+1 = 257 tokens is the same, so llm.c's shuffled loader serves that one batch.
llmc_setup() {
    local d=$W/llmc
    mkdir -p "$d/dev/data/tinyshakespeare"
    "$SK" init "$W/gpt2.safetensors" --preset gpt2 --gelu tanh > /dev/null
    "$PY" "$EX" "$W/gpt2.safetensors" --llmc "$d/gpt2_124M.bin" > /dev/null
    # tokens: the project's docs as GPT-2 text (skiplm prepare), else random ids
    rm -rf "$W/txt" "$W/gtok"; mkdir -p "$W/txt"; cp "$ROOT"/docs/*.md "$ROOT/README.md" "$W/txt/" 2>/dev/null || true
    if (cd "$ROOT" && "$SK" prepare "$W/txt" --out "$W/gtok" --tokenizer gpt2 > /dev/null 2>&1) && [ -f "$W/gtok/train.bin" ]; then
        :
    else
        echo "  (skiplm prepare --tokenizer gpt2 unavailable: random token ids)"
        # shellcheck disable=SC2046
        "$PY" "$EX" shard-ids "$W/gtok.bin" $("$PY" -c "import random; r=random.Random(1); print(' '.join(str(r.randrange(50257)) for _ in range(600)))")
        mkdir -p "$W/gtok"; mv "$W/gtok.bin" "$W/gtok/train.bin"
    fi
    # more windows than train_gpt2's 41 steps and 5 validation batches: its loader fails an
    # assertion when it wraps around a single shard
    "$PY" "$EX" shard "$W/gtok/train.bin" "$d/dev/data/tinyshakespeare/tiny_shakespeare_train.bin" 0 256 48
    "$PY" "$EX" shard "$W/gtok/train.bin" "$d/dev/data/tinyshakespeare/tiny_shakespeare_val.bin" 256 256 8
}

# run train_gpt2 in $W/llmc until it has printed "step N:" (then stop it); output in $1
run_llmc() {
    local out=$1 last=$2 pid
    ( cd "$W/llmc" && exec stdbuf -oL "$LLMC_DIR/train_gpt2" > "$out" 2>&1 ) &
    pid=$!
    while kill -0 $pid 2>/dev/null; do
        grep -q "^step $last:" "$out" 2>/dev/null && break
        sleep 0.5
    done
    kill $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
}

check_llmc() {
    local d=$W/llmc
    run_llmc "$W/llmc_check.txt" 0
    local ref_train ref_val sk_train sk_val
    ref_train=$(sed -n 's/^step 0: train loss \([0-9.]*\).*/\1/p' "$W/llmc_check.txt")
    ref_val=$(sed -n 's/^val loss \([0-9.]*\).*/\1/p' "$W/llmc_check.txt" | head -1)
    sk_train=$("$SK" eval "$W/gpt2.safetensors" "$d/dev/data/tinyshakespeare/tiny_shakespeare_train.bin" --batch 4 --seq 64 --max-batches 1 | awk '{print $2}')
    sk_val=$("$SK" eval "$W/gpt2.safetensors" "$d/dev/data/tinyshakespeare/tiny_shakespeare_val.bin" --batch 4 --seq 64 --max-batches 1 | awk '{print $2}')
    echo "  llm.c step 0 train loss $ref_train, val loss $ref_val; skiplm eval: $sk_train, $sk_val"
    if [ -n "$ref_train" ] && [ -n "$ref_val" ] &&
       awk -v a="$ref_train" -v b="$sk_train" -v c="$ref_val" -v e="$sk_val" 'BEGIN {d1=a-b; d2=c-e; exit !(d1<1e-4 && d1>-1e-4 && d2<1e-4 && d2>-1e-4)}'; then
        pass "llm.c: step-0 train loss and val loss equal skiplm's to 1e-4"
    else
        fail "llm.c: losses differ (see $W/llmc_check.txt)"
    fi
}

stories_cfg() {
    case $1 in
        stories15M)  echo "--n_embd 288 --ffn_hidden 768 --n_layer 6 --n_head 6 --n_kv_head 6 --block_size 256" ;;
        stories42M)  echo "--n_embd 512 --ffn_hidden 1376 --n_layer 8 --n_head 8 --n_kv_head 8 --block_size 1024" ;;
        stories110M) echo "--n_embd 768 --ffn_hidden 2048 --n_layer 12 --n_head 12 --n_kv_head 12 --block_size 1024" ;;
        *) echo "unknown shape $1" >&2; return 1 ;;
    esac
}

echo "== correctness"
check_llama2c
[ "$SKIP_LLMC" = 1 ] || { llmc_setup; check_llmc; }

[ "$RUNS" -gt 0 ] || { [ $FAIL = 0 ] && echo "all checks passed"; exit $FAIL; }

echo "== timing ($RUNS runs each, alternated; OMP_NUM_THREADS=$OMP_NUM_THREADS)"
ROWS=(); Q8ROWS=()
if [ "$SKIP_LLMC" != 1 ]; then
    ref_all=""; sk_all=""
    for r in $(seq 1 "$RUNS"); do
        run_llmc "$W/llmc_time.txt" "$LLMC_STEPS"
        ms=$(sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)/\1 \2/p' "$W/llmc_time.txt" | awk -v n="$LLMC_STEPS" '$1>=1 && $1<=n {print $2}' | median)
        ref_all="$ref_all $ms"
        sk=$("$SK" bench --preset gpt2 --gelu tanh --batch 4 --seq 64 --steps "$LLMC_STEPS" --no-gen | sed -n 's/^train: .*: \([0-9.]*\) ms\/step.*/\1/p')
        sk_all="$sk_all $sk"
        echo "  run $r: llm.c train_gpt2 $ms ms/step, skiplm bench $sk ms/step"
    done
    ROWS+=("$(printf '%-34s %14s %14s %8s' "GPT-2 124M train step B=4 T=64" "$(echo "$ref_all" | median) ms" "$(echo "$sk_all" | median) ms" \
        "$(awk -v a="$(echo "$ref_all" | median)" -v b="$(echo "$sk_all" | median)" 'BEGIN {printf "%.2fx", a/b}')")")
fi
for shape in $SHAPES; do
    cfg=$(stories_cfg "$shape")
    d=$W/$shape; mkdir -p "$d"
    # shellcheck disable=SC2086
    "$SK" init "$d/m.safetensors" --family llama --bias 0 --vocab_size 32000 --norm_eps 1e-5 --rope_theta 10000 $cfg > /dev/null
    "$PY" "$EX" "$d/m.safetensors" --llama2c "$d/m.bin" --llama2c-q8 "$d/mq.bin" --tokenizer "$d/tok.bin" --char-vocab "$d/vocab.json" > /dev/null
    ref_all=""; sk_all=""; bf_all=""; rq_all=""; q8_all=""
    for r in $(seq 1 "$RUNS"); do
        "$L2C_DIR/run" "$d/m.bin" -z "$d/tok.bin" -t 0 -n 256 -i "$(piece 2)" > "$d/run.txt" 2> "$d/run_err.txt"
        ntok=$("$PY" "$EX" ids "$d/run.txt" | wc -w)
        [ "$ntok" -ge 254 ] || echo "  warning: run.c stopped after $ntok tokens (it ends at token 1)"
        ts=$(sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p' "$d/run_err.txt")
        ref_all="$ref_all $ts"
        sk=$("$SK" sample "$d/m.safetensors" --tokenizer "$d/vocab.json" --prompt "$(piece 1) $(piece 2)" --tokens 253 --greedy 2>&1 >/dev/null |
             sed -n 's/.*new tokens at \([0-9.]*\) tok\/s.*/\1/p')
        sk_all="$sk_all $sk"
        bf=$("$SK" sample "$d/m.safetensors" --tokenizer "$d/vocab.json" --prompt "$(piece 1) $(piece 2)" --tokens 253 --greedy --bf16 2>&1 >/dev/null |
             sed -n 's/.*new tokens at \([0-9.]*\) tok\/s.*/\1/p')
        bf_all="$bf_all $bf"
        "$L2C_DIR/runq" "$d/mq.bin" -z "$d/tok.bin" -t 0 -n 256 -i "$(piece 2)" > "$d/runq.txt" 2> "$d/runq_err.txt"
        tq=$(sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p' "$d/runq_err.txt")
        rq_all="$rq_all $tq"
        q8=$("$SK" sample "$d/m.safetensors" --tokenizer "$d/vocab.json" --prompt "$(piece 1) $(piece 2)" --tokens 253 --greedy --q8 2>&1 >/dev/null |
             sed -n 's/.*new tokens at \([0-9.]*\) tok\/s.*/\1/p')
        q8_all="$q8_all $q8"
        echo "  run $r: $shape llama2.c run $ts tok/s, skiplm sample $sk tok/s, skiplm sample --bf16 $bf tok/s, llama2.c runq $tq tok/s, skiplm sample --q8 $q8 tok/s"
    done
    ratio() { awk -v a="$(echo "$1" | median)" -v b="$(echo "$2" | median)" 'BEGIN {printf "%.2fx", b/a}'; }
    ROWS+=("$(printf '%-34s %14s %14s %8s %14s %8s' "$shape generate (tok/s)" "$(echo "$ref_all" | median)" "$(echo "$sk_all" | median)" \
        "$(ratio "$ref_all" "$sk_all")" "$(echo "$bf_all" | median)" "$(ratio "$ref_all" "$bf_all")")")
    Q8ROWS+=("$(printf '%-34s %14s %14s %8s %14s %8s' "$shape generate (tok/s)" "$(echo "$rq_all" | median)" "$(echo "$q8_all" | median)" \
        "$(ratio "$rq_all" "$q8_all")" "$(echo "$bf_all" | median)" "$(ratio "$bf_all" "$q8_all")")")
done
echo
printf '%-34s %14s %14s %8s %14s %8s\n' "medians, OMP_NUM_THREADS=$OMP_NUM_THREADS" "reference" "skiplm" "speedup" "skiplm bf16" "speedup"
for row in "${ROWS[@]}"; do echo "$row"; done
if [ ${#Q8ROWS[@]} -gt 0 ]; then
    echo
    printf '%-34s %14s %14s %8s %14s %8s\n' "8-bit weights, medians" "runq.c" "skiplm --q8" "speedup" "skiplm bf16" "q8/bf16"
    for row in "${Q8ROWS[@]}"; do echo "$row"; done
fi
[ $FAIL = 0 ] || echo "some correctness checks FAILED"
exit $FAIL
