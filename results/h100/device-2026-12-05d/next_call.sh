# PREPARED, NOT RUN (the session's device time went on failed machine starts). For the next session:
#   here: pip download --no-deps -d .whl liger-kernel==0.8.5 fla-core==0.6.0 einops pytest-xdist execnet;
#         bash scripts/pre_device.sh; the device: this script, carrying .gpucache and .whl
# 2026-12-05 (eighth session) call B: the adversarial case that met a full GPU in call A, alone; the flex
# peers' first GPU run; the cuBLAS probe; MLA's column_split (crashed at 0 s in call A) and page_tile
# through kb verify as time allows (about 350 s: the session's device time was nearly spent)
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-350}
export AKA_CACHE_DIR=$PWD/.gpucache
. scripts/device_lib.sh; device_env; use_xdist
device_provenance > $OUT/provenance.txt 2>&1; liger_install $OUT/provenance.txt $OUT/install.log; cat $OUT/provenance.txt
timeout 60 python3 -m aka.cli hw calibrate > $OUT/calibration.json 2> $OUT/calibration.log; echo "[calibrate rc=$? $(( $(date +%s) - T0 ))s]"
AKA_GPU_RESULTS=$OUT/adv_results.jsonl timeout 90 python3 -m pytest -m gpu tests/test_adversarial.py -k single_program_grid \
  -q -p no:cacheprovider -rA --junitxml=$OUT/junit_adv.xml > $OUT/adv.log 2>&1; echo "[adversarial rc=$? $(( $(date +%s) - T0 ))s]"
AKA_GPU_RESULTS=$OUT/peers_gpu.jsonl timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_peers_gpu.py -rA > $OUT/peers_gpu.log 2>&1
echo "[peers rc=$? $(( $(date +%s) - T0 ))s]"; tail -4 $OUT/peers_gpu.log
timeout 50 python3 scripts/probe_gemm_peer.py --shapes 4,15,7,6 --out $OUT/gemm_probe.json > $OUT/gemm_probe.log 2>&1
echo "[probe rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/gemm_probe.log
kb_copy /tmp/kbv
for k in one_pass split_kv; do rm -f /tmp/kbv/knowledge_base/kernels/mla_decode_attention/$k.py; done  # only the two in question (and split_dispatch, skipped where current)
( t=$(( $(left) - 15 ))
  timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
    --op mla_decode_attention --shapes all --jobs 2 --unlock-compiles --timeout "$t" > $OUT/kbverify.log 2>&1
  echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]" ) &
wait
tar czf $OUT/kbv.tgz -C /tmp/kbv/results/kb/kernels mla_decode_attention
tail -12 $OUT/kbverify.log; echo "wall $(( $(date +%s) - T0 ))"
