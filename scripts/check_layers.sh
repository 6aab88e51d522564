#!/usr/bin/env bash
# The layering rule of src/ (docs/architecture.md), checked on every quoted #include:
#   base   includes base only
#   core   includes base and core
#   io     includes base, core and io
#   train  includes base, core, io and train
#   text   includes base and text (never the model, the trainer or their headers)
#   cuda   includes anything but text
# and the public headers in include/ follow the same order (skiplm.h, the umbrella, is for
# users of the library: nothing in src/ includes it). Prints one line per violation and
# exits 1 if there is any. With a folder argument, checks that tree instead of this one.
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
if [ $bad -gt 0 ]; then
    echo "check_layers: $bad include(s) break the layering"
    exit 1
fi
echo "check_layers: $checked includes in src/ and include/ follow the layering"
