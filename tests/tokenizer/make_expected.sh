#!/usr/bin/env bash
# Reference ids from the real tiktoken for tiktoken_compare_test: installs the npm package
# (pinned) under OUT_DIR and runs make_expected.cjs over corpus.json. Cached: a rerun with the
# same corpus, scripts and version does nothing; npm's cache makes a reinstall quick.
# Usage: make_expected.sh OUT_DIR
# Exit 0: OUT_DIR/expected.tsv is current. Exit 2: node/npm or the package is unavailable (the
# reason is in OUT_DIR/unavailable.txt; the test skips). Anything else is a real failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: make_expected.sh OUT_DIR}"
version=1.0.22
mkdir -p "$out"
if command -v flock >/dev/null; then  # ctest may run several test cases at once
  exec 9>"$out/.lock"
  flock 9
fi
key="$(cat "$here/corpus.json" "$here/make_expected.cjs" "$here/make_expected.sh" | sha256sum | cut -d' ' -f1)-$version"
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$key" ]]; then exit 0; fi
rm -f "$out/stamp" "$out/unavailable.txt" "$out/expected.tsv"

unavailable() { echo "$*" > "$out/unavailable.txt"; echo "make_expected.sh: $*" >&2; exit 2; }
command -v node >/dev/null || unavailable "node is not installed"
command -v npm >/dev/null || unavailable "npm is not installed"
pkg="$out/npm/node_modules/tiktoken"
if ! node -e "process.exit(require('$pkg/package.json').version === '$version' ? 0 : 1)" 2>/dev/null; then
  npm install --prefix "$out/npm" --no-audit --no-fund --no-save --no-package-lock \
      --prefer-offline --fetch-retries=1 "tiktoken@$version" >"$out/npm.log" 2>&1 ||
    unavailable "npm install tiktoken@$version failed (log: $out/npm.log)"
fi
node "$here/make_expected.cjs" "$pkg" "$here/corpus.json" "$out"
echo "$key" > "$out/stamp"
