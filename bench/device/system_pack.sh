#!/usr/bin/env bash
# Packs .k3sys for bench/device/system_run.sh: the whole system on GPUs (k3-worker --backend cuda
# built with gRPC, the CPU-built k3-coordinator and k3 client), the Debian libraries the GPU image
# lacks (gRPC and its Abseil/re2/c-ares/upb, protobuf, spdlog, fmt, cpp-httplib, pcre2; never Open
# MPI, NCCL or the CUDA runtime: the image's own are used) and the golden model.
#   bash bench/device/system_pack.sh [CUDA_BUILD=build/cuda] [CPU_BUILD=build/full]
set -euo pipefail
CUDA_BUILD=${1:-build/cuda}
CPU_BUILD=${2:-build/full}
SHARED=${K3_SHARED_DIR:-../shared}
grep -qx '/.k3sys/' .git/info/exclude || echo '/.k3sys/' >> .git/info/exclude
rm -rf .k3sys && mkdir -p .k3sys/bin .k3sys/lib .k3sys/golden
cp "$CUDA_BUILD/bin/k3-worker" .k3sys/bin/k3-worker
cp "$CPU_BUILD/bin/k3-coordinator" "$CPU_BUILD/bin/k3" .k3sys/bin/
for b in .k3sys/bin/*; do strip "$b"; done
for b in .k3sys/bin/*; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u |
  grep -E 'absl|spdlog|fmt|grpc|gpr|upb|protobuf|address_sorting|re2|cares|httplib|pcre2' |
  while read -r l; do cp -L "$l" .k3sys/lib/; done
xz -T1 -6 -f .k3sys/bin/*
cp "$SHARED/data/golden/k3-golden-a.gguf" .k3sys/golden/
du -sh .k3sys .k3sys/*
