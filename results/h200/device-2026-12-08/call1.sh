#!/usr/bin/env bash
# The session's first call (twenty-sixth session), either card.
# 1. The judge's GPU escapes and the adversarial suite (pytest -m gpu -n 8 -v), with the host-bound candidate
#    test as mended after results/h100/device-2026-12-07g's call: the harness changes of the last two sessions
#    (the head start sized to a call's host path, the checked call's one-call graph) have had no full GPU
#    adversarial run on either card. AKA_T_PAR seconds (default 240).
# 2. On an H200, with what is left: gemm_bf16's mid-M shapes re-tuned on this card (DEEP_NARROW never ran on
#    the H200: on the H100 64x128x64 with 8 stages took M 96 from 0.86x to 0.97x of cuBLAS), the winners
#    baked into this copy (`bake_dispatch.py --merge`), the dispatch kernel beside cuBLAS on the re-tuned
#    shapes in one `aka bench run`, then its kb verify on every shape.
#    On an H100: results/h100/device-2026-12-07f/next_call.sh (fused_moe beside its peer, then call_rest).
#   here: bash scripts/pre_device.sh; device: OUT=$OUT bash results/h200/device-2026-12-08/call1.sh
#   (carry .gpucache and .whl); results in $OUT/judge.tgz and $OUT/g/out.tgz (H100: $OUT/q.tgz)
#   after: bake g/tune/tune.json here with the same flags (the same bytes: the kb verdict's source hash then
#   matches the committed kernel; g/dispatch.sha256 says which); kbv.tgz as in call_rest.sh
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-570}
AKA_T_COST=0 AKA_T_COST1=0 AKA_T_KBCOST=0 AKA_T_TIMING=0 AKA_T_KBV=0 AKA_T_PAR=${AKA_T_PAR:-240} AKA_PYTEST_N=8 \
  AKA_PAR_TESTS="tests/gpu/test_measurement_gpu.py::test_an_honest_host_bound_candidate_is_timed_on_the_gpu_and_passes_the_judges_clock tests/gpu/test_judge_gpu.py tests/test_adversarial.py" \
  OUT=$OUT bash scripts/gpu_judge_accept.sh > "$OUT/judge_accept.log" 2>&1
echo "[judge accept rc=$? $(( $(date +%s) - T0 ))s]"; grep '^\[' "$OUT/judge_accept.log"
L=$(( CALL_S - ($(date +%s) - T0) - 10 ))
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$OUT/q"
  (( L > 120 )) && AKA_CALL_S=$L AKA_MOE_S=$(( L / 2 )) OUT=$OUT/q bash results/h100/device-2026-12-07f/next_call.sh > "$OUT/q/queue.log" 2>&1
  tail -5 "$OUT/q/queue.log"; ( cd "$OUT/q" && tar czf ../q.tgz . ) && rm -rf "$OUT/q"
  echo "call wall $(( $(date +%s) - T0 ))"; exit
fi
(
  . scripts/device_lib.sh
  OUT=$OUT/g; mkdir -p "$OUT"; T0=$(date +%s); DEADLINE=$L; trap pack_out EXIT
  device_env; device_provenance > "$OUT/provenance.txt" 2>&1
  # the shapes under 0.9x of cuBLAS on 2026-12-05 (7: M 96 0.79x, 4: M 256 0.84x, 6: M 8 0.87x, 15: M 512
  # 0.90x) and M 128 beside them
  python3 scripts/gpu_tune_gemm.py "$OUT/tune" --ops gemm_bf16 --shapes 7,4,6,15,2 --deadline ${AKA_TUNE_S:-80} \
    > "$OUT/tune.log" 2>&1
  echo "[tune rc=$? $(( $(date +%s) - T0 ))s]"; tail -9 "$OUT/tune.log"
  python3 scripts/bake_dispatch.py "$OUT/tune/tune.json" --ops gemm_bf16 --merge > "$OUT/bake.log" 2>&1
  echo "[bake rc=$? $(( $(date +%s) - T0 ))s]"
  sha256sum knowledge_base/kernels/gemm_bf16/dispatch.py > "$OUT/dispatch.sha256"
  # the re-baked kernel beside cuBLAS (F.linear) in one run, on the re-tuned shapes and two prefill ones
  mkdir -p /tmp/c/gemm_bf16 "$OUT/runs"; cp knowledge_base/kernels/gemm_bf16/dispatch.py /tmp/c/gemm_bf16/
  B=$(( $(left) > 260 ? 130 : $(left) / 2 ))
  timeout --signal=INT --kill-after=10 $B python3 -m aka.cli bench run --impl peer,/tmp/c --ops gemm_bf16 \
    --shapes 7,4,6,15,2,13,11 --no-beside --timeout $(( B - 5 )) --out "$OUT/runs/gemm_bf16" > "$OUT/gemm_peer.log" 2>&1
  echo "[peer rc=$? $(( $(date +%s) - T0 ))s]"; tail -4 "$OUT/gemm_peer.log"
  kb_copy /tmp/kbv
  (( $(left) > 40 )) && KBV_BUDGET=0 kbv $(( $(left) - 15 )) 2 --op gemm_bf16
  kbv_pack
  grep -v ': deferred\|━' "$OUT/kbverify.log" | tail -6
)
echo "call wall $(( $(date +%s) - T0 ))"
