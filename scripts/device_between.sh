#!/usr/bin/env bash
# Here, between two device calls (the machine stays warm about 30 s): put the resumable state a
# call brought back into the carried cache, so the next call goes on where this one stopped, and
# record the commit. A call that packed its $OUT (device_lib.sh pack_out) brings out.tgz: it is
# unpacked under /tmp/aka-between/<call>/out/ and the archives below are looked for there too.
#   opt.tgz    `aka optimize` run stores (gpu_optimize.sh)     -> .gpucache/opt-runs
#   suite.tgz  the suite's bench run (gpu_suite.sh)              -> .gpucache/suite-run
#   baselines.tgz  eager and torch.compile timings of the references (pack_out) -> .gpucache/baselines:
#              the next call does not compile them again (fused_moe's: minutes a shape);
#              pre_device.sh drops those older than a session
#   kbv.tgz    the call's kb verdicts (results/kb files)         -> .gpucache/kbv_prev/results/kb:
#              device_lib.sh kb_copy merges them into the next call's scratch copy, so a second
#              verify call goes on where the first stopped (results/h100/device-2026-12-06h, call 3,
#              verified call 2's kernels again without them)
#
#   bash scripts/device_between.sh <files_at of the last call>
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: device_between.sh FILES_AT, the folder a run reply names as files_at}
[[ -d $src ]] || { echo "device_between: no folder $src" >&2; exit 2; }
dst=/tmp/aka-between/$(basename "$src"); rm -rf "$dst"; mkdir -p "$dst" .gpucache
if [[ -f $src/out.tgz ]]; then
  mkdir -p "$dst/out" && tar xzf "$src/out.tgz" -C "$dst/out" && echo "out.tgz -> $dst/out"
fi
pick() { local f; for f in "$src/$1" "$dst/out/$1"; do [[ -f $f ]] && { echo "$f"; return 0; }; done; return 1; }
found=0
if f=$(pick opt.tgz); then
  tar xzf "$f" -C "$dst"
  if [[ -d $dst/opt/runs ]]; then rm -rf .gpucache/opt-runs && cp -r "$dst/opt/runs" .gpucache/opt-runs; found=1
    echo "optimize runs -> .gpucache/opt-runs: $(ls .gpucache/opt-runs | tr '\n' ' ')"; fi
fi
if f=$(pick suite.tgz); then
  tar xzf "$f" -C "$dst"
  if [[ -d $dst/suite/run ]]; then rm -rf .gpucache/suite-run && cp -r "$dst/suite/run" .gpucache/suite-run; found=1
    echo "suite run -> .gpucache/suite-run ($(ls .gpucache/suite-run | wc -l) entries)"; fi
fi
if f=$(pick baselines.tgz); then
  tar xzf "$f" -C .gpucache; found=1
  echo "baselines -> .gpucache/baselines ($(ls .gpucache/baselines | wc -l) files)"
fi
if f=$(pick kbv.tgz); then
  mkdir -p .gpucache/kbv_prev/results/kb && tar xzf "$f" -C .gpucache/kbv_prev/results/kb; found=1
  echo "kb verdicts -> .gpucache/kbv_prev ($(find .gpucache/kbv_prev -name '*.results.json' | wc -l) files)"
fi
(( found )) || echo "device_between: nothing resumable in $src; unpacked what there was under $dst"
bash scripts/pre_device.sh
du -sh .gpucache | sed 's/^/carried cache: /'
