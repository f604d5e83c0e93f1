#!/usr/bin/env bash
# The suite score of aka's best kernel per op (issue 21's goal): every op of the bundled benchmark,
# every shape, one candidate folder (scripts/suite_plan.py: scripts/suite_kernels.json's choices,
# else `aka kb best`'s), through the judge and runner. Resumable across device calls: the run
# directory lives in the carried cache, so the next call measures only what is missing.
# Everything lands in $OUT/suite.tgz. Then, here:
#   bash scripts/device_between.sh <files_at>   (suite.tgz's run into .gpucache/suite-run)
#   (carry .gpucache into the next call to resume; when every op is in, commit /tmp/s/suite)
#
#   device: AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT bash scripts/gpu_suite.sh
#   env: AKA_DEADLINE_S (default 560), AKA_SUITE_JOBS (default 8), AKA_SUITE_OPS (default: all),
#        AKA_SUITE_SHAPES (default all), AKA_SUITE_PEER=1 (also time each op's peer),
#        AKA_SUITE_UNLOCK (default 1: --unlock-compiles, the knowledge base's own kernels; 0: off)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-560}
. scripts/device_lib.sh
device_env
W=$OUT/suite; mkdir -p "$W"
RUN=$AKA_CACHE_DIR/suite-run
pack() {
  echo "total wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$W/steps.txt"
  [[ -d $RUN ]] && rm -rf "$W/run" && cp -r "$RUN" "$W/run"
  tar czf "$OUT/suite.tgz" -C "$OUT" suite && rm -rf "$W"
  ls -la "$OUT"
}
trap pack EXIT
device_provenance > "$W/provenance.txt" 2>&1
impls=$W/best
if [[ ${AKA_SUITE_PEER:-0} == 1 ]]; then liger_install "$W/provenance.txt" "$W/install.log"; impls="peer,$impls"; fi
# the measured ceilings, so every record carries sol_fraction_measured (once per cache)
if python3 -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  timeout 120 python3 -m aka.cli hw calibrate > "$W/calibration.json" 2> "$W/calibration.log"
  echo "[calibrate rc=$?]" | tee -a "$W/steps.txt"
fi
python3 scripts/suite_plan.py "$W/best" "$W/plan.json" ${AKA_SUITE_OPS:+--ops "$AKA_SUITE_OPS"} > "$W/plan.txt" 2>&1 \
  || { echo "suite_plan failed"; cat "$W/plan.txt"; exit 1; }
# records another card timed (the H100's run carried to an H200) are set aside, not resumed: `aka bench
# run` refuses to mix GPU models in one records file (aka/bench/run.py other_gpus)
other=$(python3 -c "import sys, torch
from aka.bench.run import other_gpus
from pathlib import Path
print(','.join(sorted(other_gpus(Path(sys.argv[1]), torch.cuda.get_device_name()))) if torch.cuda.is_available() else '')" "$RUN" 2>/dev/null)
if [[ -n $other ]]; then
  aside="$RUN.$(tr -c 'A-Za-z0-9\n' _ <<< "$other")"; rm -rf "$aside"; mv "$RUN" "$aside"
  echo "[the cached suite run was timed on $other; set aside as ${aside##*/}, a new run here]" | tee -a "$W/steps.txt"
fi
t=$(( $(left) - 30 ))
s=$(date +%s)
timeout --signal=INT --kill-after=15 "$t" python3 -m aka.cli bench run --impl "$impls" \
  ${AKA_SUITE_OPS:+--ops "$AKA_SUITE_OPS"} --shapes "${AKA_SUITE_SHAPES:-all}" --no-beside \
  --jobs "${AKA_SUITE_JOBS:-8}" --timeout "$t" --out "$RUN" $([[ ${AKA_SUITE_UNLOCK:-1} == 1 ]] && echo --unlock-compiles) \
  > "$W/run.log" 2>&1
echo "[bench run rc=$? wall=$(( $(date +%s) - s ))s]" | tee -a "$W/steps.txt"
tail -5 "$W/run.log" | tee -a "$W/steps.txt"
