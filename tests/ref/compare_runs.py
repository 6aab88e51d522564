"""Compare two training runs (tests/test_mpi.sh, tests/cuda/test_cuda_mpi.sh).

usage: compare_runs.py RUN_A RUN_B TOL [TENSOR_TOL]

The per-step values of RUN_A/log.jsonl (loss, grad_norm, val_loss, tokens) must be within TOL
relative of RUN_B's, and every tensor of RUN_A/ckpt.safetensors within TENSOR_TOL (default
TOL) of RUN_B's, relative to RUN_B's max |value| (pass "inf" to check only the names). Prints
the worst differences; exits 1 when a tolerance is exceeded or the runs do not line up."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def main():
    a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ttol = float(sys.argv[4]) if len(sys.argv) > 4 else tol
    la = [json.loads(l) for l in open(a + "/log.jsonl")]
    lb = [json.loads(l) for l in open(b + "/log.jsonl")]
    if [x["step"] for x in la] != [x["step"] for x in lb]:
        print("  steps differ")
        return 1
    worst = 0.0
    for x, y in zip(la, lb):
        for k in ("loss", "grad_norm", "val_loss", "tokens"):
            if (k in x) != (k in y):
                print("  step", x["step"], k, "missing")
                return 1
            if k in x:
                worst = max(worst, abs(x[k] - y[k]) / max(abs(y[k]), 1e-30))
    ta, _ = st.load_file(a + "/ckpt.safetensors")
    tb, _ = st.load_file(b + "/ckpt.safetensors")
    if set(ta) != set(tb):
        print("  tensor names differ")
        return 1
    wt, wname = 0.0, ""
    for k in ta:
        d = (ta[k].double() - tb[k].double()).abs().max().item() / max(tb[k].double().abs().max().item(), 1e-30)
        if d > wt:
            wt, wname = d, k
    print(f"  {len(la)} steps: loss/norm/val max rel diff {worst:.2e}; tensors max rel diff {wt:.2e} ({wname})")
    return 0 if worst <= tol and wt <= ttol else 1


if __name__ == "__main__":
    sys.exit(main())
