#!/usr/bin/env bash
# aka's best knowledge-base kernel per op against the op's production peer (meta.json `peer`), on
# the op's large shapes, in one device call. Everything lands in $OUT/peers.tgz; then, here:
#   mkdir -p /tmp/peers && tar xzf <files_at>/peers.tgz -C /tmp/peers
#   python -m aka.cli bench peers /tmp/peers/runs/* --out results/h200/peers/PEERS.md --readme bench/README.md
#
#   device: bash scripts/gpu_peers.sh            (AKA_DEADLINE_S, default 150; AKA_PEER_JOBS, default 6;
#   AKA_PEER_OPS=a,b: those ops only; AKA_PEER_SHAPES="a=2,3;b=1": those ops' shapes in place of the plan's;
#   AKA_PEER_KERNEL_ONLY=1: the kernels alone, no peer in their rounds;
#   AKA_PEER_UNLOCK=1: the knowledge-base kernels' Triton compiles let the GPU lock go, `bench run
#   --unlock-compiles`, so one op's compiles do not hold up another op's timing; in
#   results/h100/device-2026-12-07d call 1, four ops at once, the kernels never reached their timing)
#   CPU test: AKA_PEER_SMALL=1 AKA_DEADLINE_S=900 OUT=/tmp/o bash scripts/gpu_peers.sh   (small shapes,
#   the interpreter: correctness only, the peers that run on a CPU checked, no times)
#
# Liger (the norm and activation peers) is installed from .whl/liger_kernel-*.whl when the tree
# carries it (pure Python; torch and triton are the device's). Each op is its own `aka bench run
# --impl peer,<kernels> --no-beside` (its large shapes differ from the next op's), AKA_PEER_JOBS at a
# time, every one under `timeout` against the deadline; their timings take turns under the GPU
# lock. Records are written as each op finishes, so a run cut short keeps what it finished, and a
# later call with the same AKA_CACHE_DIR carried in (peer_runs/) measures only what is missing.
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-150}
JOBS=${AKA_PEER_JOBS:-6}
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export AKA_CACHE_DIR=${AKA_CACHE_DIR:-/tmp/aka-cache}
mkdir -p "$AKA_CACHE_DIR"
# the commit scripts/pre_device.sh recorded (the device's .git is not ours), from this cache or the carried one
for f in "$AKA_CACHE_DIR/source_sha" .gpucache/source_sha; do
  [[ -s $f ]] && { export AKA_GIT_SHA=$(cat "$f"); break; }
done
W=$OUT/work; mkdir -p "$W/runs"
# resume: the runs of an earlier call, carried in ($AKA_CACHE_DIR/peer_runs), continue where they stopped
[[ -d $AKA_CACHE_DIR/peer_runs ]] && cp -r "$AKA_CACHE_DIR/peer_runs/." "$W/runs/"
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
pack() {
  echo "total wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$W/steps.txt"
  rm -rf "$AKA_CACHE_DIR/peer_runs"; cp -r "$W/runs" "$AKA_CACHE_DIR/peer_runs" 2>/dev/null
  python3 -m aka.cli bench peers "$W"/runs/*/ --out "$W/PEERS.md" > "$W/peers_table.log" 2>&1
  tar czf "$OUT/peers.tgz" -C "$W" . && rm -rf "$W"
  ls -la "$OUT"
}
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  echo "source ${AKA_GIT_SHA:-$(git rev-parse --short=12 HEAD 2>/dev/null)}"; date -u +%FT%TZ; } > "$W/provenance.txt" 2>&1
. scripts/device_lib.sh
liger_install "$W/provenance.txt" "$W/install.log"
plan_flags=""; run_flags=""
[[ -n ${AKA_PEER_SMALL:-} ]] && { plan_flags="--small"; run_flags="--device cpu"; }
timeout "$(( $(left) - 20 ))" python3 scripts/peer_plan.py "$W/kb-best" "$W/plan.json" $plan_flags \
  ${AKA_PEER_OPS:+--ops $AKA_PEER_OPS} ${AKA_PEER_SHAPES:+--shapes "$AKA_PEER_SHAPES"} > "$W/plan.txt" 2> "$W/plan.err"
echo "[plan rc=$? wall=$(( $(date +%s) - T0 ))s] $(wc -l < "$W/plan.txt") ops" | tee -a "$W/steps.txt"
# AKA_PEER_KERNEL_ONLY=1: the kernels without their peers (a diagnosis: what the peer in the rounds changes)
IMPLS="peer,$W/kb-best"; [[ -n ${AKA_PEER_KERNEL_ONLY:-} ]] && IMPLS="$W/kb-best"
one() {  # one op: its large shapes, the peer and the kernel, timed in the same rounds
  local op=$1 shapes=$2 t=$(( $(left) - 15 ))
  if (( t < 10 )); then echo "skipped (deadline): $op" | tee -a "$W/steps.txt"; return 0; fi
  local s=$(date +%s)
  timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli bench run --impl "$IMPLS" --ops "$op" \
    --shapes "$shapes" --no-beside --timeout "$t" --out "$W/runs/$op" $run_flags ${AKA_PEER_UNLOCK:+--unlock-compiles} > "$W/runs/$op.log" 2>&1
  echo "[$op rc=$? wall=$(( $(date +%s) - s ))s shapes $shapes]" | tee -a "$W/steps.txt"
}
while read -r op shapes; do
  [[ -z $op ]] && continue
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
  one "$op" "$shapes" &
done < "$W/plan.txt"
wait
