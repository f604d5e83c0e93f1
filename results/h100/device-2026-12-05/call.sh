# this session's device call on an H100 (2026-12-05, no kb verify: its verdicts are the H200's: MLA page_tile A/B first, alone on the GPU); copied into results/h200/<dir>/ with its output
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 190 python3 scripts/gpu_tune_attn.py $OUT/mla_tune --ops mla_decode_attention --kernels split_dispatch,page_tile --shapes 4,6,0,3,13,2,5 --max-configs 3 --deadline 175 > $OUT/mla_tune.log 2>&1; tail -40 $OUT/mla_tune.log
D=$((${T:-578} - SECONDS)); echo "deadline $D"
( (timeout 170 python3 -m pytest -q -m gpu tests/test_gpulock.py tests/test_ncu_confine.py -p no:cacheprovider -rA > $OUT/gputests.log 2>&1; echo "rc=$?" >> $OUT/gputests.log)
timeout 60 python3 scripts/probe_conv1d.py $OUT/probe --shapes 11,3 > $OUT/probe.log 2>&1
AKA_CACHE_DIR=$PWD/.gpucache NCU_OUT=$OUT/ncu NCU_TIMEOUT=120 bash scripts/gpu_ncu_probe.sh causal_conv1d:time_loop:11 paged_decode_attention:split_dispatch:0 mla_decode_attention:split_dispatch:4 mla_decode_attention:page_tile:4
 cd $OUT && tar czf ncu.tgz ncu probe probe.log gputests.log && rm -rf ncu probe) &
AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT AKA_DEADLINE_S=$D AKA_VT_TUNE_S=0 AKA_VT_PARTS="" AKA_VT_KBV_JOBS=4 \
  AKA_VT_KBV_OPS= \
  AKA_VT_ADV_N=6 AKA_VT_ADV_K="$(cat .gpucache/adv_k.txt)" bash scripts/gpu_verify_tables.sh
wait
