#!/usr/bin/env bash
# Multi-GPU data parallelism of the CUDA backend, on the CPU emulator (make cuda-emu-mpi-test;
# no GPU needed): 2 MPI ranks of build-cuda-emu-mpi/skiplm train --device cuda, each rank
# driving its own emulated GPU, against 2 CPU ranks of build-mpi/skiplm on the same data.
#
#  1. gradients averaged by NCCL (the emulator's NCCL over MPI: unique id broadcast, rank and
#     size checked): loss, grad norm and val loss of every step and every tensor of the final
#     checkpoint (weights, AdamW m and v) within 1e-4 relative of the CPU ranks;
#  2. the same through host memory (SKIPLM_NCCL=0: pinned copy + the CPU's MPI mean);
#  3. bf16 mixed precision on 2 ranks tracks the fp32 CPU run's losses (5e-3);
#  4. an error on one GPU rank stops both with its message; the resume on 2 GPU ranks from
#     the step-4 checkpoint ends where the uninterrupted run does (1e-6);
#  5. ZeRO-1 (--zero 1: m and v sharded over the GPUs, grouped ncclReduce / ncclBroadcast):
#     the same run as the 2 CPU ranks (1e-4) and as the replicated GPU run; through host
#     memory too; the GPU memory in use drops by about half of m and v; a ZeRO run stopped
#     at step 5 resumes without ZeRO, and a replicated one resumes with it (1e-6);
#  6. NCCL with 2 ranks on 1 GPU is refused with a message; control: 2 CPU ranks at another
#     global batch do NOT match (the comparison can fail).
# Prints PASS/FAIL lines and "N passed, N failed".
set -u
PY=${PY:-/usr/bin/python3}
passes=0 fails=0
pass() { echo "PASS $*"; passes=$((passes + 1)); }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export SK_EMU_GPUS=2                  # the emulator shows 2 GPUs: one per rank
MPIRUN="mpirun -np 2 --oversubscribe -x SK_EMU_GPUS"
CPU=$PWD/build-mpi/skiplm GPU=$PWD/build-cuda-emu-mpi/skiplm
for b in "$CPU" "$GPU"; do [ -x "$b" ] || { echo "FAIL $b is not built (make cuda-emu-mpi-test builds it)"; exit 1; }; done
tmp=$(mktemp -d)
trap "rm -rf $tmp" EXIT

"$PY" tests/ref/shards.py "$tmp" 16000 4000
# no dropout (masks are per rank), no biases (see tests/test_mpi.sh)
A="--train $tmp/train.bin --val $tmp/val.bin --vocab_size 64 --n_layer 2 --n_head 4 --n_embd 48 --block_size 32
   --bias 0 --dropout 0 --n_skip_layer 1 --n_skip_head 2 --seq 32 --lr 3e-3 --warmup 2 --steps 8 --eval-every 4
   --eval-batches 2 --ckpt-every 4 --batch 4 --print-every 4"

compare() { "$PY" tests/ref/compare_runs.py "$@"; }   # RUN_A RUN_B TOL [TENSOR_TOL]: log and checkpoint
run() {   # NAME BINARY ARGS...: 2 ranks, output in $tmp/NAME
    local name=$1; shift
    $MPIRUN "$@" --out "$tmp/$name" >"$tmp/$name.err" 2>&1 || { fail "$name: $(tail -3 "$tmp/$name.err")"; return 1; }
}
t0=$SECONDS
run cpu2 $CPU train $A
run nccl $GPU train $A --device cuda
check "NCCL announced: $(grep -m1 -o 'one GPU per rank.*' "$tmp/nccl.err")" grep -q "averaged by NCCL" "$tmp/nccl.err"
check "2 GPU ranks (NCCL) == 2 CPU ranks within 1e-4 (loss curve, val loss, weights, m, v)" compare "$tmp/nccl" "$tmp/cpu2" 1e-4
SKIPLM_NCCL=0 $MPIRUN -x SKIPLM_NCCL $GPU train $A --device cuda --out "$tmp/host" >"$tmp/host.err" 2>&1 || fail "host: $(tail -3 "$tmp/host.err")"
check "host-memory mean announced: $(grep -m1 -o 'one GPU per rank.*' "$tmp/host.err")" grep -q "through host memory" "$tmp/host.err"
check "2 GPU ranks (host-memory mean) == 2 CPU ranks within 1e-4" compare "$tmp/host" "$tmp/cpu2" 1e-4
run bf16 $GPU train $A --device cuda --bf16
# (the weights are not compared: Adam turns bf16's gradient noise into full-size updates of
# the smallest gradients)
check "2 GPU ranks in bf16 track the fp32 CPU ranks' loss curve within 5e-3" compare "$tmp/bf16" "$tmp/cpu2" 5e-3 inf
# 4. an error on rank 1 at step 5 stops both GPU ranks; the resume from the step-4 checkpoint
SKIPLM_TEST_FAIL_AT=1:5 timeout 300 $MPIRUN -x SKIPLM_TEST_FAIL_AT $GPU train $A --device cuda --out "$tmp/half" \
    >"$tmp/half.err" 2>&1; rc=$?
