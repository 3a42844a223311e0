#!/usr/bin/env bash
# Builds the native code (only when its sources changed: the N-API addons and
# the static in-sandbox agent, both from binding.gyp) and the TypeScript tree
# (incremental).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[build] $*" >&2; }

native_hash=$( (cat binding.gyp; find native -type f \( -name '*.c' -o -name '*.h' -o -name '*.gyp*' -o -name Makefile \) | sort | xargs cat) | sha256sum | cut -d' ' -f1)
stamp=build/.strata-native-hash
if [ ! -f build/Release/strata_native.node ] || [ ! -f build/Release/fuse_native.node ] || [ ! -f build/Release/strata-agent ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$native_hash" ]; then
  say "building native addon and agent (node-gyp)"
  npx --no-install node-gyp rebuild --loglevel=error >&2
  echo "$native_hash" > "$stamp"
fi

say "compiling TypeScript"
npx --no-install tsc -p tsconfig.json
chmod +x bin/strata.js
