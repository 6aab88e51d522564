#!/usr/bin/env bash
# The GPU checks and benchmarks of docs/cuda.md ("First run on a GPU"), batched so that a
# session with a short GPU lease runs them in a few calls, each well under 10 minutes:
#
#   LEASE_END=400 bash scripts/gpu_session.sh lease   # one call of ~6-8 min, the figures of docs/cuda.md
#                                       # ("Measured on an H100"): the three CUDA tests at once, then
#                                       # skiplm / llm.c (with and without cuDNN) / torch.compile
#                                       # alternated at B=8 and 32, T=1024, and T=16384, with --profile;
#                                       # then kvseeds until LEASE_END seconds
#   bash scripts/gpu_session.sh kvseeds # the kv grid at T=1024 (baseline, the 3/4 rule, its CLA control)
#                                       # with more seeds (GRID_SEEDS, 12), 3 sweeps at once on the GPU
#   RECALL_END=265 bash scripts/gpu_session.sh recall  # the MQAR grid (docs/experiments.md) at widths 128
#                                       # and 256, 16 runs at once, until RECALL_END seconds
#   bash scripts/gpu_session.sh quick   # the whole first look in one call (~6 min): the three parity
#                                       # tests, GPT-2 124M training steps (T=1024 and 16384, fp32/TF32/
#                                       # bf16, baseline and SLA), generation, and fp32 vs bf16 loss
#                                       # curves on data/sotu-gpt2 when it is there
#   bash scripts/gpu_session.sh final   # one short lease: the main figures, llm.c and PyTorch, the tests (~5 min)
#   bash scripts/gpu_session.sh fused   # the fused attention backward against the split one, llm.c, the tests,
#                                       # bf16check, and mpi when build-cuda-mpi/ is carried (~5 min)
#   bash scripts/gpu_session.sh bf16check # bf16 vs fp32, skiplm and PyTorch autocast, same batches (~2 min)
#   bash scripts/gpu_session.sh check   # nvidia-smi, make cuda, the three parity tests (~3 min)
#   bash scripts/gpu_session.sh train   # GPT-2 124M training step: fp32/TF32/bf16, T=1024 and
#                                       # T=16384, baseline and SLA alternated (~7 min)
#   bash scripts/gpu_session.sh gen     # generation benchmarks, and GPU vs CPU sampled text (~4 min)
#   bash scripts/gpu_session.sh llmc    # llm.c's train_gpt2cu at B=8, T=1024 on the same GPU, from a
#                                       # prepared copy in .bench/llmc (not in the repository; docs/cuda.md)
#   bash scripts/gpu_session.sh grid    # the SLA experiment's kv grid (docs/experiments.md) trained on the GPU:
#                                       # GRID_T=1024 (default) or 256, GRID_ONLY=variants (default: all),
#                                       # 3 seeds; needs data/sotu-char carried; tables in $OUT/kv-gpu
#   bash scripts/gpu_session.sh mpi     # if mpirun is there: 2 ranks sharing the one GPU (gradient
#                                       # mean through host memory), replicated and ZeRO-1, on real
#                                       # hardware; the two runs must agree (~3 min)
#
# The device has no network and a 64 MiB upload: carry what a phase reads as .carry/*.tar.gz
# (git-ignored; unpacked into the tree first by lease): build-cuda/ (skiplm and the two test
# programs, built here with `make cuda BLAS=none MHD=0 ZLIB=0 OPT="-O3 -march=x86-64-v3"` so
# that it needs no library the device lacks), data/sotu-char, and .bench/llmc's train_gpt2cu,
# train_gpt2cu_cudnn and make_data.py.
#
# Each phase appends everything it prints to $LOG (default: $OUT/gpu_session.log when OUT is
# set, else runs/gpu_session.log) and ends with a summary of the figures; it exits non-zero
# if a test or a command failed. Nothing here is timed against anything else running: run it
# alone on the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
phase=${1:-}
LOG=${LOG:-${OUT:-runs}/gpu_session.log}
mkdir -p "$(dirname "$LOG")"
B=${SKIPLM_BIN:-build-cuda/skiplm}     # (SKIPLM_BIN: another build, to rehearse a phase on the CPU)
fail=0

