#!/usr/bin/env bash
# Issue 21's last goal: `aka optimize` (offline proposer, no API key) on the H200 ends above its
# first candidate, on gemm_bf16 shape=all and on one attention op. Both runs go side by side (their
# timed rounds take turns under the harness's GPU lock), each with a wall budget that leaves room
# for the closing per-shape dispatch round; optionally an `aka kb verify` of some ops beside them.
# Everything lands in $OUT/opt.tgz; then, here: tar xzf <files_at>/opt.tgz -C results/h200/<dir>.
#
#   device: AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT bash scripts/gpu_optimize.sh
# The run stores live in the carried cache ($AKA_CACHE_DIR/opt-runs), so a later call resumes each
# run (`aka optimize resume=...`, this call's wall on top of the run's) where the last call's deadline cut it: a
# gemm_bf16 round with its confirmation took 300 s of a 500 s budget on the H100 (2026-12-05), and
# the closing dispatch round did not fit. Between calls, here:
#   bash scripts/device_between.sh <files_at>   (opt.tgz's run stores into .gpucache/opt-runs)
#
#   env: AKA_DEADLINE_S (default 520), AKA_OPT_OPS (default "gemm_bf16 prefill_attention"),
#        AKA_OPT_WALL (each run's wall in this call: budget.max_wall_s, on a resume the run's wall
#        so far plus this, default 330), AKA_OPT_ITERS (default 12),
#        AKA_OPT_KBV_OPS (comma list: also `aka kb verify` these ops, timings on, in a scratch copy)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-520}
. scripts/device_lib.sh
device_env
W=$OUT/opt; mkdir -p "$W"
RUNS=$AKA_CACHE_DIR/opt-runs; mkdir -p "$RUNS"
pack() {
  echo "total wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$W/steps.txt"
  rm -rf "$W/runs" && cp -r "$RUNS" "$W/runs"
  tar czf "$OUT/opt.tgz" -C "$OUT" opt && rm -rf "$W"
  ls -la "$OUT"
}
trap pack EXIT
device_provenance > "$W/provenance.txt" 2>&1
# a kb verify's results carry sol_fraction_measured (what `aka kb best` reports on large shapes)
# only when the cache holds a calibration: take one first (about 30 s), as gpu_suite.sh does
if [[ -n ${AKA_OPT_KBV_OPS:-} ]] && python3 -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  timeout 120 python3 -m aka.cli hw calibrate > "$W/calibration.json" 2> "$W/calibration.log"
  echo "[calibrate rc=$?]" >> "$W/steps.txt"
fi
pids=()
for op in ${AKA_OPT_OPS:-gemm_bf16 prefill_attention}; do
  (
    s=$(date +%s)
    wall=${AKA_OPT_WALL:-330}
    # a run timed on another card (the H100's run carried to an H200) is set aside, not resumed:
    # `aka optimize resume=` refuses to compare times across devices (aka/agent/cli.py check_same_hardware)
    if [[ -f $RUNS/optimize-$op/events.jsonl ]]; then
      other=$(python3 -c "import sys
from aka.agent.cli import hardware_in_hand
from aka.agent.store import RunStore
from aka.evaluate.api import resolve_device
ran, here = RunStore.open(sys.argv[1], sys.argv[2]).measured_on(), hardware_in_hand(resolve_device(None))
print(ran if ran and ran != here else '')" "$RUNS" "optimize-$op" 2>/dev/null)
      if [[ -n $other ]]; then
        aside="$RUNS/optimize-$op.$(tr -c 'A-Za-z0-9\n' _ <<< "$other")"; rm -rf "$aside"
        mv "$RUNS/optimize-$op" "$aside"
        echo "[optimize $op: the cached run was timed on $other; set aside as ${aside##*/}, a new run here]" >> "$W/steps.txt"
      fi
    fi
    if [[ -f $RUNS/optimize-$op/events.jsonl ]]; then   # a cut-off run: go on, with this call's wall on top
      how="resume=optimize-$op"                          # of what the run has used (the budget is the run's)
      wall=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1])).get('wall_s', 0) + $wall))" \
               "$RUNS/optimize-$op/totals.json" 2>/dev/null || echo "$wall")
    else how="op=$op shape=all model=offline run_id=optimize-$op"; fi
    timeout --signal=INT --kill-after=15 $(( $(left) - 20 )) python3 -m aka.cli optimize $how \
      iters="${AKA_OPT_ITERS:-12}" runs_dir="$RUNS" live=off \
      budget.max_wall_s="$wall" > "$W/optimize-$op.log" 2>&1
    echo "[optimize $op rc=$? wall=$(( $(date +%s) - s ))s ${how%% *} max_wall_s=$wall]" >> "$W/steps.txt"
  ) &
  pids+=($!)
done
if [[ -n ${AKA_OPT_KBV_OPS:-} ]]; then
  (
    s=$(date +%s); kb_copy /tmp/kbv
    t=$(( $(left) - 20 ))
    timeout --signal=INT --kill-after=15 "$t" python3 -m aka.cli kb verify --device cuda --kb /tmp/kbv/knowledge_base \
      --op "$AKA_OPT_KBV_OPS" --shapes all --jobs 2 --timeout "$t" --budget $(( t - 10 )) --unlock-compiles > "$W/kbverify.log" 2>&1
    echo "[kb verify rc=$? wall=$(( $(date +%s) - s ))s ops $AKA_OPT_KBV_OPS]" >> "$W/steps.txt"
    mkdir -p "$W/kbv"
    for op in ${AKA_OPT_KBV_OPS//,/ }; do cp -r "/tmp/kbv/results/kb/kernels/$op" "$W/kbv/" 2>/dev/null; done
  ) &
  pids+=($!)
fi
wait "${pids[@]}"
for f in "$W"/optimize-*.log; do echo "== $f"; tail -15 "$f"; done
