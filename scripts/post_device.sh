#!/usr/bin/env bash
# Run here after a device call whose script packed its $OUT (device_lib.sh pack_out):
#   bash scripts/post_device.sh FILES_AT DEST
# unpacks FILES_AT/out.tgz into DEST, merges the call's baseline timings (baselines.tgz) into the
# carried cache (.gpucache/baselines), so the session's next call reuses them instead of compiling
# the references again, and keeps its kb verdicts (kbv.tgz) for the next call's scratch copy. scripts/pre_device.sh drops cached baselines older than a session (6 h):
# a speedup over torch.compile compares timings from one session's machine, not an earlier one's.
set -euo pipefail
src=${1:?FILES_AT}; dest=${2:?DEST}
cd "$(dirname "$0")/.."
mkdir -p "$dest"
tar xzf "$src/out.tgz" -C "$dest"
if [[ -f $dest/baselines.tgz ]]; then
  mkdir -p .gpucache
  tar xzf "$dest/baselines.tgz" -C .gpucache
  echo "baselines cached: $(ls .gpucache/baselines | wc -l) files"
fi
# the call's kb verdicts (kbv.tgz: results/kb files written on the device), kept for the session's next
# call: device_lib.sh kb_copy merges them into its scratch copy, so a second verify call goes on where
# the first stopped instead of verifying the same kernels again (results/h100/device-2026-12-06h, call 3)
if [[ -f $dest/kbv.tgz ]]; then
  mkdir -p .gpucache/kbv_prev/results/kb
  tar xzf "$dest/kbv.tgz" -C .gpucache/kbv_prev/results/kb
  echo "kb verdicts kept for the next call: $(find .gpucache/kbv_prev -name '*.results.json' | wc -l) files"
fi
echo "unpacked into $dest"
