#!/usr/bin/env bash
# The README's first command: install, build, prepare the default corpus, train a small
# Skip-Layer Attention model for about 10 minutes on 2 cores, and sample from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/setup.sh
make -j"$(nproc)" >/dev/null
echo "== prepare: State of the Union addresses, character-level"
./build/skiplm prepare --out data/sotu-char
echo "== train: 4 layers, 4 heads, 256 dims, SLA with the paper's 3/4 rule (3 layers back, 3 of 4 heads)"
./build/skiplm train --data data/sotu-char --out runs/quickstart --overwrite \
    --n_layer 4 --n_head 4 --n_embd 256 --block_size 256 --sla \
    --steps ${QUICKSTART_STEPS:-1200} --batch 16 --seq 256 --lr 1e-3 --min-lr 1e-4 --warmup 50 \
    --eval-every 200 --eval-batches 20 --ckpt-every 200
echo "== sample"
./build/skiplm sample runs/quickstart/ckpt.safetensors --prompt "Fellow citizens, " --tokens 500 --temperature 0.8
