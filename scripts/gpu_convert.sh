#!/usr/bin/env bash
# `aka convert` on the Llama-3.1-8B-sized decoder block (examples/llama_block.py, size=realistic:
# hidden 4096, 32/8 heads of 128, MLP 14336, 512 tokens, bf16) on one device call; everything
# lands in $OUT/convert.tgz. Not yet run on a GPU.
#
#   device: bash scripts/pre_device.sh here first (records the commit), then
#           AKA_CACHE_DIR=$PWD/.gpucache bash scripts/gpu_convert.sh
#   here:   mkdir -p /tmp/gpu && tar xzf <files_at>/convert.tgz -C /tmp/gpu
#
# Steps, each under `timeout` against one deadline (AKA_DEADLINE_S after start, default 560 s:
# a device command runs 10 minutes at most), so the archive is written even when one is cut:
#   1. profile the block on the GPU (CUDA kernel time per fallback group), keep the trace,
#      print the ranked table, extract the groups as operator directories (ops/);
#   2. re-read the trace alone (the trace-file path on a real GPU trace);
#   3. convert the extracted suite through the local executor (one worker per GPU, pinned by
#      CUDA_VISIBLE_DEVICES; AKA_JOBS_PER_GPU jobs share a GPU through the GPU lock), offline
#      proposer unless AKA_CONVERT_MODEL names an LLM; a re-run skips what is done;
#   4. the library's report (coverage, converted share, estimated saving);
#   5. patch the block with the library and check it against the original (--remaining: the
#      fallbacks left afterwards).
# Steps 3-4 use convert-batch's CLI (`aka convert SUITE ...`, `aka convert report`) as agreed
# in the interface; steps 1, 2 and 5 use aka/convert/{fallbacks,extract,apply}.py.
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-560}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AKA_CACHE_DIR=${AKA_CACHE_DIR:-/tmp/aka-cache}
mkdir -p "$AKA_CACHE_DIR"
[[ -s $AKA_CACHE_DIR/source_sha ]] && export AKA_GIT_SHA=$(cat "$AKA_CACHE_DIR/source_sha")
W=$OUT/convert; mkdir -p "$W"
FACTORY=examples.llama_block:factory:size=realistic
ITERS=${AKA_CONVERT_ITERS:-6}
MODEL=${AKA_CONVERT_MODEL:-offline}
JOBS_PER_GPU=${AKA_JOBS_PER_GPU:-2}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
step() {  # step LOG CMD...: CMD with what is left of the deadline, minus a margin for packing
  local log=$1; shift
  local t=$(( $(left) - 20 ))
  if (( t < 10 )); then echo "skipped (deadline): $*" | tee -a "$log"; return 124; fi
  echo "+ $* (timeout ${t}s)" | tee -a "$log"
  timeout -k 5 "$t" "$@" 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; python -c \
  "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; date -u; } \
  > "$W/env.txt" 2>&1

step "$W/find.log" python - "$FACTORY" "$W" <<'EOF'
import json, sys, time
from pathlib import Path
from aka.convert.extract import extract
from aka.convert.fallbacks import find_model_fallbacks, table
factory, w = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
groups = find_model_fallbacks(factory, "cuda", repeats=5, trace_out=w / "block_trace.json")
print(table(groups), f"\nprofiled in {time.perf_counter() - t0:.1f} s", flush=True)
extract(groups, w / "ops", factory, on_progress=lambda n: print("extract", n, flush=True))
for g in groups:
    print(f"{g.name:<28} {g.problem_dir or 'NOT EXTRACTED: ' + str(g.error)}")
EOF

step "$W/trace.log" python -c "
import sys
from aka.convert.fallbacks import find_trace_fallbacks, table
print(table(find_trace_fallbacks(sys.argv[1])))" "$W/block_trace.json"

if [[ -d $W/ops ]]; then
  step "$W/convert.log" python -m aka.cli convert "$W/ops" --library "$W/library" executor=local \
    jobs-per-gpu="$JOBS_PER_GPU" model="$MODEL" iters="$ITERS"
  step "$W/report.log" python -m aka.cli convert report "$W/library"
  step "$W/apply.log" python -m aka.convert.apply "$FACTORY" --library "$W/library" --device cuda \
    --json "$W/apply.json" --remaining
fi
# weights.pt holds the realistic block's recorded weights (~440 MB): it stays on the device.
tar czf "$OUT/convert.tgz" --exclude=weights.pt -C "$OUT" convert
echo "wrote $OUT/convert.tgz ($(( $(date +%s) - T0 )) s)"
