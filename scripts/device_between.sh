#!/usr/bin/env bash
# Here, between two device calls (the machine stays warm about 30 s): put the resumable state a
# call brought back into the carried cache, so the next call goes on where this one stopped, and
# record the commit. Knows the two resumable runs: `aka optimize` run stores (gpu_optimize.sh's
# opt.tgz -> .gpucache/opt-runs) and the suite's bench run (gpu_suite.sh's suite.tgz ->
# .gpucache/suite-run). Each tarball is also unpacked under /tmp/aka-between/<call>/ to read.
#
#   bash scripts/device_between.sh <files_at of the last call>
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: device_between.sh FILES_AT, the folder a run reply names as files_at}
[[ -d $src ]] || { echo "device_between: no folder $src" >&2; exit 2; }
dst=/tmp/aka-between/$(basename "$src"); rm -rf "$dst"; mkdir -p "$dst" .gpucache
found=0
if [[ -f $src/opt.tgz ]]; then
  tar xzf "$src/opt.tgz" -C "$dst"
  if [[ -d $dst/opt/runs ]]; then rm -rf .gpucache/opt-runs && cp -r "$dst/opt/runs" .gpucache/opt-runs; found=1
    echo "optimize runs -> .gpucache/opt-runs: $(ls .gpucache/opt-runs | tr '\n' ' ')"; fi
fi
if [[ -f $src/suite.tgz ]]; then
  tar xzf "$src/suite.tgz" -C "$dst"
  if [[ -d $dst/suite/run ]]; then rm -rf .gpucache/suite-run && cp -r "$dst/suite/run" .gpucache/suite-run; found=1
    echo "suite run -> .gpucache/suite-run ($(ls .gpucache/suite-run | wc -l) entries)"; fi
fi
(( found )) || echo "device_between: nothing resumable in $src (opt.tgz or suite.tgz); unpacked what there was under $dst"
bash scripts/pre_device.sh
du -sh .gpucache | sed 's/^/carried cache: /'
