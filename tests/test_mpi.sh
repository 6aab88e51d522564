#!/usr/bin/env bash
# Data-parallel training over MPI (docs/distributed.md). Builds `make MPI=1` (build-mpi/)
# and compares 2 ranks on this machine with one process of the same global batch.
# Prints PASS/FAIL lines (counted by tests/run_tests.sh).
#
#  1. 2 ranks x batch 4 == 1 process x batch 8: loss, grad norm and val loss of every
#     step and the final weights within 1e-5 relative; the same with --zero 1 (ZeRO-1),
#     and 2 ranks x batch 2 x grad-accum 2. ZeRO-1 and plain data parallelism give the
#     same bits. The checkpoint of a ZeRO run has whole m and v (the single-process format).
#  2. An error on one rank (injected on rank 1 at step 21) stops both ranks, with the
#     message, and leaves the step-20 checkpoint; a failed save on rank 0 too;
#     a bad option under mpirun stops both.
#  3. Resume of that 2-rank checkpoint on 1 rank, and of a 1-rank one on 2 ranks (ZeRO):
#     the final state equals the uninterrupted single-process run; a resume that changes
#     the global batch is refused naming it.
#
# Without MPI installed it prints a SKIP line and exits 0, except under CI=true (then the
# CI must have installed it: scripts/install_deps.sh does).
set -u
PY=${PY:-/usr/bin/python3}
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }

if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then
        echo "FAIL MPI (mpicc, mpirun) is not installed but CI=true: scripts/install_deps.sh should have installed it"
        exit 1
    fi
    echo "SKIP test_mpi.sh: MPI is not installed (apt-get install libopenmpi-dev openmpi-bin); nothing was tested"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # CI runs as root
export OMPI_MCA_rmaps_base_oversubscribe=1                          # 2 ranks on a small box
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN="mpirun -np 2 --oversubscribe"
# the suite's build flavour (run_tests.sh sets BUILD): build-san -> build-mpi-san
if [ "${BUILD:-build}" = build-san ]; then SANV=1 MB=build-mpi-san; else SANV=0 MB=build-mpi; fi
# Open MPI's own allocations are reported by LeakSanitizer (from dlopen'ed components that
# no suppression can name); the rest of ASan and UBSan stay on
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
t0=$SECONDS
blog=$(mktemp)
if ! make --no-print-directory -j2 MPI=1 SAN=$SANV $MB/skiplm >"$blog" 2>&1; then
    cat "$blog"; rm -f "$blog"
    fail "make MPI=1 builds $MB/skiplm"; exit 1
fi
rm -f "$blog"
pass "make MPI=1 SAN=$SANV builds $MB/skiplm ($((SECONDS - t0)) s)"
SK=$PWD/$MB/skiplm
tmp=$(mktemp -d)
trap "rm -rf $tmp" EXIT

"$PY" tests/ref/shards.py "$tmp" 50000 10000
# no dropout: masks are drawn per rank (equal in law, not in bits); no biases: the key
# bias has a zero true gradient that Adam turns float noise into updates of (docs/training.md)
A="--train $tmp/train.bin --val $tmp/val.bin --vocab_size 64 --n_layer 2 --n_head 4 --n_embd 48 --block_size 32
   --bias 0 --dropout 0 --n_skip_layer 1 --n_skip_head 2 --seq 32 --lr 3e-3 --warmup 5 --steps 40 --eval-every 10
   --eval-batches 4 --ckpt-every 20"

# compare RUN_A RUN_B TOL: log (loss, grad_norm, val_loss per step) and every tensor of the
# final checkpoints within TOL relative (per step / per tensor: max|a-b| <= TOL * max|b|)
compare() { "$PY" tests/ref/compare_runs.py "$@"; }   # RUN_A RUN_B TOL [TENSOR_TOL]: log and checkpoint
same_tensors() {   # bit-identical tensors (metadata may differ)
    "$PY" - "$1" "$2" <<'EOF'
import sys
sys.path.insert(0, "tests/ref")
import st, torch
ta, _ = st.load_file(sys.argv[1]); tb, _ = st.load_file(sys.argv[2])
sys.exit(0 if set(ta) == set(tb) and all(torch.equal(ta[k], tb[k]) for k in ta) else 1)
EOF
}

