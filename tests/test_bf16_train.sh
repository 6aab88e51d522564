#!/usr/bin/env bash
# train --bf16 on the CPU (bf16 mixed precision through oneDNN; docs/training.md). Prints
# PASS/FAIL lines (counted by tests/run_tests.sh).
#
#  1. A bf16 run stopped after a checkpoint (an injected failure) and resumed from the run
#     directory alone keeps bf16 (the checkpoint records it) and ends bit-identical to the
#     uninterrupted bf16 run (cmp of the checkpoint: weights, AdamW m and v, metadata), its log
#     the same but the timings; also with activation recomputation. --fp32 goes on in fp32.
#  2. Checkpoints stay fp32 (every tensor F32), and fp32 eval reads them. bf16 changes
#     the numbers (another final checkpoint than fp32's) but not the learning: the validation
#     loss within 0.05 of fp32's.
#  3. Gradient accumulation: batch 8 == batch 4 x grad-accum 2 in bf16 (the first step's loss
#     to 1e-6, every step's to 2e-2); loss masks (SFT shards): bf16 follows fp32, and a masked
#     run differs from an unmasked one; Llama with GQA and a routing table trains and resumes
#     bit-identical.
#  4. A CPU without native bf16 (DNNL_MAX_CPU_ISA=AVX2 here: oneDNN 2.6 has no bf16 matmul
#     below AVX-512, so the widening fallback runs; and SKIPLM_NO_AVX512BF16=1, so the
#     attention's bf16 products run as fp32 fused multiply-adds): train says so once, and the
#     run follows the native one (each step's loss within 1e-2).
#  5. bench --bf16 trains and reports the MFU against the bf16 GEMM rate and each phase's share of
#     the step (the attention's among them); --gemm-rate prints both
#     rates; eval --bf16 gives the loss of eval within 1e-2; the
#     memory check counts the weights' bf16 copy.
#  6. With MPI (make MPI=1): 2 ranks x batch 4 == 1 process x batch 8 in bf16 (each step's loss
#     within 1e-3), and ZeRO-1 gives the bits of plain data parallelism.
#
# Built without oneDNN it checks that train --bf16 refuses, naming libdnnl-dev, and prints SKIP
# for the rest; under CI=true that is a failure (scripts/install_deps.sh installs libdnnl-dev).
set -u
SK=${SKIPLM:-build/skiplm}
BUILD=${BUILD:-build}
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$PY" tests/ref/shards.py "$tmp" 50000 10000
D="--train $tmp/train.bin --val $tmp/val.bin --vocab_size 64"
M="--n_layer 2 --n_head 4 --n_embd 48 --block_size 32 --n_skip_layer 1 --n_skip_head 2"
H="--batch 4 --seq 32 --grad-accum 2 --lr 3e-3 --warmup 10 --eval-every 20 --eval-batches 4"
COMMON="$D $M $H"

info=$("$BUILD/tests/tool_bf16" info)
echo "info: $info"
if [ "${info#dnnl 1}" = "$info" ]; then
    $SK train $COMMON --steps 2 --bf16 --out "$tmp/no" 2>"$tmp/no.err"; rc=$?
    check "built without oneDNN: train --bf16 refuses (rc $rc), naming libdnnl-dev: $(tail -1 "$tmp/no.err")" \
        grep -q "libdnnl-dev" "$tmp/no.err"
    check "  nothing written" test ! -e "$tmp/no"
    if [ "${CI:-}" = true ]; then
        fail "oneDNN (libdnnl-dev) is not built in but CI=true: scripts/install_deps.sh should have installed it"
    else
        echo "SKIP test_bf16_train.sh: this skiplm was built without oneDNN (install libdnnl-dev: bash scripts/install_deps.sh, then make)"
    fi
    [ $fails = 0 ]; exit
