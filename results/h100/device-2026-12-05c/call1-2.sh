# 2026-12-05 (seventh session) calls 1 and 2 (call 1 had AKA_DEADLINE_S=575 AKA_OPT_WALL=530): aka optimize (offline) on gemm_bf16 and prefill_attention, shape=all, side by side; call 2 resumes both
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AKA_GIT_SHA=$(cat .gpucache/source_sha)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT AKA_DEADLINE_S=570 AKA_OPT_OPS="gemm_bf16 prefill_attention" AKA_OPT_WALL=520 AKA_OPT_ITERS=8 \
  bash scripts/gpu_optimize.sh > $OUT/opt.log 2>&1
tail -40 $OUT/opt.log; echo "wall $SECONDS"
