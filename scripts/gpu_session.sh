#!/usr/bin/env bash
# One device call for a session with little device time: the judge's GPU acceptance (gpu_run.sh
# judge), the peers against the best kernels through the harness (gpu_peers.sh), then the three
# tuners (GEMM, attention, MoE: in-process timings, see each script). Each part has its own budget
# in seconds (AKA_T_JUDGE, AKA_T_PEERS, AKA_T_GEMM, AKA_T_ATTN, AKA_T_MOE; 0 skips it), so one that
# overruns never eats the next. $OUT gets results.tgz, peers.tgz and tune.tgz.
#   before: bash scripts/pre_device.sh
#   device: AKA_CACHE_DIR=$PWD/.gpucache bash scripts/gpu_session.sh     (carry .gpucache, .whl)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T=$OUT/tune; mkdir -p "$T"
part() {  # part NAME SECONDS CMD...
  local name=$1 t=$2; shift 2
  (( t > 0 )) || { echo "[$name skipped]" | tee -a "$T/parts.txt"; return 0; }
  local s=$(date +%s)
  timeout --signal=INT --kill-after=10 "$t" "$@" > "$T/$name.log" 2>&1
  echo "[$name rc=$? wall=$(( $(date +%s) - s ))s]" | tee -a "$T/parts.txt"
  tail -${AKA_TAIL:-14} "$T/$name.log"
}
part judge "${AKA_T_JUDGE:-200}" env AKA_DEADLINE_S=$(( ${AKA_T_JUDGE:-200} - 5 )) bash scripts/gpu_run.sh judge
part peers "${AKA_T_PEERS:-110}" env AKA_DEADLINE_S=$(( ${AKA_T_PEERS:-110} - 5 )) bash scripts/gpu_peers.sh
part gemm "${AKA_T_GEMM:-70}" python3 scripts/gpu_tune_gemm.py "$T/gemm" --deadline $(( ${AKA_T_GEMM:-70} - 8 ))
part attn "${AKA_T_ATTN:-60}" python3 scripts/gpu_tune_attn.py "$T/attn" --deadline $(( ${AKA_T_ATTN:-60} - 8 ))
part moe "${AKA_T_MOE:-40}" python3 scripts/gpu_tune_moe.py "$T/moe" --deadline $(( ${AKA_T_MOE:-40} - 8 ))
echo "session wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$T/parts.txt"
tar czf "$OUT/tune.tgz" -C "$OUT" tune && rm -rf "$T"
ls -la "$OUT"
