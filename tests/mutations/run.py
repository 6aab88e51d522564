"""The mutation catalogue's runner (`make mutation-test`): every tests/mutations/*.mut is a small,
plausible bug and the tests that must catch it. Each is applied to a scratch copy of the tree
(never to this one), the copy is rebuilt (make rebuilds only what the edit touched), the named
tests run, and the mutation is CAUGHT when one of them fails (prints a FAIL line, exits
non-zero or runs past the time limit) and SURVIVED when all pass. The exit status is non-zero
when a mutation survived, no longer applies (its text is not in the file exactly once), or
does not build.

    python3 tests/mutations/run.py [--fast] [--list] [--keep] [--verbose] [NAME-SUBSTRING...]
    (--verbose prints every FAIL line of the test that caught a mutation)
    MUT=attn make mutation-test            # the mutations whose name contains "attn"
    make mutation-test FAST=1              # the ten marked `fast: yes` (what .ci/run runs)

A mutation file (tests/mutations/NAME.mut):

    why: what the bug is, in a line
    test: the command that must catch it (run in the copy's root; $PY, $SKIPLM, $BUILD set)
    test: more commands (optional)
    fast: yes                   (optional: in the --fast subset)
    file: path/of/the/source.c
    <<<<
    text that is in the file exactly once (whole lines)
    ====
    what replaces it
    >>>>
    (more file: lines and <<<< ==== >>>> blocks: each block edits the file named last)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", "build")
TEST_TIMEOUT = int(os.environ.get("MUT_TIMEOUT", "600"))


class Mutation:
    def __init__(self, path):
        self.name = os.path.basename(path)[:-4]
        self.why, self.tests, self.fast, self.edits = "", [], False, []   # edits: (file, old, new)
        lines = open(path, encoding="utf-8").read().split("\n")
        target, i = None, 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("why:"):
                self.why = line[4:].strip()
            elif line.startswith("test:"):
                self.tests.append(line[5:].strip())
            elif line.startswith("fast:"):
                self.fast = line[5:].strip() == "yes"
            elif line.startswith("file:"):
                target = line[5:].strip()
            elif line == "<<<<":
                j = lines.index("====", i)
                k = lines.index(">>>>", j)
                if target is None:
                    raise ValueError(f"{path}: a <<<< block before any file: line")
                self.edits.append((target, "\n".join(lines[i + 1:j]) + "\n", "\n".join(lines[j + 1:k]) + "\n"))
                i = k
            elif line.strip() and not line.startswith("#"):
                raise ValueError(f"{path}:{i + 1}: unexpected line {line!r}")
            i += 1
        if not self.tests or not self.edits:
            raise ValueError(f"{path}: a mutation needs at least one test: line and one <<<< block")

    def files(self):
        return sorted({f for f, _, _ in self.edits})

    def apply(self, tree):
        """{file: mutated text}, or a reason it no longer applies"""
        out = {}
        for f, old, new in self.edits:
            text = out.get(f)
            if text is None:
                p = os.path.join(tree, f)
                if not os.path.exists(p):
                    return f"{f} does not exist"
                text = open(p, encoding="utf-8").read()
            n = text.count(old)
            if n != 1:
                return f"{f}: the text to replace occurs {n} times (want 1): {old.strip()[:70]!r}"
            out[f] = text.replace(old, new)
        return out


def copy_tree(dst):
    """the tracked and untracked-but-not-ignored files, with their times (so that a copied
    build folder stays up to date), the build folder, and node_modules as a link"""
    ls = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True)
    for rel in filter(None, ls.stdout.decode().split("\0")):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src) or os.path.islink(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dst, rel)) or dst, exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))
    for b in (BUILD, "build-mpi"):                  # build-mpi: what tests/test_mpi.sh builds and reuses
        if os.path.isdir(os.path.join(ROOT, b)):
            shutil.copytree(os.path.join(ROOT, b), os.path.join(dst, b), symlinks=True)
    if os.path.isdir(os.path.join(ROOT, "node_modules")):
        os.symlink(os.path.join(ROOT, "node_modules"), os.path.join(dst, "node_modules"))


def make(tree):
    r = subprocess.run(["make", "-j2", "--no-print-directory", f"BUILD={BUILD}"], cwd=tree, capture_output=True, text=True)
    return r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]


def run_test(tree, cmd):
    """(failed, why) for one test command"""
    env = dict(os.environ, SKIPLM=os.path.join(tree, BUILD, "skiplm"), BUILD=BUILD, PY=os.environ.get("PY", "/usr/bin/python3"))
    try:
        r = subprocess.run(["bash", "-c", cmd], cwd=tree, env=env, capture_output=True, text=True, errors="replace",
                           timeout=TEST_TIMEOUT, start_new_session=True)
    except subprocess.TimeoutExpired:
        return True, f"ran past {TEST_TIMEOUT} s"
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL ")]
    if fails and "--verbose" in sys.argv:
        print("\n".join("    " + f[:160] for f in fails))
    if fails:
        return True, f"{len(fails)} FAIL: {fails[0][5:90]}"
    if r.returncode != 0:
        return True, f"exit status {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:90]}"
    if "PASS " not in r.stdout:
        return False, "ran no check"
    return False, f"{r.stdout.count(chr(10) + 'PASS ') + r.stdout.startswith('PASS ')} checks passed"


def main():
    args = [a for a in sys.argv[1:]]
    fast, listing, keep = "--fast" in args, "--list" in args, "--keep" in args
    pats = [a for a in args if not a.startswith("--")] + os.environ.get("MUT", "").split()
    muts = []
    for f in sorted(os.listdir(HERE)):
        if f.endswith(".mut"):
            muts.append(Mutation(os.path.join(HERE, f)))
    if fast:
        muts = [m for m in muts if m.fast]
    if pats:
        muts = [m for m in muts if any(p in m.name for p in pats)]
    if listing:
        for m in muts:
            print(f"{m.name:32} {'fast ' if m.fast else ''}{', '.join(m.files())}: {m.why}")
        return 0
    if not muts:
        print("mutation-test: no mutation matches")
        return 1
    t0 = time.time()
    tree = tempfile.mkdtemp(prefix="skiplm-mut-")
    print(f"mutation-test: {len(muts)} mutations on a copy of the tree in {tree}")
    sys.stdout.flush()
    copy_tree(tree)
    ok, log = make(tree)
    if not ok:
        print(log)
        print("mutation-test: the unmutated copy does not build")
        return 1
    caught = survived = broken = 0
    # mutations of the same file one after the other: the file is rebuilt once between them
    muts.sort(key=lambda m: (m.files(), m.name))
    for m in muts:
        t = time.time()
        edited = m.apply(tree)
        if isinstance(edited, str):
            broken += 1
            print(f"NOT APPLIED {m.name}: {edited}")
            sys.stdout.flush()
            continue
        originals = {f: open(os.path.join(tree, f), encoding="utf-8").read() for f in edited}
        try:
            for f, text in edited.items():
                open(os.path.join(tree, f), "w", encoding="utf-8").write(text)
            ok, log = make(tree)
            if not ok:
                broken += 1
                print(f"NOT BUILT {m.name}: {log.strip().splitlines()[-1] if log.strip() else ''}")
                continue
            results = []
            for cmd in m.tests:
                failed, why = run_test(tree, cmd)
                results.append((failed, cmd, why))
                if failed:
                    break
            if any(r[0] for r in results):
                caught += 1
                _, cmd, why = next(r for r in results if r[0])
                print(f"CAUGHT   {m.name} ({time.time() - t:.0f} s) by {cmd}: {why}")
            else:
                survived += 1
                print(f"SURVIVED {m.name} ({time.time() - t:.0f} s): {m.why}; " + "; ".join(f"{c}: {w}" for _, c, w in results))
        finally:
            for f, text in originals.items():                 # a new time stamp: make rebuilds it next
                open(os.path.join(tree, f), "w", encoding="utf-8").write(text)
            sys.stdout.flush()
    if keep:
        print(f"mutation-test: the copy stays in {tree}")
    else:
        shutil.rmtree(tree, ignore_errors=True)
    print(f"mutation-test: {len(muts)} mutations, {caught} caught, {survived} survived, {broken} not applied or not built "
          f"({time.time() - t0:.0f} s)")
    return 0 if caught == len(muts) else 1


if __name__ == "__main__":
    sys.exit(main())
