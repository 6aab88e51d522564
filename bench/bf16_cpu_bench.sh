#!/usr/bin/env bash
# CPU training throughput in bf16, side by side in one run (issue 43): skiplm fp32, skiplm
# --bf16 and PyTorch 1.13 under torch.autocast("cpu", dtype=torch.bfloat16) with its
# scaled-dot-product attention (bench/torch_bench.py --autocast --attn sdpa: PyTorch's fastest
# CPU training path), alternating A B C A B C ... over ROUNDS rounds, THREADS threads each.
# Each round first measures the bf16 GEMM rate on the row's shapes (skiplm bench --gemm-rate:
# oneDNN's matmul, what both sides' bf16 GEMMs run on) and the MFU of every program is its
# FLOPs per second (6 per matmul parameter and token, plus the causal attention's 6 L T C) over
# that rate. Each skiplm --bf16 run's share of the step per phase (matmul, attention, ...) is
# printed under its round.
#   bash bench/bf16_cpu_bench.sh [ROUNDS] [STEPS]      (defaults 3 and 5)
# Environment: THREADS (2), ROWS (names below, space-separated; default all), WARMUP (untimed
# steps per run, 1), TORCH_FP32=1 adds PyTorch fp32 with SDPA as a fourth program.
# Run it on a quiet machine: with 2 cores, any other load makes the figures worthless.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-5}
THREADS=${THREADS:-2}
WARMUP=${WARMUP:-1}
export OMP_NUM_THREADS=$THREADS
SK=${SKIPLM:-./build/skiplm}
PY=${PY:-/usr/bin/python3}
# name | model options (both programs) | B | T
ALL_ROWS=(
  "char|--n_layer 6 --n_head 6 --n_embd 384 --vocab_size 65|8|256"
  "6L-384-gpt2vocab|--n_layer 6 --n_head 6 --n_embd 384 --vocab_size 50304|8|256"
  "gpt2-124M-T64|--n_layer 12 --n_head 12 --n_embd 768 --vocab_size 50304|4|64"
  "gpt2-124M-T1024|--n_layer 12 --n_head 12 --n_embd 768 --vocab_size 50304|4|1024"
)
want=" ${ROWS:-char 6L-384-gpt2vocab gpt2-124M-T64 gpt2-124M-T1024} "
"$SK" bench --n_layer 1 --n_head 1 --n_embd 64 --vocab_size 64 --block_size 16 --batch 1 --seq 16 --gemm-rate >/dev/null ||
    { echo "bf16_cpu_bench: $SK bench --gemm-rate failed (make first)" >&2; exit 1; }
if ! "$SK" bench --n_layer 1 --n_head 1 --n_embd 64 --vocab_size 64 --block_size 16 --batch 1 --seq 16 --gemm-rate |
        grep -q "bf16 [1-9]"; then
    echo "bf16_cpu_bench: this skiplm has no bf16 GEMMs: install libdnnl-dev (bash scripts/install_deps.sh) and rebuild" >&2
    exit 1
fi
"$SK" bench --n_layer 1 --n_head 1 --n_embd 64 --vocab_size 64 --block_size 16 --batch 1 --seq 16 --gemm-rate | grep gemm-rate:
echo "threads $THREADS, rounds $ROUNDS, steps $STEPS (+$WARMUP warm-up) per run; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
grep -qw avx512_bf16 /proc/cpuinfo && echo "cpu flags: avx512_bf16" || echo "cpu flags: no avx512_bf16 (skiplm --bf16 and autocast run on fallbacks)"

tokps() { sed -n 's/.* \([0-9][0-9]*\) tokens\/s.*/\1/p' | head -1; }
median() { sort -n | awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2); else print 0}'; }
summary=()
for r in "${ALL_ROWS[@]}"; do
    IFS='|' read -r name model B T <<<"$r"
    [[ $want == *" $name "* ]] || continue
    read -r L C V <<<"$(echo "$model" | sed 's/--n_layer \([0-9]*\).*--n_embd \([0-9]*\).*--vocab_size \([0-9]*\).*/\1 \2 \3/')"
    # FLOPs per token: 6 per parameter of the matmuls (12 C^2 per layer, the V x C classifier) and
    # the causal attention's 6 L T C (skiplm bench's count)
    fpt=$(awk -v L="$L" -v C="$C" -v V="$V" -v T="$T" 'BEGIN { printf "%.0f", 6 * (12 * L * C * C + V * C) + 6 * L * T * C }')
    echo "== $name: $model, B=$B, T=$T ($fpt FLOPs per token)"
    rates=() ; fp=(); bf=(); ac=(); tf=()
    for round in $(seq 1 "$ROUNDS"); do
        rate=$("$SK" bench $model --block_size "$T" --batch "$B" --seq "$T" --gemm-rate | sed -n 's/^gemm-rate: .*bf16 \([0-9.]*\) GFLOP.*/\1/p')
        rates+=("$rate")
        a=$("$SK" bench $model --block_size "$T" --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" --no-gen | tokps)
        out=$("$SK" bench $model --block_size "$T" --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" --no-gen --bf16)
        b=$(echo "$out" | tokps)
        share=$(echo "$out" | sed -n 's/^  share of the step: //p')
        c=$("$PY" bench/torch_bench.py $model --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" --autocast --attn sdpa | tokps)
        fp+=("$a"); bf+=("$b"); ac+=("$c")
        line="round $round: bf16 GEMM $rate GFLOP/s; skiplm fp32 $a tok/s, skiplm bf16 $b tok/s, torch autocast $c tok/s"
        if [ "${TORCH_FP32:-0}" = 1 ]; then
            d=$("$PY" bench/torch_bench.py $model --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" --attn sdpa | tokps)
            tf+=("$d"); line="$line, torch fp32 $d tok/s"
        fi
        echo "  $line"
        echo "    skiplm bf16, share of the step: $share"
    done
    R=$(printf '%s\n' "${rates[@]}" | median)
    mfu() { awk -v t="$1" -v f="$fpt" -v r="$R" 'BEGIN { printf "%.1f%%", (r > 0 ? 100 * t * f / (r * 1e9) : 0) }'; }
    A=$(printf '%s\n' "${fp[@]}" | median); Bm=$(printf '%s\n' "${bf[@]}" | median); Cm=$(printf '%s\n' "${ac[@]}" | median)
    s=$(printf "%-18s bf16 GEMM %7.1f GFLOP/s | skiplm fp32 %7.0f tok/s (MFU %s) | skiplm bf16 %7.0f tok/s (MFU %s) | torch autocast %7.0f tok/s (MFU %s) | bf16/autocast %s, bf16/fp32 %s" \
        "$name" "$R" "$A" "$(mfu "$A")" "$Bm" "$(mfu "$Bm")" "$Cm" "$(mfu "$Cm")" \
        "$(awk -v a="$Bm" -v b="$Cm" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')" \
        "$(awk -v a="$Bm" -v b="$A" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')")
    if [ ${#tf[@]} -gt 0 ]; then
        D=$(printf '%s\n' "${tf[@]}" | median); s="$s | torch fp32 $D tok/s (MFU $(mfu "$D"))"
    fi
    summary+=("$s")
done
echo
echo "medians over $ROUNDS rounds (MFU against the bf16 GEMM rate of the same run):"
printf '%s\n' "${summary[@]}"