say() { echo "== $*" | tee -a "$LOG"; }
# run CMD...: print and log the command and its output; remember a failure
# (TMO=S run ...: stop it after S seconds, so that one hang does not eat a short lease)
run() {
    echo "\$ $*" | tee -a "$LOG"
    if [ -n "${TMO:-}" ]; then timeout -k 5 "$TMO" "$@"; else "$@"; fi 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || { echo "!! exit $rc: $*" | tee -a "$LOG"; fail=1; }
    return 0
}
# make cuda; the GPU machine's image has nvcc and gcc but maybe not OpenBLAS: then the CPU
# side (the reference runs here) is built with BLAS=none, and its figures are not the CPU's best
build() {
    [ -x $B ] && [ -x build-cuda/tests/cuda/test_cuda_parity ] && return 0
    command -v make >/dev/null || { say "make is not installed here"; exit 1; }
    local blas=""
    if ! ls /usr/lib/*-linux-gnu/libopenblas.so >/dev/null 2>&1 && ! pkg-config --exists openblas 2>/dev/null; then
        blas="BLAS=none"
        say "no OpenBLAS here: building the CPU side with BLAS=none"
    fi
    run make -j"$(nproc)" cuda $blas
    [ -x $B ] || { say "make cuda failed"; exit 1; }
}
bench() { run $B bench --device cuda --preset gpt2 "$@"; }
# benv VAR=VALUE ARGS...: the same with one setting in the environment
benv() { local e=$1; shift; run env "$e" $B bench --device cuda --preset gpt2 "$@"; }
# llmc B STEPS: llm.c's train_gpt2cu (.bench/llmc, prepared; its random-token data made once)
# at batch B, T=1024: its total average iteration time, and steps 2 and STEPS
LLMC=.bench/llmc
llmc() {
    [ -f $LLMC/data/rand_train.bin ] ||
        (cd $LLMC && mkdir -p data && python3 make_data.py data/rand 2000000 --val-tokens 40000 --seed 1337) >/dev/null 2>&1
    run bash -c "cd $LLMC && ./train_gpt2cu -e d12 -b $1 -t 1024 -x $2 -i data/rand_train.bin -j data/rand_val.bin \
        -v 100000 -m 0 -s 0 -n 0 -h 0 2>&1 | grep -E 'total average iteration time|^step +(2|$2)/|rror'"
}
# llmcd B STEPS: the same with llm.c built with cuDNN's attention (train_gpt2cu_cudnn, carried;
# its libcudnn from the machine's CUDA or from PyTorch's nvidia-cudnn wheel)
llmcd() {
    [ -x $LLMC/train_gpt2cu_cudnn ] || { say "no $LLMC/train_gpt2cu_cudnn: llm.c with cuDNN skipped"; return 0; }
    local lib
    lib=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
    run bash -c "cd $LLMC && LD_LIBRARY_PATH=${lib:+$lib:}\${LD_LIBRARY_PATH:-} ./train_gpt2cu_cudnn -e d12 -b $1 -t 1024 -x $2 \
        -i data/rand_train.bin -j data/rand_val.bin -v 100000 -m 0 -s 0 -n 0 -h 0 2>&1 |
        grep -E 'total average iteration time|^step +(2|$2)/|rror|cudnn'"
}
# unpack: the carried build, data and llm.c come as .carry/*.tar.gz (the lease's upload limit)
unpack() {
    local f
    for f in .carry/*.tar.gz; do [ -f "$f" ] && tar xzf "$f"; done
    return 0
}
# kv_seeds SECONDS: the language-modelling kv grid at T=1024 (docs/experiments.md) with more
# seeds, trained on the GPU: the baseline, the 3/4 rule and its equal-bytes CLA control, one
# sweep per variant at once (a 4-layer model leaves the GPU mostly idle), each stopped after
# SECONDS - 30; then the paired tables over the seeds all three finished, under $OUT
# (GRID_SEEDS, default 12; GRID_STEPS and GRID_TRAIN_OPTS only to rehearse it on the CPU)
kv_seeds() {
    [ -f data/sotu-char/meta.json ] || { say "data/sotu-char missing: the kv grid is skipped"; return 0; }
    local left=$1 v n
    say "kv grid at T=1024 on the GPU: ${left} s left"
    grid() {
        python3 scripts/sweep.py --grid kv --data data/sotu-char --out runs/kv-gpu --seq 1024 --batch 4 --steps ${GRID_STEPS:-400} \
            --lr 2e-3 --warmup 20 --eval-every 100 --eval-batches ${GRID_EVAL_BATCHES:-20} --skiplm $B --train-opts "${GRID_TRAIN_OPTS---device cuda}" \
            --bench-rounds 0 "$@"
    }
    if [ "$left" -gt 60 ]; then
        # one sweep per variant at once (a 4-layer model leaves the GPU mostly idle), each
        # stopped at the deadline; then the paired tables over the seeds all three finished
        for v in baseline sla-nl3-nh3 cla-l3-h1-3; do
            timeout -k 5 $((left - 30)) bash -c "$(declare -f grid); B=$B; GRID_STEPS=${GRID_STEPS:-400}; GRID_EVAL_BATCHES=${GRID_EVAL_BATCHES:-20}; GRID_TRAIN_OPTS='${GRID_TRAIN_OPTS---device cuda}'; grid --only $v --tag gpu-$v --seeds ${GRID_SEEDS:-12}" \
                > runs/lease/grid-$v.log 2>&1 &
        done
        wait
        cat runs/lease/grid-*.log >> "$LOG"
        n=0
        while (for v in baseline sla-nl3-nh3 cla-l3-h1-3; do [ -f runs/kv-gpu/$v/s$n/positions.csv ] || exit 1; done); do
            n=$((n + 1))
        done
        say "kv grid: $n seeds finished by all three variants"
        [ "$n" -gt 1 ] && run grid --only baseline,sla-nl3-nh3,cla-l3-h1-3 --tag gpu --seeds $n
    fi
    if [ -n "${OUT:-}" ]; then
        cp runs/kv-gpu/results-kv-gpu.md runs/kv-gpu/results-kv-gpu.csv runs/kv-gpu/runs-kv-gpu.csv "$OUT/" 2>/dev/null
        (cd runs && find kv-gpu -name log.jsonl -o -name positions.csv | tar czf "$OUT/kv-gpu-logs.tar.gz" -T -) 2>/dev/null
    fi
}
summary() {
    say "summary ($phase)"
    tail -n +"$1" "$LOG" | grep -E '^(FAIL|torch:|fp32: |bf16 - fp32|step +(2|30)/|\$ .*bench|\$ .*train|device:|train:|generate:|prefill:|total average|[0-9]+ passed|sample:|!! |profile:|decoding, per token|  all recorded ops)|GPU memory in use|max rel diff' |
        tee -a "$LOG.summary"
}

start=$(($( { wc -l < "$LOG"; } 2>/dev/null || echo 0) + 1))
case "$phase" in
recall)
    # the recall grid (docs/experiments.md, "Does SLA keep recall?") at widths 128 and 256 on the
    # GPU: first the baseline's learning rate per width (32 pairs, far, 1 seed), then per width
    # at its rate the K/V-saving variants over 16-64 pairs, near and far, seed after seed (16
    # runs at once, 1 thread each), until RECALL_END seconds after the phase began (default
    # 300); every finished run's log and accuracy, and the tables when a sweep finished, come
    # back as $OUT/mqar-gpu.tar.gz (sweep.py reuses them to make the tables of the seeds done)
    say "recall: $(date -u)"
    t0=$(date +%s)
    unpack
    build
    run nvidia-smi --query-gpu=name,memory.total --format=csv
    dev=${RECALL_DEVICE_OPTS---device cuda}
    M=runs/mqar-gpu
    # mqt SECONDS ARGS...: one sweep, stopped after SECONDS
    mqt() {
        local sec=$1; shift
        timeout -k 5 "$sec" python3 scripts/sweep.py --grid mqar --skiplm $B --train-opts "$dev" --eval-opts "$dev" \
            --threads 1 ${RECALL_ARGS:-} "$@"
    }
    until_end() { echo $(( ${RECALL_END:-300} - ($(date +%s) - t0) )); }
    mkdir -p $M
    mqt $(( $(until_end) - 20 )) --out $M/lr --only baseline --pairs 32 --placements far --widths 128,256 \
        --lr ${RECALL_LRS:-3e-4,1e-3,3e-3} --seeds 1 --jobs 6 2>&1 | tee -a "$LOG" | grep -E "^Width|token accuracy"
    for w in 128 256; do
        lr=$(python3 -c 'import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["width"] == sys.argv[2]]
print(max(rows, key=lambda r: float(r["token_accuracy"]))["lr"])' $M/lr/runs-mqar.csv $w 2>/dev/null || echo 1e-3)
        say "width $w: learning rate $lr"
        left=$(( $(until_end) - 15 ))
        [ "$left" -gt 30 ] || break
        mqt $left --out $M/w$w --only ${RECALL_VARIANTS:-baseline,sla-nl3-nh3,cla-l3-h1-3,sla-nl2-nh4,gqa-kv2,cla-odd,multi-far} \
            --pairs ${RECALL_PAIRS:-16,32,48,64} --placements near,far --widths $w --lr $lr --seeds 3 \
            --jobs ${RECALL_JOBS:-8} > runs/recall-w$w.log 2>&1 &
    done
    wait
    cat runs/recall-w*.log >> "$LOG" 2>/dev/null
    grep -h "token accuracy" runs/recall-w*.log | tail -n 4
    n=$(cat $M/w*/*/*/*/*/*/accuracy.json 2>/dev/null | wc -l)
    say "recall: $n runs finished"
    [ -n "${OUT:-}" ] && (cd runs && find mqar-gpu \( -name accuracy.json -o -name log.jsonl -o -name 'runs-mqar*.csv' \
        -o -name 'results-mqar*.md' \) | tar czf "$OUT/mqar-gpu.tar.gz" -T -)
    ;;
kvseeds)
    say "kvseeds: $(date -u)"
    build
    mkdir -p runs/lease
    kv_seeds ${LEASE_END:-300}
    ;;
lease)
    # one lease's worth (about 8 minutes on an H100): the CUDA tests (in parallel: not timed),
    # then skiplm, llm.c (with and without cuDNN) and torch.compile alternated at B=8 and 32,
    # T=1024, skiplm bracketing the others; T=16384 with --profile against torch.compile; then
    # the language-modelling kv grid at T=1024 with more seeds (the baseline, the 3/4 rule and
    # its equal-bytes CLA control; GPU runs, 3 at a time) until LEASE_END (seconds since the
    # phase began, default 480), its tables and run CSVs under $OUT
    say "lease: $(date -u)"
    t0=$(date +%s)
    unpack
    build
    PY=${PY:-$(command -v python3)}
    pk="--peak-tflops ${PEAK_BF16:-989}"
    run nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    [ -f $LLMC/data/rand_train.bin ] ||
        (cd $LLMC && mkdir -p data && python3 make_data.py data/rand 2000000 --val-tokens 40000 --seed 1337) >/dev/null 2>&1 &
    mkdir -p runs/lease
    timeout -k 5 200 ./build-cuda/tests/cuda/test_cuda_parity > runs/lease/parity.log 2>&1 & p1=$!
    timeout -k 5 200 ./build-cuda/tests/cuda/test_cuda_infer > runs/lease/infer.log 2>&1 & p2=$!
    timeout -k 5 200 env SKIPLM="$PWD/$B" PY="$PY" bash tests/cuda/test_cuda_cli.sh > runs/lease/cli.log 2>&1 & p3=$!
    for p in $p1:parity $p2:infer $p3:cli; do
        wait ${p%%:*}; rc=$?
        cat runs/lease/${p#*:}.log >> "$LOG"; tail -n 3 runs/lease/${p#*:}.log
        [ $rc = 0 ] || { echo "!! exit $rc: ${p#*:} test" | tee -a "$LOG"; fail=1; }
    done
    wait
    export TMO=150
    for bb in 8 32; do
        bench --batch $bb --seq 1024 --steps 20 --no-gen --bf16 $pk
        [ -x $LLMC/train_gpt2cu ] && llmc $bb 20
        llmcd $bb 20
        run python3 bench/torch_gpu_bench.py --batch $bb --seq 1024 --compile
        bench --batch $bb --seq 1024 --steps 20 --no-gen --bf16 $pk
    done
    bench --batch 8 --seq 1024 --steps 20 --no-gen --bf16 $pk --sla
    L="--block_size 16384 --batch 1 --seq 16384 --steps 4 --no-gen"
    bench $L --bf16 $pk --profile 1
    bench $L --bf16 $pk --sla
    run python3 bench/torch_gpu_bench.py --batch 1 --seq 16384 --steps 6 --warmup 2 --compile
    bench --batch 8 --seq 1024 --steps 10 --no-gen --bf16 $pk --profile 2
    unset TMO
    kv_seeds $(( ${LEASE_END:-480} - ($(date +%s) - t0) ))
    ;;
quick)
    say "quick: $(date -u)"
    build
    PY=${PY:-$(command -v python3)}
    run nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    TMO=150 run ./build-cuda/tests/cuda/test_cuda_parity
    TMO=120 run ./build-cuda/tests/cuda/test_cuda_infer
    TMO=150 run env SKIPLM="$PWD/$B" PY="$PY" bash tests/cuda/test_cuda_cli.sh
    export TMO=60
    for prec in --bf16 --tf32 ""; do
        pk=""; [ "$prec" = --bf16 ] && pk="--peak-tflops ${PEAK_BF16:-989}"
        bench --batch 8 --seq 1024 --steps 10 --no-gen $prec $pk
        bench --batch 8 --seq 1024 --steps 10 --no-gen $prec $pk --sla
        [ "$prec" = --bf16 ] || continue
        bench --batch 8 --seq 1024 --steps 10 --no-gen $prec $pk --profile 2
        bench --batch 8 --seq 1024 --steps 10 --no-gen $prec $pk --sla
    done
    for prec in --bf16 --tf32; do
        bench --block_size 16384 --batch 1 --seq 16384 --steps 4 --no-gen $prec
        bench --block_size 16384 --batch 1 --seq 16384 --steps 4 --no-gen $prec --sla
    done
    bench --no-train --gen 256 --seq 768 --bf16
    bench --no-train --gen 256 --seq 768 --bf16 --sla
    bench --no-train --gen 256 --seq 768
    # fp32 against bf16 on real text: GPT-2 124M from scratch on data/sotu-gpt2 (skiplm prepare
    # --tokenizer gpt2; carried from a machine with the corpus), the same seed and batches
    if [ -f data/sotu-gpt2/train.bin ]; then
        TMO=${TRAIN_TMO:-120}
        for prec in fp32 bf16; do
            flag=""; [ $prec = bf16 ] && flag=--bf16
            run $B train --data data/sotu-gpt2 --out runs/curve-$prec --overwrite --preset gpt2 --batch 8 --seq 1024 \
                --steps ${CURVE_STEPS:-150} --warmup 20 --lr 6e-4 --eval-every 50 --eval-batches 8 --ckpt-every 0 \
                --print-every 10 --device cuda $flag
            [ -n "${OUT:-}" ] && cp runs/curve-$prec/log.jsonl "$OUT/curve-$prec.jsonl" 2>/dev/null
        done
    fi
    unset TMO
    ;;
final)
    # one short lease's worth, most wanted first (each command capped; what a cut lease
    # leaves undone is at the end): the training figures (bf16, T=1024 and 16384, baseline
    # and SLA, 16 and 32 rows per warp), llm.c and PyTorch on the same GPU, the CLI test,
    # TF32, one launch per SLA source, the parity tests, the loss-curve yardsticks
    say "final: $(date -u)"
    build
    PY=${PY:-$(command -v python3)}
    pk="--peak-tflops ${PEAK_BF16:-989}"
    L="--block_size 16384 --batch 1 --seq 16384 --steps 4 --no-gen"
    export TMO=60
    for sla in "" --sla; do
        bench --batch 8 --seq 1024 --steps 10 --no-gen --bf16 $pk $sla
        benv SKIPLM_CUDA_MMA_ROWS=32 --batch 8 --seq 1024 --steps 10 --no-gen --bf16 $pk $sla
    done
    for sla in "" --sla; do
        bench $L --bf16 $pk $sla --profile 1
        benv SKIPLM_CUDA_MMA_ROWS=32 $L --bf16 $pk $sla
    done
    [ -x $LLMC/train_gpt2cu ] && llmc 8 30
    run python3 bench/torch_gpu_bench.py --batch 8 --seq 1024
    TMO=120 run env SKIPLM="$PWD/$B" PY="$PY" bash tests/cuda/test_cuda_cli.sh
    bench --batch 8 --seq 1024 --steps 10 --no-gen --bf16 $pk --profile 2
    benv SKIPLM_CUDA_MMA_ROWS=32 --batch 8 --seq 1024 --steps 10 --no-gen --bf16 $pk --profile 2
    for sla in "" --sla; do bench $L --tf32 $sla; done
    for sla in "" --sla; do bench --batch 8 --seq 1024 --steps 10 --no-gen --tf32 $sla; done
    benv SKIPLM_CUDA_ATTN_MERGE=0 $L --bf16 --sla
    TMO=120 run ./build-cuda/tests/cuda/test_cuda_parity
    TMO=90 run ./build-cuda/tests/cuda/test_cuda_infer
    if [ -f data/sotu-gpt2/train.bin ]; then
        # the yardsticks of quick's fp32 / bf16 curves: TF32 GEMMs (same seed), fp32 with another seed
        for v in tf32:--tf32:1337 fp32seed::1338; do
            name=${v%%:*} rest=${v#*:}
            run $B train --data data/sotu-gpt2 --out runs/curve-$name --overwrite --preset gpt2 --batch 8 --seq 1024 \
                --steps 150 --warmup 20 --lr 6e-4 --eval-every 50 --eval-batches 8 --ckpt-every 0 --print-every 50 \
                --device cuda --seed ${rest#*:} ${rest%%:*}
            [ -n "${OUT:-}" ] && cp runs/curve-$name/log.jsonl "$OUT/curve-$name.jsonl" 2>/dev/null
        done
    fi
    bench --batch 32 --seq 1024 --steps 10 --no-gen --bf16 $pk
    [ -x $LLMC/train_gpt2cu ] && llmc 32 20
    run python3 bench/torch_gpu_bench.py --batch 8 --seq 1024 --compile
    unset TMO
    ;;
fused)
    # the fused attention backward (dQ added by the dK/dV kernel in key-tile order) against the
    # split one (SKIPLM_CUDA_ATTN_BWD=split), alternated; its tests first; llm.c bracketed by
    # ours; the other tests (~2.5 min); then bf16check's curves and the mpi phase when carried
    say "fused: $(date -u)"
    build
    PY=${PY:-$(command -v python3)}
    pk="--peak-tflops ${PEAK_BF16:-989}"
    L="--block_size 16384 --batch 1 --seq 16384 --steps 4 --no-gen"
    TMO=90 run ./build-cuda/tests/cuda/test_cuda_parity "tc attention"
    export TMO=60
    for rep in 1 2; do
        bench --batch 8 --seq 1024 --steps 20 --no-gen --bf16 $pk
        benv SKIPLM_CUDA_ATTN_BWD=split --batch 8 --seq 1024 --steps 20 --no-gen --bf16 $pk
    done
    bench --batch 8 --seq 1024 --steps 20 --no-gen --bf16 $pk --sla
    bench $L --bf16 $pk --profile 1
    benv SKIPLM_CUDA_ATTN_BWD=split $L --bf16 $pk --profile 1
    bench $L --bf16 $pk --sla
    bench --batch 8 --seq 1024 --steps 10 --no-gen --bf16 $pk --profile 2
    if [ -x $LLMC/train_gpt2cu ]; then
        for bb in 8 32; do          # each bracketed by ours
            bench --batch $bb --seq 1024 --steps 20 --no-gen --bf16 $pk
            llmc $bb 20
            bench --batch $bb --seq 1024 --steps 20 --no-gen --bf16 $pk
        done
    fi
    TMO=120 run ./build-cuda/tests/cuda/test_cuda_parity
    TMO=90 run ./build-cuda/tests/cuda/test_cuda_infer
    TMO=150 run env SKIPLM="$PWD/$B" PY="$PY" bash tests/cuda/test_cuda_cli.sh
    unset TMO
    if [ -f data/sotu-gpt2/train.bin ]; then
        TMO=300 run python3 bench/bf16_curve.py --skiplm $B --train data/sotu-gpt2/train.bin --steps ${CURVE_STEPS:-150} \
            ${OUT:+--out $OUT/bf16_curve.json}
    fi
    [ -x build-cuda-mpi/skiplm ] && TMO=200 bash "$0" mpi     # (carried: make cuda MPI=1 NCCL=0)
    ;;
bf16check)
    # bf16 against fp32 on the same batches and initial weights, skiplm and PyTorch autocast side
    # by side (bench/bf16_curve.py; data/sotu-gpt2 carried; ~2 min): is bf16's offset the recipe's?
    say "bf16check: $(date -u)"
    build
    TMO=400 run python3 bench/bf16_curve.py --skiplm $B --train data/sotu-gpt2/train.bin --steps ${CURVE_STEPS:-150} \
        ${OUT:+--out $OUT/bf16_curve.json}
    ;;
check)
    say "check: $(date -u)"
    run nvidia-smi
    run nvcc --version
    build
    run ./build-cuda/tests/cuda/test_cuda_parity
    run ./build-cuda/tests/cuda/test_cuda_infer
    run env SKIPLM="$PWD/$B" bash tests/cuda/test_cuda_cli.sh
    ;;
train)
    say "train: $(date -u)"
    build
    # baseline and SLA alternate, twice each, so that drift hits both alike
    # (--profile: a per-op table from extra steps after the timed ones, on the last round)
    for prec in "" --tf32 --bf16; do
        for rep in 1 2; do
            prof=""; [ $rep = 2 ] && prof="--profile 3"
            bench --batch 8 --seq 1024 --steps 10 --no-gen $prec $prof
            bench --batch 8 --seq 1024 --steps 10 --no-gen $prec --sla $prof
        done
    done
    for prec in --tf32 --bf16; do
        bench --block_size 16384 --batch 1 --seq 16384 --steps 5 --no-gen $prec --profile 2
        bench --block_size 16384 --batch 1 --seq 16384 --steps 5 --no-gen $prec --sla --profile 2
    done
    # what the tensor-core attention buys at the paper's length: the same bf16 step on the fp32
    # kernels, and on the older wmma kernels (the per-op table shows the attention's share)
    benv SKIPLM_CUDA_TC_ATTN=0 --block_size 16384 --batch 1 --seq 16384 \
        --steps 5 --no-gen --bf16
    benv SKIPLM_CUDA_TC_ATTN=wmma --block_size 16384 --batch 1 --seq 16384 \
        --steps 5 --no-gen --bf16 --profile 2
    benv SKIPLM_CUDA_TC_ATTN=wmma --batch 8 --seq 1024 --steps 10 --no-gen --bf16
    # the mma.sync attention with blocks of 8 warps (128-row tiles) instead of 4 (64 rows)
    benv SKIPLM_CUDA_MMA_WARPS=8 --block_size 16384 --batch 1 --seq 16384 \
        --steps 5 --no-gen --bf16 --profile 2
    benv SKIPLM_CUDA_MMA_WARPS=8 --batch 8 --seq 1024 --steps 10 --no-gen --bf16
    # one buffer per walked attention tile (the copy of the next tile no longer under this one's math)
    benv SKIPLM_CUDA_ATTN_STAGES=1 --block_size 16384 --batch 1 --seq 16384 \
        --steps 5 --no-gen --bf16 --profile 2
    ;;
gen)
    say "gen: $(date -u)"
    build
    for sla in "" --sla; do
        bench --no-train --gen 256 --seq 768 $sla --profile 1          # + a per-op table of decoding
        bench --no-train --gen 256 --seq 768 --bf16 $sla
        bench --block_size 16384 --no-train --gen 256 --seq 16000 $sla
        bench --block_size 16384 --no-train --gen 256 --seq 16000 --bf16 $sla   # a bf16 KV cache
    done
    # the bf16 model with an fp32 KV cache: what the bf16 cache buys at a long context
    benv SKIPLM_CUDA_KV16=0 --block_size 16384 --no-train --gen 256 --seq 16000 --bf16
    # Llama with GQA (12 query heads on 3 KV heads: a decoding block serves 4 query heads), and
    # with one query head per block, at a long and at a short context
    for seq in 16000 512; do
        bench --family llama --bias 0 --n_kv_head 3 --block_size 16384 --no-train --gen 256 --seq $seq --bf16
        benv SKIPLM_CUDA_DECODE_HEADS=1 --family llama --bias 0 --n_kv_head 3 \
            --block_size 16384 --no-train --gen 256 --seq $seq --bf16
    done
    # decoding steps as CUDA graphs (the default) against plain launches
    benv SKIPLM_CUDA_GRAPHS=0 --no-train --gen 256 --seq 768
    benv SKIPLM_CUDA_GRAPHS=0 --no-train --gen 256 --seq 768 --bf16
    run $B bench --preset gpt2 --no-train --gen 64           # the CPU's figure, for the ratio
    # a short real training run on the default corpus (data/sotu-char: the device has no
    # network, so carry it from a machine where scripts/setup.sh prepared it), then GPU vs
    # CPU sampled text from its checkpoint
    if [ -f data/sotu-char/train.bin ]; then
        run $B train --data data/sotu-char --out runs/gpu-check --overwrite --preset small --sla --steps 200 \
            --eval-every 100 --device cuda
        ck=runs/gpu-check/ckpt.safetensors
        if [ -f $ck ]; then
            $B sample $ck --prompt "The" --tokens 200 --seed 7 --top-k 40 --quiet > runs/gpu-check/cpu.txt 2>>"$LOG"
            $B sample $ck --prompt "The" --tokens 200 --seed 7 --top-k 40 --quiet --device cuda > runs/gpu-check/gpu.txt 2>>"$LOG"
            if cmp -s runs/gpu-check/cpu.txt runs/gpu-check/gpu.txt; then say "sample: GPU text identical to the CPU's"
            else say "sample: GPU text DIFFERS from the CPU's"; fail=1; fi
        fi
    else
        say "data/sotu-char missing: the training run and the sample comparison are skipped"
    fi
    ;;
llmc)
    say "llmc: $(date -u)"
    [ -f $LLMC/train_gpt2.cu ] && [ -f $LLMC/make_data.py ] || { say "no llm.c copy in $LLMC (docs/cuda.md)"; exit 1; }
    run bash -c "cd $LLMC && nvcc -O3 -t=0 --use_fast_math -std=c++17 -DENABLE_BF16 -arch=sm_90 \
        train_gpt2.cu -lcublas -lcublasLt -o train_gpt2cu"
    for rep in 1 2; do
        llmc 8 30
        bench --batch 8 --seq 1024 --steps 10 --no-gen --bf16       # ours, alternated with llm.c's
    done
    ;;
mpi)
    say "mpi: $(date -u)"
    command -v mpirun >/dev/null || { say "no mpirun here: the 2-rank check is skipped"; exit 0; }
    BM=${B_MPI:-build-cuda-mpi/skiplm}
    if [ ! -x "$BM" ]; then
        blas=""
        ls /usr/lib/*-linux-gnu/libopenblas.so >/dev/null 2>&1 || pkg-config --exists openblas 2>/dev/null || blas="BLAS=none"
        run make -j"$(nproc)" cuda MPI=1 $blas
    fi
    [ -x "$BM" ] || { say "make cuda MPI=1 failed"; exit 1; }
    d=runs/gpu-mpi
    mkdir -p $d
    PY=${PY:-$(command -v python3)}
    run $PY - $d <<'PYEOF'
import sys, numpy as np
sys.path.insert(0, "tests/ref")
from shards import write
rng = np.random.default_rng(0)
t = np.where(rng.random(200000) < 0.2, rng.integers(0, 256, 200000), (np.arange(200000) * 7) % 251)
write(sys.argv[1] + "/train.bin", t[:180000]); write(sys.argv[1] + "/val.bin", t[180000:])
PYEOF
    # one GPU: NCCL refuses 2 ranks on it, so the mean goes through host memory (SKIPLM_NCCL=0)
    M="--train $d/train.bin --val $d/val.bin --vocab_size 256 --n_layer 4 --n_head 8 --n_embd 256 --block_size 256
       --bias 0 --dropout 0 --sla --seq 256 --batch 8 --steps 30 --warmup 5 --eval-every 10 --ckpt-every 10
       --print-every 10 --device cuda --overwrite ${MPI_ARGS:-}"     # MPI_ARGS: overrides, for a smoke test
    mp="mpirun --allow-run-as-root --oversubscribe -np 2 -x SKIPLM_NCCL=0"
    run $mp $BM train $M --out $d/rep
    run $mp $BM train $M --out $d/zero --zero 1
    run $PY tests/ref/compare_runs.py $d/zero $d/rep 1e-6
    ;;
grid)
    say "grid: $(date -u)"
    build
    [ -f data/sotu-char/meta.json ] || { say "data/sotu-char is missing: carry it (skiplm prepare --out data/sotu-char)"; exit 1; }
    T=${GRID_T:-1024}
    case "$T" in 1024) GB=4 ;; 256) GB=16 ;; *) say "GRID_T must be 1024 or 256"; exit 2 ;; esac
    only=${GRID_ONLY:+--only $GRID_ONLY --tag gpu}
    # the CPU budget of docs/experiments.md: 400 steps of 4096 characters; the speed columns
    # from `skiplm bench --device cuda`, the loss by position from the CPU eval
    run python3 scripts/sweep.py --grid kv --data data/sotu-char --out "${OUT:-runs}/kv-gpu/T$T" --seq $T --batch $GB \
        --steps 400 --lr 2e-3 --warmup 20 --eval-every 100 --eval-batches 20 --seeds 3 --skiplm $B \
        --train-opts "--device cuda" --bench-opts "--device cuda" --bench-rounds 3 $only
    ;;
*)
    echo "usage: bash scripts/gpu_session.sh lease|kvseeds|quick|final|bf16check|check|train|gen|llmc|grid|mpi   (log: \$LOG, default \$OUT/gpu_session.log)" >&2
    exit 2
    ;;
esac
summary "$start"
exit $fail
