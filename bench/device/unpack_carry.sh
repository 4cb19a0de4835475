# Sourced by the device scripts (bench/device/*_run.sh): the step every one of them starts with.
#   source bench/device/unpack_carry.sh
#   k3_unpack_carry CARRY BIN   every CARRY/bin/*.xz (packed here by pack_bins.sh, tp_pack.sh,
#                               system_pack.sh, ...) into BIN, executable (a *.tar.xz: its files); CARRY/lib goes first on
#                               LD_LIBRARY_PATH (the Debian libraries the GPU image lacks).
#   k3_find_missing_libs BIN    libraries BIN/* still cannot find (the image's own Open MPI, NCCL,
#                               CUDA runtime live outside the default path): found under /usr or
#                               /opt and added to LD_LIBRARY_PATH, one line each.
# xz, or Python's lzma where an image lacks xz.

k3_unpack_carry() {
  local carry=$1 bin=$2 f b
  mkdir -p "$bin"
  for f in "$carry"/bin/*.xz; do
    [ -e "$f" ] || { echo "k3_unpack_carry: no $carry/bin/*.xz"; return 1; }
    b=$(basename "$f" .xz)
    if [ "${b%.tar}" != "$b" ]; then  # several binaries in one tar.xz (engine_pack.sh)
      { xz -dc "$f" 2>/dev/null || python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$f"; } \
        | tar -xf - -C "$bin" || { echo "k3_unpack_carry: cannot unpack $f"; return 1; }
      continue
    fi
    { xz -dc "$f" 2>/dev/null || python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$f"; } \
      > "$bin/$b" || { echo "k3_unpack_carry: cannot unpack $f"; return 1; }
    chmod +x "$bin/$b"
  done
  export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

k3_find_missing_libs() {
  local bin=$1 lib d
  for lib in $(ldd "$bin"/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
    d=$(find /usr /opt -name "$lib" 2>/dev/null | head -1)
    echo "library $lib: ${d:-NOT FOUND}"
    [ -n "$d" ] && export LD_LIBRARY_PATH=$(dirname "$d"):$LD_LIBRARY_PATH
  done
  return 0
}
