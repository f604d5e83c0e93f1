#!/usr/bin/env bash
# One device call (2026-12-03, third of the session) for what the first two left: the Llama block's
# end-to-end time alone on the GPU (the library carried in .gpuconvert/llama), then side by side the
# judge's own GPU tests, the kb kernels verify did not reach (AKA_KBV_OPS) and the ablation's last cells.
# Everything comes back as $OUT/finish.tgz (on 2026-12-03 it wrote 11 files and the 3 past the device's 8
# were lost, the ablation's archive among them). The ablation beside 8 judge tests finished nothing:
# give it a call of its own (scripts/gpu_exp.sh).
#   device: AKA_T=240 AKA_PYTEST_N=8 AKA_JUDGE_TESTS="$(cat scripts/judge_tests_left.txt)" bash scripts/gpu_finish.sh     (carry .gpucache, .whl, .gpuconvert, experiments/runs/<name>)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
O=$OUT/f; mkdir -p "$O"   # everything under one folder, one archive at the end: a call returns at most 8 files
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 AKA_CACHE_DIR=$PWD/.gpucache
[[ -s .gpucache/source_sha ]] && export AKA_GIT_SHA=$(cat .gpucache/source_sha)
T=${AKA_T:-270}
. scripts/device_lib.sh
use_xdist
device_provenance > "$O/provenance.txt" 2>&1
timeout 30 python3 scripts/diag_driver.py > "$O/driver_diag.txt" 2>&1
[[ -d .gpuconvert/llama ]] && timeout --signal=INT 75 python3 -m aka.cli convert apply examples.llama_block:factory:size=realistic \
  --library .gpuconvert/llama --device cuda --time --json "$O/llama_patch.json" > "$O/llama_apply.log" 2>&1
( AKA_DEADLINE_S=$T OUT=$O/e bash scripts/gpu_exp.sh > "$O/exp_call.log" 2>&1 ) &
V=.gl/kbv3; kb_copy $V
( timeout --signal=INT $(( T - 40 )) python3 -m aka.cli kb verify --device cuda --kb $V/knowledge_base \
    --op "${AKA_KBV_OPS:-fp8_per_token_quant,qk_norm}" --shapes first --force --jobs 4 --timeout 150 > "$O/kbverify.log" 2>&1
  tar czf "$O/kbv.tgz" -C $V results ) &
read -ra JT <<< "${AKA_JUDGE_TESTS:-tests/gpu/test_judge_gpu.py}"   # a pytest argument list (node ids: "$(cat FILE)")
AKA_GPU_RESULTS=$O/gpu_results.jsonl timeout --signal=INT $(( T - 20 )) python3 -m pytest -m gpu -q -n "${AKA_PYTEST_N:-4}" \
  -p no:cacheprovider -rA --durations=20 --junitxml="$O/junit_judge.xml" "${JT[@]}" > "$O/judge.log" 2>&1
wait
tar czf "$OUT/finish.tgz" -C "$OUT" f && rm -rf "$O"
ls -la "$OUT"
