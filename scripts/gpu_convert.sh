#!/usr/bin/env bash
# `aka convert` acceptance on one GPU host (H200): the bundled benchmark with the offline proposer
# through the local executor, and the Llama block at its realistic size (Llama-3.1-8B dimensions,
# 512 tokens, bf16), converted, applied, checked and timed end to end (eager, torch.compile, patched;
# CUDA graph replay for all).
#
#   device: bash scripts/gpu_convert.sh MODE...      MODE: bench | llama | report | all (default all)
#   then, here: mkdir -p /tmp/gc && tar xzf <files_at>/convert.tgz -C /tmp/gc
#
# One device call runs 10 minutes at most, and the benchmark's 30 operators take several calls:
# the libraries live under $AKA_CONVERT_DIR (default .gpuconvert/, git-ignored: carry it in and
# copy the returned one back), and every call resumes where the last stopped, since `aka convert`
# skips operators its library has done and a batch cut off by the deadline keeps every finished
# result. Every step runs under `timeout` against a deadline (AKA_DEADLINE_S, default 560) so the
# archive is always written.
#
# Parallelism: one worker per visible GPU, AKA_JOBS_PER_GPU (default 4) jobs on each; their checks
# share the GPU and their timed regions take the harness's GPU lock (aka/evaluate/gpulock.py), so
# four jobs measure what one alone does (test_parallel_evaluations_measure_what_one_alone_measures).
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-560}
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export AKA_CACHE_DIR=${AKA_CACHE_DIR:-$PWD/.gpucache} HF_HUB_OFFLINE=1
mkdir -p "$AKA_CACHE_DIR"
[[ -s $AKA_CACHE_DIR/source_sha ]] && export AKA_GIT_SHA=$(cat "$AKA_CACHE_DIR/source_sha")
CONV=${AKA_CONVERT_DIR:-$PWD/.gpuconvert}; mkdir -p "$CONV"
JPG=${AKA_JOBS_PER_GPU:-4}
DEV=${AKA_CONVERT_DEVICE:-cuda}
ITERS=${AKA_CONVERT_ITERS:-6}
SHAPE=${AKA_CONVERT_SHAPE:-last}  # the benchmark's ops at one shape each: their largest prefill shape
OP_TIMEOUT=${AKA_OP_TIMEOUT_S:-400}  # one operator never takes a whole call
W=$OUT/work; mkdir -p "$W"
modes=" ${*:-all} "
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
step() {
  local log=$1; shift
  local t=$(( $(left) - 20 ))
  if (( t < 15 )); then echo "skipped (deadline): $*" | tee -a "$log"; return 124; fi
  local s=$(date +%s)
  # SIGINT first: the executor kills its workers by process group and the batch's finished
  # results are already in the library
  timeout --signal=INT --kill-after=15 "$t" "$@" >> "$log" 2>&1
  local rc=$?
  echo "[step rc=$rc wall=$(( $(date +%s) - s ))s] $*" | tee -a "$log" "$W/steps.txt"
  return $rc
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  echo "source ${AKA_GIT_SHA:-$(git rev-parse --short=12 HEAD 2>/dev/null)}"; date -u +%FT%TZ; } > "$W/provenance.txt" 2>&1

# the Llama block first: three operators and an end-to-end check, where the benchmark's batch
# can take every second the call has left
if [[ $modes == *" llama "* || $modes == *" all "* ]]; then
  F=examples.llama_block:factory:size=${AKA_LLAMA_SIZE:-realistic}   # small + AKA_CONVERT_DEVICE=cpu: the CPU check of this script
  # The knowledge base's kernels take the benchmark's signatures, not the extracted modules' (on
  # CPU the offline proposer converts silu_and_mul alone), so by default the block's RMSNorm, RoPE
  # and SiLU-and-mul get the Triton kernels of tests/fixtures/convert/kernels as scripted replies:
  # the harness still verifies and times each one. AKA_LLAMA_MODEL=anthropic:<model> (with a key
  # and network) or offline instead.
  python3 - "$W/llama_replies.json" <<'PY'
import json, sys
from pathlib import Path
k = Path("tests/fixtures/convert/kernels")
ops = ("rms_norm", "rotary_embedding", "silu_and_mul")
Path(sys.argv[1]).write_text(json.dumps({op: [f"TECHNIQUES: rowwise\n```python\n{(k / f'{op}.py').read_text()}```\n"]
                                         for op in ops}))
PY
  if [[ -n ${AKA_LLAMA_MODEL:-} ]]; then LL=(model="$AKA_LLAMA_MODEL" iters="$ITERS")
  else LL=(model="scripted:$W/llama_replies.json" iters=1 ops=rms_norm,rotary_embedding,silu_and_mul); fi  # one reply each
  step "$W/llama.log" python3 -m aka.cli convert "model:$F" library="$CONV/llama" device="$DEV" "${LL[@]}" \
    jobs-per-gpu="$JPG" timeout="$OP_TIMEOUT" retrieval.backend=files
  # the patched block against the original, within the converted ops' tolerances, then its
  # end-to-end time against eager and torch.compile of the original block (CUDA graphs for all)
  TIME=(--time); [[ $DEV == cpu ]] && TIME=()   # the end-to-end timing replays CUDA graphs
  step "$W/llama_apply.log" python3 -m aka.cli convert apply "$F" --library "$CONV/llama" --device "$DEV" \
    "${TIME[@]}" --json "$W/llama_patch.json"
fi
if [[ $modes == *" bench "* || $modes == *" all "* ]]; then
  # largest time share first (bench/weights.json), so a partial library covers the most time
  step "$W/bench.log" python3 -m aka.cli convert bench library="$CONV/bench" model=offline device=cuda \
    iters="$ITERS" shape="$SHAPE" jobs-per-gpu="$JPG" timeout="$OP_TIMEOUT"
fi
if [[ $modes == *" report "* || $modes == *" all "* || $modes == *" bench "* || $modes == *" llama "* ]]; then
  for lib in "$CONV"/bench "$CONV"/llama; do
    [[ -f $lib/fallbacks.json ]] && step "$W/report.log" python3 -m aka.cli convert report "$lib"
  done
fi
# the work logs and the libraries (kernels, results, provenance, reports, run stores without their
# candidate files); the full libraries stay in $CONV for the next call
# (not the extracted problems' recorded weights: the Llama block's come to ~345 MB, over what a call returns)
tar czf "$OUT/convert.tgz" --exclude='candidates' --exclude='weights.pt' -C "$OUT" work -C "$CONV" . 2>/dev/null \
  || tar czf "$OUT/convert.tgz" -C "$OUT" work
echo "wrote $OUT/convert.tgz ($(( $(date +%s) - T0 )) s)"
