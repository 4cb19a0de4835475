#!/usr/bin/env bash
# Keeps the launch rule of kernels/cuda/launch.cuh: every kernel under kernels/, collectives/ and
# worker/ is launched through LaunchKernel (no `<<<` outside comments) and starts with PdlEnter() or
# PdlWait() (its first statement; only shared-memory declarations may precede it). A kernel that touched
# memory before PdlEnter could overlap the kernel before it under programmatic dependent launch.
#   launch_check.sh REPO_ROOT
set -uo pipefail
cd "$1" || exit 1
mapfile -t files < <(find kernels collectives worker -name '*.cu' -o -name '*.cuh' | sort)
[ "${#files[@]}" -gt 0 ] || { echo "launch_check: no CUDA sources found"; exit 1; }
awk '
  FNR == 1 { pending = 0; body = 0 }
  { line = $0; sub(/\/\/.*/, "", line) }       # code only
  line ~ /<<</ { printf "%s:%d: launch with <<<>>> (use LaunchKernel)\n", FILENAME, FNR; bad++ }
  body {
    if (line ~ /^[ \t]*$/ || line ~ /^[ \t]*(extern[ \t]+)?__shared__/) next
    if (line !~ /^[ \t]*(k3::cuda::)?Pdl(Enter|Wait)\(\);/) {
      printf "%s:%d: kernel %s does not start with PdlEnter() / PdlWait()\n", FILENAME, FNR, name; bad++
    }
    body = 0; kernels++
    next
  }
  line ~ /__global__/ { pending = 1; name = "?" }
  pending {
    if (match(line, /[A-Za-z_0-9]+[ \t]*\(/) && name == "?" && line !~ /__launch_bounds__[ \t]*\($/) {
      s = substr(line, RSTART, RLENGTH); sub(/[ \t]*\($/, "", s)
      if (s != "__launch_bounds__" && s != "__global__") name = s
    }
    if (index(line, "{")) {
      pending = 0
      rest = substr(line, index(line, "{") + 1)
      if (rest ~ /[^ \t]/) {
        if (rest !~ /^[ \t]*(k3::cuda::)?Pdl(Enter|Wait)\(\);/) { printf "%s:%d: kernel %s does not start with PdlEnter() / PdlWait()\n", FILENAME, FNR, name; bad++ }
        kernels++
      } else body = 1
    }
  }
  END {
    if (kernels == 0) { print "launch_check: no kernels found"; exit 1 }
    if (bad) { printf "launch_check: %d problem(s)\n", bad; exit 1 }
    printf "launch_check: %d kernels start with PdlEnter or PdlWait, no <<<>>> launches\n", kernels
  }
' "${files[@]}"
