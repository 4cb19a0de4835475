#!/usr/bin/env bash
# Links a test binary of SOME of kernels_cuda_test's test files (their objects as built HERE in
# build/cuda, with its link line): a device carry that holds a few kernel tests beside the golden
# model and the engine test, when the whole kernels_cuda_test would not fit a call's 64 MiB.
#   bash bench/device/link_subset_test.sh NAME TEST_FILE...   (-> build/cuda/bin/NAME)
#   bash bench/device/link_subset_test.sh kda_ternary_cuda_test kda_test iq1s_ternary_test
set -euo pipefail
name=${1:?NAME}; shift
[ $# -gt 0 ] || { echo "link_subset_test.sh NAME TEST_FILE..." >&2; exit 2; }
cmake --build build/cuda --target kernels_cuda_test >/dev/null
objdir=tests/cuda/CMakeFiles/kernels_cuda_test.dir
line=$(ninja -C build/cuda -t commands bin/kernels_cuda_test | tail -1 | sed 's/ && cd .*//; s/^: && //')
objs=""
for t in "$@"; do objs="$objs $objdir/$t.cc.o"; done
# The link line with only the chosen objects and the new output name.
line=$(echo "$line" | sed -E "s# $objdir/[^ ]+\.o##g; s#-o bin/kernels_cuda_test#$objs -o bin/$name#")
(cd build/cuda && eval "$line")
ls -la "build/cuda/bin/$name"
