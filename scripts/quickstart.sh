#!/usr/bin/env bash
# The README's first command: install what is missing, build, prepare the default corpus
# (the State of the Union addresses, character level), train a small Skip-Layer Attention
# model, sample from it, and say where the model is and what to try next.
#   bash scripts/quickstart.sh          400 steps of a Llama-family model (RoPE): about 3 minutes
#                                       on 2 AVX-512 cores, 5.5 on 2 slower AVX2 ones; val ~1.23
#   bash scripts/quickstart.sh --full   the long run: 1200 steps of a GPT-2-family model (learned
#                                       positions), 9-16 minutes; val ~1.21
#   QUICKSTART_STEPS=N bash scripts/quickstart.sh   the short run's model for N steps
# Where the CPU has native bf16 instructions (avx512_bf16 or AMX, through oneDNN) the model trains
# in bf16 mixed precision (train --bf16), which ends the 400-step run at fp32's validation loss
# (docs/training.md); QUICKSTART_FP32=1 trains in fp32 anyway.
# RoPE is why the short run is short: with learned positions the same model is at 2.09 nats
# after 300 steps (of 600), with RoPE at 1.31 (of 400) (docs/training.md).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
full=0
for a in "$@"; do
    case $a in
    --full) full=1 ;;
    *) echo "usage: bash scripts/quickstart.sh [--full]" >&2; exit 2 ;;
    esac
done
run=runs/quickstart
# both: 4 layers, 4 heads, 256 wide, SLA by the paper's 3/4 rule (layer 3's last 3 heads read
# layer 0's K/V), batches of 16 x 256 characters
model="--n_layer 4 --n_head 4 --n_embd 256 --block_size 256 --sla"
if [ $full = 1 ]; then
    what="GPT-2 family, 1200 steps"
    recipe="$model --steps ${QUICKSTART_STEPS:-1200} --lr 1e-3 --min-lr 1e-4 --warmup 50 --eval-every 200"
else
    what="Llama family (RoPE), ${QUICKSTART_STEPS:-400} steps"
    recipe="--family llama --rope_theta 10000 $model --steps ${QUICKSTART_STEPS:-400} --lr 2e-3 --min-lr 2e-4 --warmup 20 --eval-every 100"
fi

bash scripts/install_deps.sh
bash scripts/setup.sh
echo "== build"
make -j"$(nproc)" build/skiplm >/dev/null
echo "== prepare: State of the Union addresses, character-level"
./build/skiplm prepare --out data/sotu-char
# bf16 mixed precision where the CPU runs it natively (bench --gemm-rate says "no native bf16"
# otherwise, and gives a bf16 rate of 0 in a build without oneDNN)
prec="" how="fp32"
rate=$(./build/skiplm bench --n_layer 1 --n_head 1 --n_embd 64 --vocab_size 64 --block_size 16 --batch 1 --seq 16 --gemm-rate |
       grep '^gemm-rate:' || true)
if [ "${QUICKSTART_FP32:-0}" != 1 ] && echo "$rate" | grep -q "bf16 [1-9]" && ! echo "$rate" | grep -q "no native"; then
    prec="--bf16"
    how="bf16 mixed precision: this CPU has native bf16 ($(echo "$rate" | sed 's/.*(\(.*\))/\1/')), and bf16 ends at fp32's validation loss; QUICKSTART_FP32=1 for fp32"
fi
echo "== train: $what; 4 layers, 4 heads, 256 wide, SLA with the paper's 3/4 rule; $how"
# shellcheck disable=SC2086
./build/skiplm train --data data/sotu-char --out $run --overwrite $recipe $prec \
    --batch 16 --seq 256 --eval-batches 20 --ckpt-every 200
echo "== sample"
./build/skiplm sample $run/ckpt.safetensors --prompt "Fellow citizens, " --tokens 500 --temperature 0.8
cat <<EOF

== done in $(( $(date +%s) - start )) s
The model and its optimizer state: $run/ckpt.safetensors (the loss curve: $run/log.jsonl)
Next, try:
  ./build/skiplm sample $run/ckpt.safetensors --prompt "My fellow Americans" --tokens 300 --temperature 0.7
  ./build/skiplm eval $run/ckpt.safetensors data/sotu-char/val.bin
  ./build/skiplm prepare my_text.txt --out data/mine && ./build/skiplm train --data data/mine --out runs/mine --preset small --sla --steps 2000
(train --resume continues a run; docs/training.md has every option)
EOF
