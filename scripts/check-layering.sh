#!/usr/bin/env bash
# The pure layers (encoders, SMB ABI, service logic, ftrace parsers) must not
# touch the OS, so they stay testable on a deterministic loop. This fails if
# any of them imports an OS crate or raw fds.
set -euo pipefail
cd "$(dirname "$0")/.."
pure=(src/protozero src/tracing/core src/tracing/service src/schema src/cmd/pbtx
      src/traced_probes/ftrace/parse src/report)
pattern='(\b(mio|nix|libc)::|use (mio|nix|libc)\b|std::os::(fd|unix)|extern crate (mio|nix|libc))'
bad=0
for p in "${pure[@]}"; do
    [ -e "$p" ] || continue
    if grep -rnE "$pattern" "$p" --include='*.rs'; then
        bad=1
    fi
done
if [ "$bad" != 0 ]; then
    echo "check-layering: the files above import OS code into a pure layer" >&2
    exit 1
fi
echo "check-layering: ok"