# --- 1. equality with one process of the same global batch
$SK train $A --batch 8 --out "$tmp/r1" 2>"$tmp/r1.err" || fail "reference run (1 process, batch 8): $(tail -1 "$tmp/r1.err")"
$MPIRUN $SK train $A --batch 4 --out "$tmp/r2" >"$tmp/r2.err" 2>&1 || fail "2 ranks: $(tail -3 "$tmp/r2.err")"
check "2 ranks x batch 4 run (log and checkpoint from rank 0 only: $(grep -c '"step"' "$tmp/r2/log.jsonl" 2>/dev/null) log lines)" \
    test "$(grep -c '"step"' "$tmp/r2/log.jsonl" 2>/dev/null)" = 40
check "  progress printed once (by rank 0): $(grep -c '^step 40/40' "$tmp/r2.err") final progress line" test "$(grep -c '^step 40/40' "$tmp/r2.err")" = 1
check "2 ranks x batch 4 == 1 process x batch 8 within 1e-5 (loss curve, final weights, m, v)" compare "$tmp/r2" "$tmp/r1" 1e-5
$MPIRUN $SK train $A --batch 4 --zero 1 --out "$tmp/r2z" >"$tmp/r2z.err" 2>&1 || fail "2 ranks ZeRO-1: $(tail -3 "$tmp/r2z.err")"
grep -q "ZeRO-1" "$tmp/r2z.err" || fail "  ZeRO-1 not announced"
check "2 ranks x batch 4 --zero 1 == 1 process x batch 8 within 1e-5" compare "$tmp/r2z" "$tmp/r1" 1e-5
check "  ZeRO-1 gives the same bits as plain data parallelism (weights, whole m and v)" same_tensors "$tmp/r2z/ckpt.safetensors" "$tmp/r2/ckpt.safetensors"
$MPIRUN $SK train $A --batch 2 --grad-accum 2 --eval-batches 8 --out "$tmp/r2a" >"$tmp/r2a.err" 2>&1 || fail "2 ranks accum: $(tail -3 "$tmp/r2a.err")"
check "2 ranks x batch 2 x grad-accum 2 (8 val batches of 4) == 1 process x batch 8 within 1e-5" compare "$tmp/r2a" "$tmp/r1" 1e-5
# a check that can fail: another global batch must NOT match
$MPIRUN $SK train $A --batch 2 --out "$tmp/r2b" >/dev/null 2>&1
if compare "$tmp/r2b" "$tmp/r1" 1e-5 >/dev/null; then fail "control: a global batch of 4 matched batch 8 (the comparison is blind)"
else pass "control: 2 ranks x batch 2 (global 4) differs from batch 8 (the comparison can fail)"; fi
# supervised fine-tuning: loss masks beside the shards (prepare --chat's layout); the loss is
# the mean over the masked-in targets of the whole global batch, on any split over ranks and
# micro-steps
mkdir -p "$tmp/sft"
"$PY" - "$tmp" <<'EOF'
import sys, numpy as np
sys.path.insert(0, "tests/ref")
from shards import periodic, write
d = sys.argv[1]
rng = np.random.default_rng(4)
for name, n in (("train", 50000), ("val", 10000)):
    write(f"{d}/sft/{name}.bin", periodic(n, seed=len(name)))
    m = (rng.random(n) < 0.35).astype(np.uint8)
    h = np.zeros(256, dtype="<i4"); h[0], h[1], h[2] = 20240520, 100, n
    open(f"{d}/sft/{name}.mask.bin", "wb").write(h.tobytes() + m.tobytes())
EOF
S="${A//$tmp\/train.bin/$tmp/sft/train.bin}"; S="${S//$tmp\/val.bin/$tmp/sft/val.bin}"
$SK train $S --batch 8 --out "$tmp/s1" 2>"$tmp/s1.err" || fail "masked reference run: $(tail -1 "$tmp/s1.err")"
$MPIRUN $SK train $S --batch 2 --grad-accum 2 --eval-batches 8 --out "$tmp/s2" >"$tmp/s2.err" 2>&1 || fail "2 ranks masked: $(tail -3 "$tmp/s2.err")"
check "loss masks: 2 ranks x batch 2 x grad-accum 2 == 1 process x batch 8: losses, norms, val within 1e-5, weights 1e-4" \
    compare "$tmp/s2" "$tmp/s1" 1e-5 1e-4   # the micro-steps' weights n_k*W/N are not powers of 2
