#!/usr/bin/env bash
# System packages skiplm needs to build and test (Debian/Ubuntu, run as root or with sudo):
# a C compiler with OpenMP, OpenBLAS, PyTorch (the test oracle), Node.js + npm (corpus and
# GPT-2 vocabulary packages, reference encoder), clang with libFuzzer (make fuzz), Open MPI
# (make MPI=1, tests/test_mpi.sh), g++ (the CUDA emulator test), libmicrohttpd and curl (skiplm serve and its
# test), python3-prometheus-client (its metrics' test), chromium (the chat page's browser test), zlib (prepare's .gz inputs), oneDNN (the bf16 GEMMs
# of train --bf16 on the CPU; optional in the Makefile, but its tests run where it is installed).
# Skips the install when all are present.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v make >/dev/null 2>&1 || need+=(make)
# the CUDA emulator test (make cuda-emu-test) compiles the .cu sources as C++
command -v g++ >/dev/null 2>&1 || need+=(g++)
# OpenBLAS built on OpenMP (one thread pool with skiplm's OpenMP: see the Makefile)
ls /usr/include/*-linux-gnu/openblas-openmp/cblas.h >/dev/null 2>&1 || need+=(libopenblas-openmp-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# zlib (optional in the Makefile): prepare reads .txt.gz / .jsonl.gz
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
# oneDNN (optional in the Makefile, DNNL=auto): bf16 mixed precision on the CPU
[ -f /usr/include/oneapi/dnnl/dnnl.h ] || need+=(libdnnl-dev)
/usr/bin/python3 -c "import torch, numpy" >/dev/null 2>&1 || need+=(python3-torch python3-numpy)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# make fuzz: clang with libFuzzer and the sanitizer runtimes (libclang-rt-dev)
command -v clang >/dev/null 2>&1 || need+=(clang)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1 || need+=(libclang-rt-dev)
# skiplm serve: libmicrohttpd (HTTP), found by pkg-config; curl for tests/test_serve.py
pkg-config --exists libmicrohttpd 2>/dev/null || need+=(libmicrohttpd-dev)
command -v curl >/dev/null 2>&1 || need+=(curl)
# a real browser for the chat page's test (tests/test_serve_chat_page.py, driven by npm puppeteer-core)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# the Prometheus project's text-format parser, for GET /metrics in tests/test_serve_util.py
/usr/bin/python3 -c "import prometheus_client" >/dev/null 2>&1 || need+=(python3-prometheus-client)
# make MPI=1 (data-parallel training) and tests/test_mpi.sh: Open MPI's mpicc and mpirun
command -v mpicc >/dev/null 2>&1 && [ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h -o -f /usr/lib/aarch64-linux-gnu/openmpi/include/mpi.h ] ||
    need+=(libopenmpi-dev)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
if [ ${#need[@]} -eq 0 ]; then
    echo "install_deps: all system packages present"
    exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "install_deps: apt-get install ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