fi
native=0; [ "${info#*native 1}" != "$info" ] && native=1
loss_at() { "$PY" -c "import json,sys; print([json.loads(l)['loss'] for l in open(sys.argv[1])][int(sys.argv[2]) - 1])" "$1" "$2"; }
# max relative difference of the per-step losses of two logs (or of val_loss with a 4th argument)
maxrel() { "$PY" -c "
import json, sys
key = 'val_loss' if len(sys.argv) > 3 else 'loss'
a, b = [[json.loads(l).get(key) for l in open(f)] for f in sys.argv[1:3]]
d = [abs(x - y) / abs(y) for x, y in zip(a, b) if x is not None and y is not None]
print('%.2e' % max(d))" "$@"; }
le() { "$PY" -c "import sys; sys.exit(not float(sys.argv[1]) <= float(sys.argv[2]))" "$1" "$2"; }
same_log() { "$PY" -c "import json,sys; a,b=[[{k:v for k,v in json.loads(l).items() if k!='ms'} for l in open(f)] for f in sys.argv[1:]]; sys.exit(a!=b)" "$1" "$2"; }

# --- 1. stop after a checkpoint, resume from the run directory, compare
S="$COMMON --dropout 0.1 --steps 60 --ckpt-every 20"
$SK train $S --bf16 --out "$tmp/ref" 2>"$tmp/ref.err" || fail "bf16 reference run: $(tail -1 "$tmp/ref.err")"
grep -q "bf16 mixed precision: bf16 GEMMs with fp32 accumulation" "$tmp/ref.err" && pass "train --bf16 says so: $(grep -m1 'bf16 mixed' "$tmp/ref.err")" \
    || fail "train --bf16 says so: $(head -3 "$tmp/ref.err")"
if grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
    check "  its attention products run on avx512_bf16" grep -q "bf16 attention products (avx512_bf16)" "$tmp/ref.err"
fi
SKIPLM_TEST_FAIL_AT=0:31 $SK train $S --bf16 --out "$tmp/k" 2>"$tmp/k.err"
check "a bf16 run stopped at step 31 (injected), its checkpoint at step 20" grep -q "injected failure" "$tmp/k.err"
cp -r "$tmp/k" "$tmp/k_fp32"
$SK train --resume "$tmp/k" 2>"$tmp/k2.err"
check "resumed from the run directory alone" test $? = 0
check "  in bf16, the checkpoint's precision, and says so: $(grep -m1 'bf16 mixed' "$tmp/k2.err")" grep -q "the checkpoint's" "$tmp/k2.err"
check "  ends bit-identical to the uninterrupted bf16 run (cmp of ckpt.safetensors)" cmp -s "$tmp/ref/ckpt.safetensors" "$tmp/k/ckpt.safetensors"
check "  log.jsonl equals the reference's apart from timings" same_log "$tmp/ref/log.jsonl" "$tmp/k/log.jsonl"
SKIPLM_TEST_FAIL_AT=0:45 $SK train $S --bf16 --recompute 1 --out "$tmp/kr" 2>/dev/null
$SK train --resume "$tmp/kr" --recompute 1 2>/dev/null
check "with activation recomputation: stopped, resumed, the same bits as the run without" cmp -s "$tmp/ref/ckpt.safetensors" "$tmp/kr/ckpt.safetensors"
$SK train --resume "$tmp/k_fp32" --fp32 2>"$tmp/f.err"
check "--fp32 goes on in fp32 from a bf16 checkpoint (no bf16 banner)" test $? = 0 -a -z "$(grep 'bf16 mixed' "$tmp/f.err")"
check "  and ends elsewhere than the bf16 run" test -n "$(cmp "$tmp/ref/ckpt.safetensors" "$tmp/k_fp32/ckpt.safetensors" 2>&1)"

# --- 2. fp32 checkpoints; bf16 against fp32
$SK train $S --out "$tmp/fp" 2>"$tmp/fp.err" || fail "fp32 run: $(tail -1 "$tmp/fp.err")"
check "every tensor of a bf16 run's checkpoint is F32" "$PY" -c "
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop('__metadata__')
sys.exit(not h or any(v['dtype'] != 'F32' for v in h.values()))" "$tmp/ref/ckpt.safetensors"
check "  and records train.bf16 = 1" grep -aq '"train.bf16":"1"' "$tmp/ref/ckpt.safetensors"
$SK eval "$tmp/ref/ckpt.safetensors" "$tmp/val.bin" --batch 4 --max-batches 2 >"$tmp/ev" 2>&1
check "fp32 eval reads it: $(grep -m1 loss "$tmp/ev")" test $? = 0
check "bf16 and fp32 end apart (the checkpoints differ)" test -n "$(cmp "$tmp/ref/ckpt.safetensors" "$tmp/fp/ckpt.safetensors" 2>&1)"
d=$(maxrel "$tmp/ref/log.jsonl" "$tmp/fp/log.jsonl" val)
vb=$(tail -1 "$tmp/ref/log.jsonl" | sed 's/.*"val_loss":\([0-9.]*\).*/\1/'); vf=$(tail -1 "$tmp/fp/log.jsonl" | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
check "validation losses of bf16 and fp32 within 2% at every evaluation (max rel $d; final $vb vs $vf)" le "$d" 0.02
check "  final validation losses within 0.05 nats" "$PY" -c "import sys; sys.exit(not abs($vb - $vf) <= 0.05)"

# --- 3. gradient accumulation, masks, Llama
A="$D $M --lr 3e-3 --warmup 5 --steps 30 --eval-every 0 --seq 32"
$SK train $A --batch 8 --bf16 --out "$tmp/b8" 2>/dev/null || fail "bf16 batch 8"
$SK train $A --batch 4 --grad-accum 2 --bf16 --out "$tmp/b4" 2>/dev/null || fail "bf16 batch 4 x 2"
l1=$(loss_at "$tmp/b8/log.jsonl" 1); l2=$(loss_at "$tmp/b4/log.jsonl" 1); d=$(maxrel "$tmp/b8/log.jsonl" "$tmp/b4/log.jsonl")
check "bf16: batch 8 == batch 4 x grad-accum 2: step 1 loss $l1 vs $l2" "$PY" -c "import sys; sys.exit(not abs($l1 - $l2) <= 1e-6 * $l1)"
check "  every step's loss within 2e-2 (max rel $d)" le "$d" 2e-2
"$PY" - "$tmp" <<'EOF'
import sys, numpy as np
sys.path.insert(0, "tests/ref")
from shards import periodic, write
d = sys.argv[1]
t = periodic(20000, seed=3)
write(d + "/m.bin", t)
mask = (np.arange(len(t)) % 5 >= 2).astype(np.uint8)      # 3 of 5 targets count
h = np.zeros(256, dtype="<i4"); h[0], h[1], h[2] = 20240520, 100, len(mask)
open(d + "/m.mask.bin", "wb").write(h.tobytes() + mask.tobytes())
write(d + "/u.bin", t)                                     # the same tokens without a mask
EOF
MA="--vocab_size 64 $M --lr 3e-3 --warmup 5 --steps 30 --eval-every 0 --batch 4 --seq 32 --grad-accum 2"
$SK train --train "$tmp/m.bin" $MA --bf16 --out "$tmp/mb" 2>"$tmp/mb.err" || fail "masked bf16 run: $(tail -1 "$tmp/mb.err")"
$SK train --train "$tmp/m.bin" $MA --out "$tmp/mf" 2>/dev/null || fail "masked fp32 run"
$SK train --train "$tmp/u.bin" $MA --bf16 --out "$tmp/ub" 2>/dev/null || fail "unmasked bf16 run"
d=$(maxrel "$tmp/mb/log.jsonl" "$tmp/mf/log.jsonl"); du=$(maxrel "$tmp/mb/log.jsonl" "$tmp/ub/log.jsonl")
check "loss masks in bf16: each step's loss within 2e-2 of fp32's (max rel $d), and away from the unmasked run's ($du)" \
    "$PY" -c "import sys; sys.exit(not ($d <= 2e-2 and $du >= 5 * $d))"
L="$D --family llama --n_layer 3 --n_head 4 --n_kv_head 2 --n_embd 32 --block_size 32 --routing 2:2-3=@0 --batch 4 --seq 32
   --lr 3e-3 --warmup 5 --steps 30 --eval-every 10 --eval-batches 2 --ckpt-every 10"
$SK train $L --bf16 --out "$tmp/ll" 2>"$tmp/ll.err" || fail "llama bf16 run: $(tail -1 "$tmp/ll.err")"
SKIPLM_TEST_FAIL_AT=0:15 $SK train $L --bf16 --out "$tmp/ll2" 2>/dev/null
$SK train --resume "$tmp/ll2" 2>/dev/null
check "llama, GQA, a routing table in bf16: stopped, resumed, bit-identical" cmp -s "$tmp/ll/ckpt.safetensors" "$tmp/ll2/ckpt.safetensors"
check "  and it learns: loss $(loss_at "$tmp/ll/log.jsonl" 1) -> $(loss_at "$tmp/ll/log.jsonl" 30)" \
    "$PY" -c "import sys; sys.exit(not $(loss_at "$tmp/ll/log.jsonl" 30) < 0.9 * $(loss_at "$tmp/ll/log.jsonl" 1))"

# --- 4. no native bf16
DNNL_MAX_CPU_ISA=AVX2 SKIPLM_NO_AVX512BF16=1 $SK train $A --batch 8 --bf16 --out "$tmp/avx2" 2>"$tmp/avx2.err" ||
    fail "bf16 on AVX2: $(tail -1 "$tmp/avx2.err")"
check "  and its attention products run as fp32 fused multiply-adds" grep -q "bf16 attention products (fp32 fused multiply-adds)" "$tmp/avx2.err"
n=$(grep -c "no native bf16" "$tmp/avx2.err")
check "DNNL_MAX_CPU_ISA=AVX2: train --bf16 says once that this CPU has no native bf16 ($n): $(grep -m1 'no native' "$tmp/avx2.err")" test "$n" = 1
if [ $native = 1 ]; then
    check "  a native run says nothing of the kind" test -z "$(grep 'no native' "$tmp/ref.err")"
fi
d=$(maxrel "$tmp/avx2/log.jsonl" "$tmp/b8/log.jsonl")
check "  the fallback follows the native run (each step's loss within 1e-2, max rel $d)" le "$d" 1e-2

# --- 5. bench, eval
$SK bench $M --vocab_size 64 --batch 2 --seq 32 --steps 2 --bf16 --no-gen >"$tmp/bench" 2>&1
check "bench --bf16 trains: $(grep '^train: B' "$tmp/bench")" grep -q "MFU .* of the bf16 GEMM rate" "$tmp/bench"
check "  and shows the attention's share of the step: $(grep 'share of the step' "$tmp/bench")" \
    grep -q "share of the step: matmul [0-9.]*%, attention [0-9.]*%" "$tmp/bench"
$SK bench $M --vocab_size 64 --batch 2 --seq 32 --gemm-rate >"$tmp/rate" 2>&1
check "bench --gemm-rate: $(grep gemm-rate: "$tmp/rate")" grep -q "gemm-rate: fp32 [0-9.]* GFLOP/s, bf16 [0-9.]* GFLOP/s" "$tmp/rate"
$SK eval "$tmp/ref/ckpt.safetensors" "$tmp/val.bin" --batch 4 --max-batches 4 >"$tmp/e32" 2>&1
$SK eval "$tmp/ref/ckpt.safetensors" "$tmp/val.bin" --batch 4 --max-batches 4 --bf16 >"$tmp/e16" 2>&1
e32=$(grep -o "loss [0-9.]*" "$tmp/e32" | head -1 | cut -d' ' -f2); e16=$(grep -o "loss [0-9.]*" "$tmp/e16" | head -1 | cut -d' ' -f2)
check "eval --bf16: loss $e16 vs fp32 eval's $e32 (within 1e-2)" "$PY" -c "import sys; sys.exit(not ('$e16' and abs($e16 - $e32) <= 1e-2 * $e32))"

SKIPLM_MEM_LIMIT=1000K $SK train $COMMON --steps 2 --bf16 --out "$tmp/mem" 2>"$tmp/mem.err"; rc=$?
check "the memory check counts the bf16 copy of the weights (rc $rc): $(grep -o 'bf16 weights [0-9]*' "$tmp/mem.err")" \
    grep -q "bf16 weights [0-9]" "$tmp/mem.err"

# --- 6. MPI
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && [ "$BUILD" = build ]; then
    if make --no-print-directory -j2 MPI=1 build-mpi/skiplm >"$tmp/mk" 2>&1; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
        MP="$D $M --bias 0 --lr 3e-3 --warmup 5 --steps 20 --eval-every 10 --eval-batches 2 --seq 32 --bf16"
        OMP_NUM_THREADS=1 build-mpi/skiplm train $MP --batch 8 --out "$tmp/p1" 2>/dev/null || fail "MPI build, 1 process"
        OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 build-mpi/skiplm train $MP --batch 4 --out "$tmp/p2" 2>"$tmp/p2.err" \
            || fail "2 ranks: $(tail -2 "$tmp/p2.err")"
        OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 build-mpi/skiplm train $MP --batch 4 --zero 1 --out "$tmp/p3" 2>/dev/null \
            || fail "2 ranks, ZeRO-1"
        d=$(maxrel "$tmp/p2/log.jsonl" "$tmp/p1/log.jsonl")
        check "MPI in bf16: 2 ranks x batch 4 == 1 process x batch 8 (each step's loss within 1e-3, max rel $d)" le "$d" 1e-3
        check "  ZeRO-1 gives the bits of plain data parallelism (weights, m and v)" "$PY" - "$tmp/p2/ckpt.safetensors" "$tmp/p3/ckpt.safetensors" <<'EOF'
import sys
sys.path.insert(0, "tests/ref")
import st, torch
ta, _ = st.load_file(sys.argv[1]); tb, _ = st.load_file(sys.argv[2])
sys.exit(0 if set(ta) == set(tb) and all(torch.equal(ta[k], tb[k]) for k in ta) else 1)
EOF
    else
        fail "make MPI=1: $(tail -3 "$tmp/mk")"
    fi
else
    echo "SKIP the MPI part: no mpicc/mpirun, or a $BUILD build (tests/test_mpi.sh builds and tests MPI)"
fi
[ $fails = 0 ]