if compare "$tmp/s1" "$tmp/r1" 1e-5 >/dev/null; then fail "control: the masked run matched the unmasked one (the mask is not read)"
else pass "control: the masked run differs from the unmasked one"; fi
echo "info: section 1 took $((SECONDS - t0)) s"; t0=$SECONDS

# --- 2. an error on one rank stops all ranks, with the message
SKIPLM_TEST_FAIL_AT=1:21 timeout 60 $MPIRUN -x SKIPLM_TEST_FAIL_AT $SK train $A --batch 4 --out "$tmp/f2" >"$tmp/f2.err" 2>&1; rc=$?
check "injected error on rank 1 at step 21: both ranks stop, mpirun exits non-zero (rc $rc, no hang)" test $rc != 0 -a $rc != 124
check "  with rank 1's message: $(grep -m1 'injected' "$tmp/f2.err")" grep -q "rank 1: step 21: injected failure" "$tmp/f2.err"
check "  the step-20 checkpoint is kept" grep -q '"train.step":"20"' "$tmp/f2/ckpt.safetensors"
# a save that fails on rank 0 only (the final name is a directory: the rename fails; a
# ulimit -f would also break MPI's shared-memory files)
mkdir -p "$tmp/f3/ckpt.safetensors"
timeout 60 $MPIRUN $SK train $A --batch 4 --overwrite --out "$tmp/f3" >"$tmp/f3.err" 2>&1; rc=$?
check "failed save on rank 0: both ranks stop (rc $rc)" test $rc != 0 -a $rc != 124
check "  with the message: $(grep -m1 'not written' "$tmp/f3.err")" grep -q "rank 0: checkpoint not written" "$tmp/f3.err"
check "  at the first checkpoint (step 20): $(grep -m1 'stopped at' "$tmp/f3.err")" grep -q "stopped at step 20" "$tmp/f3.err"
timeout 60 $MPIRUN $SK train $A --batch 4 --zero 2 --out "$tmp/f4" >"$tmp/f4.err" 2>&1; rc=$?
check "a bad option under mpirun stops both ranks (rc $rc): $(grep -m1 'zero' "$tmp/f4.err")" \
    test $rc != 0 -a $rc != 124 -a ! -e "$tmp/f4"
echo "info: section 2 took $((SECONDS - t0)) s"; t0=$SECONDS

# --- 3. resume across rank counts
cp -r "$tmp/f2" "$tmp/c21"
$SK train --resume "$tmp/c21" 2>"$tmp/c21.err"; rc=$?
check "2-rank checkpoint (step 20) resumed on 1 rank (rc $rc; batch 8 = 4 x 2 taken from it): $(grep -m1 resumed "$tmp/c21.err")" \
    grep -q "resumed .* at step 20" "$tmp/c21.err"
check "  ends equal to the uninterrupted single-process run within 1e-5" compare "$tmp/c21" "$tmp/r1" 1e-5
SKIPLM_TEST_FAIL_AT=0:21 $SK train $A --batch 8 --out "$tmp/c12" 2>/dev/null
check "1-process run stopped after its step-20 checkpoint" grep -q '"train.step":"20"' "$tmp/c12/ckpt.safetensors"
$MPIRUN $SK train --resume "$tmp/c12" --zero 1 >"$tmp/c12.err" 2>&1; rc=$?
check "1-process checkpoint resumed on 2 ranks with ZeRO-1 (rc $rc): $(grep -m1 'ranks,' "$tmp/c12.err")" \
    grep -q "resumed .* at step 20" "$tmp/c12.err"
check "  ends equal to the uninterrupted single-process run within 1e-5" compare "$tmp/c12" "$tmp/r1" 1e-5
cp -r "$tmp/f2" "$tmp/c22"
$MPIRUN $SK train --resume "$tmp/c22" --batch 8 >"$tmp/c22.err" 2>&1; rc=$?
check "resume that changes the global batch refused: $(grep -m1 'global batch' "$tmp/c22.err")" \
    grep -q "global batch (batch x grad-accum x ranks) is 8 = 4 x 1 x 2 in the checkpoint but 16 = 8 x 1 x 2" "$tmp/c22.err"
check "  checkpoint untouched" cmp -s "$tmp/f2/ckpt.safetensors" "$tmp/c22/ckpt.safetensors"
echo "info: section 3 took $((SECONDS - t0)) s"

echo "test_mpi.sh: $([ $fails = 0 ] && echo ok || echo FAILED)"
[ $fails = 0 ]