check "injected error on GPU rank 1 at step 5 stops both ranks (rc $rc): $(grep -m1 -o 'rank 1: step 5.*' "$tmp/half.err")" \
    grep -q "rank 1: step 5: injected failure" "$tmp/half.err"
$MPIRUN $GPU train --resume "$tmp/half" --device cuda >"$tmp/resume.err" 2>&1 || fail "resume: $(tail -3 "$tmp/resume.err")"
check "resumed on 2 GPU ranks at step 4 == the uninterrupted run within 1e-6" compare "$tmp/half" "$tmp/nccl" 1e-6
# 5. ZeRO-1 on the GPUs
gpu_mib() { grep -o 'GPU memory in use [0-9.]*' "$1" | awk '{print $5}'; }
run zero $GPU train $A --device cuda --zero 1
check "ZeRO announced: $(grep -m1 -o 'ZeRO-1.*' "$tmp/zero.err")" grep -q "ZeRO-1: AdamW state sharded" "$tmp/zero.err"
check "2 GPU ranks with ZeRO-1 (NCCL) == 2 CPU ranks within 1e-4 (loss curve, val loss, weights, m, v)" compare "$tmp/zero" "$tmp/cpu2" 1e-4
check "2 GPU ranks with ZeRO-1 == 2 GPU ranks replicated within 1e-6" compare "$tmp/zero" "$tmp/nccl" 1e-6
SKIPLM_NCCL=0 $MPIRUN -x SKIPLM_NCCL $GPU train $A --device cuda --zero 1 --out "$tmp/zhost" >"$tmp/zhost.err" 2>&1 || fail "zhost: $(tail -3 "$tmp/zhost.err")"
check "2 GPU ranks with ZeRO-1 through host memory == 2 CPU ranks within 1e-4" compare "$tmp/zhost" "$tmp/cpu2" 1e-4
# m and v are 8 bytes per parameter; the larger shard holds a little over half of them
P=$(grep -m1 -o '[0-9.]*M parameters' "$tmp/zero.err" | sed 's/M parameters//')
mz=$(gpu_mib "$tmp/zero.err") mn=$(gpu_mib "$tmp/nccl.err")
check "ZeRO-1 frees about half of m and v on each GPU: $mn -> $mz MiB for ${P}M parameters" \
    awk -v z="$mz" -v n="$mn" -v p="$P" 'BEGIN { s = (n - z) / (8 * p * 1e6 / 1048576); exit !(z > 0 && s > 0.35 && s < 0.65) }'
SKIPLM_TEST_FAIL_AT=1:5 timeout 300 $MPIRUN -x SKIPLM_TEST_FAIL_AT $GPU train $A --device cuda --zero 1 --out "$tmp/zhalf" \
    >"$tmp/zhalf.err" 2>&1
$MPIRUN $GPU train --resume "$tmp/zhalf" --device cuda >"$tmp/zres.err" 2>&1 || fail "zres: $(tail -3 "$tmp/zres.err")"
check "ZeRO-1 run stopped at step 5, resumed replicated == the uninterrupted run within 1e-6" compare "$tmp/zhalf" "$tmp/zero" 1e-6
SKIPLM_TEST_FAIL_AT=1:5 timeout 300 $MPIRUN -x SKIPLM_TEST_FAIL_AT $GPU train $A --device cuda --out "$tmp/rhalf" \
    >"$tmp/rhalf.err" 2>&1
$MPIRUN $GPU train --resume "$tmp/rhalf" --device cuda --zero 1 >"$tmp/rres.err" 2>&1 || fail "rres: $(tail -3 "$tmp/rres.err")"
check "replicated run stopped at step 5, resumed with ZeRO-1 == the uninterrupted run within 1e-6" compare "$tmp/rhalf" "$tmp/nccl" 1e-6
# 6. controls
SK_EMU_GPUS=1 $MPIRUN $GPU train $A --device cuda --out "$tmp/one" >"$tmp/one.err" 2>&1; rc=$?
check "NCCL with 2 ranks on 1 GPU refused (rc $rc): $(grep -m1 -o 'NCCL: 2 ranks.*' "$tmp/one.err")" grep -q "2 ranks on this node but 1 GPUs visible" "$tmp/one.err"
run cpu2b $CPU train $A --batch 2
if compare "$tmp/cpu2b" "$tmp/cpu2" 1e-4 >/dev/null; then fail "control: global batch 4 matched global batch 8 (blind comparison)"
else pass "control: 2 CPU ranks x batch 2 differ from x batch 4 (the comparison can fail)"; fi
echo "info: took $((SECONDS - t0)) s"
echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
