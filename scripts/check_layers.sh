#!/usr/bin/env bash
# The layering rule of src/ (docs/architecture.md), checked on every quoted #include:
#   base   includes base only
#   core   includes base and core
#   io     includes base, core and io
#   train  includes base, core, io and train
#   text   includes base and text (never the model, the trainer or their headers)
#   cuda   includes anything but text
# and the public headers in include/ follow the same order (skiplm.h, the umbrella, is for
# users of the library: nothing in src/ includes it). Then no two files of a layer call each
# other in a loop (a -> b -> ... -> a): each .c of base, core, io, train and text is compiled
# (cc -O0, into a temporary folder), and `nm` gives what each object defines and what it leaves
# undefined; a file calls another when it leaves undefined a symbol the other defines. Each
# loop is printed as its files and, for each call between them, one symbol it goes through.
# Prints one line per violation and exits 1 if there is any. With a folder argument, checks
# that tree instead of this one. SK_LOOP_LAYERS="io text" checks the loops of those layers
# only ("" none: the include rules alone); CC picks the compiler.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
# what each layer may include: folders under src/ and public headers
allow() {
    case $1 in
    base)  echo "base skiplm_base.h" ;;
    core)  echo "base core skiplm_base.h skiplm_attention.h skiplm_model.h" ;;
    io)    echo "base core io skiplm_base.h skiplm_attention.h skiplm_model.h skiplm_io.h" ;;
    train) echo "base core io train skiplm_base.h skiplm_attention.h skiplm_model.h skiplm_io.h skiplm_train.h" ;;
    text)  echo "base text skiplm_base.h skiplm_text.h" ;;
    cuda)  echo "base core io train cuda skiplm_base.h skiplm_attention.h skiplm_model.h skiplm_io.h skiplm_train.h skiplm_cuda.h" ;;
    esac
}
bad=0; checked=0
check() {   # file layer
    local f=$1 layer=$2 ok inc dir
    ok=" $(allow "$layer") "
    while IFS= read -r inc; do
        checked=$((checked + 1))
        case $inc in
        */*) dir=${inc%%/*} ;;                            # "core/model.h"
        skiplm*.h) dir=$inc ;;                            # a public header
        *) [ "$layer" = cuda ] || [ -f "$(dirname "$f")/$inc" ] && continue   # beside the file
           dir=$layer ;;
        esac
        if [[ $ok != *" $dir "* ]]; then
            echo "check_layers: $f ($layer) includes \"$inc\""
            bad=$((bad + 1))
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
}
for layer in base core io train text cuda; do
    for f in src/$layer/*.c src/$layer/*.h src/$layer/*.cu src/$layer/*.cuh; do
        [ -f "$f" ] && check "$f" "$layer"
    done
done
# the public headers: each part includes only the parts below it
for h in include/skiplm_*.h; do
    part=$(basename "$h" .h); part=${part#skiplm_}
    case $part in attention) part=core ;; model) part=core ;; esac
    check "$h" "$part"
done
# ------------------------------------------------------------------ loops of calls
loops=0; nfiles=0
obj=$(mktemp -d); trap 'rm -rf "$obj"' EXIT
for layer in ${SK_LOOP_LAYERS-base core io train text}; do
    srcs=(src/"$layer"/*.c)
    [ -f "${srcs[0]}" ] || continue
    nfiles=$((nfiles + ${#srcs[@]}))
    mkdir -p "$obj/$layer"
    # shellcheck disable=SC2016
    if ! printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} sh -c \
        '${CC:-cc} -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -fopenmp -O0 -w -c "$1" -o "$2/$(basename "$1" .c).o"' sh {} "$obj/$layer"
    then
        echo "check_layers: src/$layer/ did not compile (cc -O0): its calls were not checked"
        bad=$((bad + 1)); continue
    fi
    # "U file sym" and "D file sym" lines, then the strongly connected components of the graph
    out=$(for o in "$obj/$layer"/*.o; do
              nm "$o" | awk -v f="$(basename "$o" .o).c" '$1 == "U" { print "U", f, $2 }
                                                          NF == 3 && $2 ~ /^[TDBRVWGS]$/ { print "D", f, $3 }'
          done | awk -v layer="$layer" '
        $1 == "D" { def[$3] = $2; next }
        { use[++nu] = $2 " " $3 }
        END {
            for (i = 1; i <= nu; i++) {
                split(use[i], u, " ")
                if (!(u[2] in def) || def[u[2]] == u[1]) continue
                e = u[1] SUBSEP def[u[2]]
                if (!(e in edge)) edge[e] = u[2]
                node[u[1]] = 1; node[def[u[2]]] = 1
            }
            n = 0; for (f in node) name[++n] = f
            for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) reach[i, j] = ((name[i] SUBSEP name[j]) in edge)
            for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if (reach[i, k]) for (j = 1; j <= n; j++) if (reach[k, j]) reach[i, j] = 1
            for (i = 1; i <= n; i++) {
                if (done[i] || !reach[i, i]) continue
                files = ""; calls = ""
                for (j = 1; j <= n; j++) if (reach[i, j] && reach[j, i]) { done[j] = 1; files = files " " name[j]; member[j] = 1 }
                for (a = 1; a <= n; a++) for (b = 1; b <= n; b++)
                    if (member[a] && member[b] && ((name[a] SUBSEP name[b]) in edge))
                        calls = calls " " name[a] " -> " name[b] " (" edge[name[a], name[b]] ");"
                for (j = 1; j <= n; j++) member[j] = 0
                print "check_layers: src/" layer "/: files call each other in a loop:" files ":" calls
            }
        }')
    if [ -n "$out" ]; then
        echo "$out"
        loops=$((loops + $(grep -c . <<<"$out")))
    fi
done
if [ $bad -gt 0 ] || [ $loops -gt 0 ]; then
    [ $bad -gt 0 ] && echo "check_layers: $bad include(s) break the layering"
    [ $loops -gt 0 ] && echo "check_layers: $loops loop(s) of calls between files of a layer"
    exit 1
fi
echo "check_layers: $checked includes in src/ and include/ follow the layering; the calls between the $nfiles files of src/ make no loop"
