#!/usr/bin/env bash
# Side-by-side CPU training throughput: skiplm vs the repo's PyTorch reference, same
# configs, same thread count, one after the other in one run (issue 6's table).
#   bash bench/compare.sh [steps]
# Run it on a quiet machine: with 2 cores, any other load makes both figures worthless.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-5}
T=${OMP_NUM_THREADS:-$(nproc)}
export OMP_NUM_THREADS=$T
rows=(
  "gpt2-124M|--n_layer 12 --n_head 12 --n_embd 768 --vocab_size 50304|4|64"
  "6L-384-bpe|--n_layer 6 --n_head 6 --n_embd 384 --vocab_size 50304|8|256"
  "6L-384-char|--n_layer 6 --n_head 6 --n_embd 384 --vocab_size 65|8|256"
)
printf "%-12s %14s %14s %8s\n" config "skiplm tok/s" "torch tok/s" ratio
for r in "${rows[@]}"; do
    IFS='|' read -r name model B S <<<"$r"
    sk=$(./build/skiplm bench $model --block_size "$S" --batch "$B" --seq "$S" --steps "$steps" --no-gen | sed -n 's/.* \([0-9]*\) tokens\/s.*/\1/p')
    pt=$(/usr/bin/python3 bench/torch_bench.py $model --batch "$B" --seq "$S" --steps "$steps" --threads "$T" | sed -n 's/.* \([0-9]*\) tokens\/s.*/\1/p')
    printf "%-12s %14s %14s %8s\n" "$name" "$sk" "$pt" "$(awk -v a="$sk" -v b="$pt" 'BEGIN{printf "%.2fx", a/b}')"
done
