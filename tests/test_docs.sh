#!/usr/bin/env bash
# The documentation must match the code. For README.md and docs/*.md:
#   - every sk_... identifier exists as a word in include/, src/, cli/ or server/ (a name ending in
#     .h/.c/... is a file name: some file of the repository must have it; sk_x_* is a prefix);
#   - every repository path named (src/, include/, cli/, server/, tests/, scripts/, bench/, fuzz/,
#     docs/, .ci/, and relative markdown link targets) exists; a path ending in / is a folder,
#     globs such as src/text/jinja_*.c must match something;
#   - every `make TARGET` in code names a target of the Makefile;
# and no "SPEC §" reference is left anywhere in the tree (the spec is not in the repository).
# A self-check runs the same checkers on a made-up page that must fail.
# One PASS/FAIL line per check; exit status 1 on a failure. bash, grep, sed, awk only.
set -u
cd "$(dirname "$0")/.." || exit 1
export LC_ALL=C
SELF=tests/test_docs.sh
PREFIX='src|include|cli|server|tests|scripts|bench|fuzz|docs|\.ci'
fail=0

DOCS=(README.md)
for f in docs/*.md; do [ -f "$f" ] && DOCS+=("$f"); done

# the files of the repository: tracked and new (not ignored) ones
if git rev-parse --git-dir >/dev/null 2>&1; then
    ALL_FILES=$(git ls-files -co --exclude-standard)
else
    ALL_FILES=$(find . -type f -not -path './.git/*' -not -path './node_modules/*' -not -path './build*' | sed 's|^\./||')
fi

# every sk_ word of the code
KNOWN_IDS=$(grep -rhoE '\bsk_[a-z0-9_]+' include src cli server 2>/dev/null | sort -u)
KNOWN_BASENAMES=$(printf '%s\n' "$ALL_FILES" | sed 's|.*/||' | sort -u)

# check_ids FILE...: prints the identifiers that the code lacks
check_ids() {
    grep -hoE '\bsk_[a-z0-9_]+(\*|\.(h|c|cu|cuh|py|sh|js|mjs)\b)?' "$@" | sort -u |
    awk -v known="$KNOWN_IDS" -v files="$KNOWN_BASENAMES" '
        BEGIN { n = split(known, k, "\n"); for (i = 1; i <= n; i++) K[k[i]] = 1
                m = split(files, f, "\n"); for (i = 1; i <= m; i++) F[f[i]] = 1 }
        /\*$/ { p = substr($0, 1, length($0) - 1); ok = 0
                for (w in K) if (index(w, p) == 1) { ok = 1; break }
                if (!ok) print; next }
        /\./  { if (!($0 in F)) print; next }
        { if (!($0 in K)) print }'
}

# check_paths FILE...: prints the repository paths and relative link targets that do not exist
check_paths() {
    local f tok
    for f in "$@"; do
        # paths named in the text (not preceded by a path or word character)
        grep -oE "(^|[^A-Za-z0-9_./\$-])($PREFIX)/[A-Za-z0-9_.*?/+-]*" "$f" |
            sed -E "s#^[^a-z.]##; s#:[0-9].*##; s#[.,;:)]+\$##" | sort -u |
            while read -r tok; do
                [ -n "$tok" ] || continue
                case $tok in
                    *[*?]*) compgen -G "$tok" >/dev/null || echo "$tok" ;;
                    */) [ -d "$tok" ] || echo "$tok" ;;
                    *) [ -e "$tok" ] || echo "$tok" ;;
                esac
            done
        # markdown link targets, relative to the page
        grep -oE '\]\([^) ]+\)' "$f" | sed -E 's#^\]\(##; s#\)$##; s/#.*//' | sort -u |
            while read -r tok; do
                case $tok in ''|http://*|https://*|mailto:*) continue ;; esac
                [ -e "$(dirname "$f")/$tok" ] || echo "$tok (in $f)"
            done
    done | sort -u
}

# the Makefile's targets
MAKE_TARGETS=$(awk '/^[A-Za-z0-9_. -]+:([^=]|$)/ { sub(/:.*/, ""); for (i = 1; i <= NF; i++) print $i }
                    /^\.PHONY:/ { for (i = 2; i <= NF; i++) print $i }' Makefile | sort -u)

# check_make FILE...: prints the targets of `make X` (in code spans, fenced or indented
# blocks) that the Makefile lacks
check_make() {
    awk '
        /^[ \t]*(```|~~~)/ { fence = !fence; next }
        fence || /^    / { print; next }
        { s = $0; while (match(s, /`[^`]+`/)) { print substr(s, RSTART + 1, RLENGTH - 2); s = substr(s, RSTART + RLENGTH) } }
    ' "$@" |
    awk -v targets="$MAKE_TARGETS" '
        BEGIN { n = split(targets, t, "\n"); for (i = 1; i <= n; i++) T[t[i]] = 1 }
        { for (i = 1; i <= NF; i++) {
              if ($i != "make") continue
              for (j = i + 1; j <= NF; j++) {
                  if ($j ~ /=/ || $j ~ /^-/) continue
                  if ($j ~ /^[a-z][a-z0-9_.-]*$/ && !($j in T)) print $j
                  break
              }
          } }' | sort -u
}

# check_spec FILE...: prints the files that still cite the spec
check_spec() {
    [ $# -gt 0 ] || return 0
    grep -lF 'SPEC §' "$@" 2>/dev/null
}

report() {   # report WHAT MISSING...
    local what=$1; shift
    if [ $# -eq 0 ] || [ -z "$*" ]; then
        echo "PASS $what"
    else
        echo "FAIL $what: $*"
        fail=1
    fi
}

# self-check: a page naming what does not exist must be caught by every checker
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/bad.md" <<'EOF'
Calls `sk_no_such_function` from src/no/such_file.c; see [the page](no_such_page.md).
Run `make no-such-target`. SPEC §9 says so.
EOF
got_ids=$(check_ids "$tmp/bad.md")
got_paths=$(check_paths "$tmp/bad.md")
got_make=$(check_make "$tmp/bad.md")
got_spec=$(check_spec "$tmp/bad.md")
if [ "$got_ids" = "sk_no_such_function" ] &&
   grep -qx 'src/no/such_file.c' <<<"$got_paths" && grep -q '^no_such_page.md ' <<<"$got_paths" &&
   [ "$got_make" = "no-such-target" ] && [ -n "$got_spec" ]; then
    echo "PASS self-check (the checkers catch a made-up identifier, path, link, make target and spec reference)"
else
    echo "FAIL self-check: ids [$got_ids] paths [$got_paths] make [$got_make] spec [$got_spec]"
    fail=1
fi

report "identifiers named in README.md and docs/ exist in include/, src/, cli/ or server/" $(check_ids "${DOCS[@]}")
report "paths and links named in README.md and docs/ exist" $(check_paths "${DOCS[@]}" | tr ' ' '_')
report "make targets named in README.md and docs/ exist in the Makefile" $(check_make "${DOCS[@]}")
spec_files=()
while IFS= read -r f; do
    [ -f "$f" ] && [ "$f" != "$SELF" ] && spec_files+=("$f")
done <<<"$ALL_FILES"
report "no 'SPEC §' reference in the tree" $(check_spec "${spec_files[@]}")
exit $fail
