#!/usr/bin/env bash
# The H200 ablation grid (experiments/configs/h200_dropout_retrieval.yaml) in one device call,
# resumable across calls; everything lands in $OUT/exp.tgz (the device returns at most 8 files).
#
#   before: bash scripts/pre_device.sh            (records the commit for the runs' provenance)
#   device: AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT bash scripts/gpu_exp.sh [CONFIG]   (carry .gpucache
#           and experiments/runs/<name> from the previous call's archive to resume)
#   here:   tar xzf <files_at>/exp.tgz -C . && aka exp report experiments/runs/<name>
#
# Device time: the config's header estimates ~29 min on one H200 at 8 jobs per GPU, ~8 min on
# nvidia-h200-x4. One call runs at most 10 minutes, so `aka exp run` runs under a deadline
# (AKA_DEADLINE_S, default 540 s); a cut-off cell resumes from its run store on the next call,
# finished cells are not run again. The probe runs first: a hollow arm stops the call in seconds.
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
CONFIG=${1:-experiments/configs/h200_dropout_retrieval.yaml}
NAME=$(PYTHONPATH=$PWD python3 -c "import sys; from aka.exp.config import load_exp; print(load_exp(sys.argv[1]).name)" "$CONFIG") || exit 2
EXP=experiments/runs/$NAME
DEADLINE=${AKA_DEADLINE_S:-540}
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export AKA_CACHE_DIR=${AKA_CACHE_DIR:-/tmp/aka-cache} HF_HUB_OFFLINE=1
mkdir -p "$AKA_CACHE_DIR" "$EXP" "$OUT"
[[ -s $AKA_CACHE_DIR/source_sha ]] && export AKA_GIT_SHA=$(cat "$AKA_CACHE_DIR/source_sha")
T0=$(date +%s)
# aka.cli.main rather than `python -m aka.cli`: run as __main__, its UserError is another class
# than the one subcommands raise, and a bad input would print a traceback instead of one line
AKA=(python3 -c 'import sys; from aka.cli import main; sys.exit(main(sys.argv[1:]))')
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  echo "source ${AKA_GIT_SHA:-unknown}"; date -u +%FT%TZ; } >> "$EXP/provenance.txt" 2>&1
"${AKA[@]}" exp probe "$CONFIG" --device cuda > "$EXP/probe.log" 2>&1 || { cat "$EXP/probe.log"; exit 2; }
left=$(( DEADLINE - ($(date +%s) - T0) - 60 ))   # 60 s kept for the report and the archive
if (( left < 30 )); then
  echo "no time left for exp run (${left}s)" | tee -a "$EXP/run.log"; rc=124
else
  # SIGINT: the executor's ^C path kills its workers by process group (their children die with them)
  timeout --signal=INT --kill-after=20 "$left" "${AKA[@]}" exp run "$CONFIG" --out "$EXP" >> "$EXP/run.log" 2>&1
  rc=$?
fi
echo "[exp run rc=$rc wall=$(( $(date +%s) - T0 ))s] (124: deadline; call again to resume)" | tee -a "$EXP/run.log"
timeout 50 "${AKA[@]}" exp report "$EXP" >> "$EXP/run.log" 2>&1 || echo "report: not written (rc=$?)" >> "$EXP/run.log"
tar czf "$OUT/exp.tgz" "$EXP" "$AKA_CACHE_DIR" 2>/dev/null
ls -la "$OUT"
