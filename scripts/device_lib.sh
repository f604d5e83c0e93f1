# Sourced by device scripts (scripts/gpu_rest.sh, gpu_finish.sh, gpu_tune_peers.sh, gpu_verify_tables.sh,
# gpu_suite.sh): what each call repeats.

# the environment a device script runs under: allocator, import path, the cache (carried in, or
# /tmp), and the source commit scripts/pre_device.sh recorded in it
device_env() {
  export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} PYTHONPATH=$PWD PYTHONUNBUFFERED=1
  # the carried cache when the tree has one: it holds the source commit (a script run without
  # AKA_CACHE_DIR recorded "source unknown", results/h100/device-2026-12-05d call A)
  local carried=/tmp/aka-cache; [[ -d $PWD/.gpucache ]] && carried=$PWD/.gpucache
  export AKA_CACHE_DIR=${AKA_CACHE_DIR:-$carried} HF_HUB_OFFLINE=1
  mkdir -p "$AKA_CACHE_DIR"
  if [[ -s $AKA_CACHE_DIR/source_sha ]]; then export AKA_GIT_SHA=$(cat "$AKA_CACHE_DIR/source_sha"); fi
}

# seconds left before the calling script's DEADLINE, counted from its T0
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }

# pytest-xdist from the carried wheels (.whl/) when the device's Python lacks it
use_xdist() {
  if ls .whl/pytest_xdist*.whl >/dev/null 2>&1 && ! python3 -c "import xdist" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/pytest_xdist*.whl .whl/execnet*.whl \
      && export PYTHONPATH=$PYTHONPATH:/tmp/site
  fi
}

# the call's provenance on stdout: GPU, driver and clocks, torch/triton/python, source commit, cores, date
device_provenance() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  echo "source ${AKA_GIT_SHA:-unknown}"; nproc; date -u +%FT%TZ
}

# the ops in the order of their suite weight (fused_moe, paged decode and gemm hold 74% of it): where a
# kb verify with a deadline should spend its time first (`--first "$KBV_ORDER"`)
KBV_ORDER=fused_moe,paged_decode_attention,gemm_bf16,fp8_block_scaled_gemm,mla_decode_attention,fused_add_rms_norm
KBV_ORDER=$KBV_ORDER,moe_sum,softcap_window_decode_attention,prefill_attention,gated_delta_rule_decode,silu_and_mul
KBV_ORDER=$KBV_ORDER,fp8_kv_decode_attention,fp8_per_token_group_quant,causal_conv1d,gelu_and_mul,qk_norm,rope_interleaved
KBV_ORDER=$KBV_ORDER,awq_w4a16_gemm,rope_neox,gated_rms_norm,silu_and_mul_fp8_quant,rms_norm,fp8_per_token_quant
KBV_ORDER=$KBV_ORDER,reshape_and_cache,fused_qkv_rope,fused_rms_norm_fp8_quant,top_k_top_p_filter,gumbel_max_sample,l2_norm

# a scratch copy of the knowledge base and its committed results, for a kb verify that must not
# write into the tree: kb_copy DIR (then --kb DIR/knowledge_base; the results land in DIR/results)
kb_copy() {
  rm -rf "$1"; mkdir -p "$1/results"; cp -r knowledge_base "$1/"; cp -r results/kb "$1/results/"
  # the session's earlier calls' verdicts (scripts/device_between.sh keeps them in the carried cache), merged
  # as collect_kbverify.py merges into the tree: is_current then skips what an earlier call verified
  if [[ -d ${AKA_CACHE_DIR:-/nonexistent}/kbv_prev/results/kb ]]; then
    python3 scripts/collect_kbverify.py prev="$AKA_CACHE_DIR/kbv_prev" --out /tmp/kbv_prev.tsv --merge \
      --into "$1/results/kb" | tail -1
  fi
  touch "$1/stamp"   # kbv_pack packs the verdicts written after this
}

# the verdicts a verify of the scratch copy (kb_copy DIR, default /tmp/kbv) wrote since kb_copy, as
# $OUT/kbv.tgz (paths under results/kb): kbv_pack [DIR]
kbv_pack() {
  local d=${1:-/tmp/kbv}
  ( cd "$d/results/kb" && find kernels -newer "$d/stamp" -type f | tar czf "$OUT/kbv.tgz" -T - )
}

# The peers' libraries from the carried wheels (.whl/) when the device lacks them: Liger (norms and
# activations) and fla-core with its one dependency einops (l2_norm, gated_rms_norm,
# gated_delta_rule_decode, causal_conv1d); their versions (or "not installed") appended to the
# provenance file: liger_install PROVENANCE LOG
liger_install() {
  local whl mod
  for pair in liger_kernel:liger_kernel einops:einops fla_core:fla; do
    whl=$(ls .whl/${pair%%:*}-*.whl 2>/dev/null | tail -1); mod=${pair##*:}
    if [[ -n $whl ]] && ! python3 -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('$mod') is None)" 2>/dev/null; then
      python3 -m pip install --no-deps --no-index -q "$whl" >> "$2" 2>&1 \
        || python3 -m pip install --no-deps --no-index -q --break-system-packages "$whl" >> "$2" 2>&1
    fi
  done
  python3 -c "from aka.peers import library_version as v; print('liger-kernel', v('liger_kernel') or 'not installed'); print('fla-core', v('fla') or 'not installed')" \
    >> "$1" 2>&1
}

# everything under $OUT as one archive, $OUT/out.tgz (the reply brings back a few files only: on
# 2026-12-06 two of ten loose files did not come back); use as `trap pack_out EXIT`
# The cache's baseline timings (eager and torch.compile of the reference, per shape and GPU model) go
# along as baselines.tgz: scripts/device_between.sh puts them into the carried cache, so the session's next
# call does not compile the references again (fused_moe's 128-expert reference: minutes per shape set)
pack_out() {
  [[ -d ${AKA_CACHE_DIR:-/nonexistent}/baselines ]] && tar czf "$OUT/baselines.tgz" -C "$AKA_CACHE_DIR" baselines
  # --anchored ./out.tgz: only this folder's own archive is left out. A bare --exclude=out.tgz matched at any
  # depth, so a script calling another that packed into a subfolder dropped the inner archive
  # (results/h200/device-2026-12-08 call 1: call_rest.sh's two kb verdicts and its log lost)
  ( cd "$OUT" && tar czf /tmp/pack_out.tgz --anchored --exclude=./out.tgz . && find . -mindepth 1 -delete \
    && mv /tmp/pack_out.tgz out.tgz )
}

# one `aka kb verify` of the scratch copy (kb_copy DIR, default /tmp/kbv) within SECONDS, the GPU and
# all shapes, its log appended to $OUT/kbverify.log: kbv SECONDS JOBS [ARGS...]; KBV_DIR overrides the copy
kbv() {
  local t=$1 j=$2 kb=${KBV_DIR:-/tmp/kbv}; shift 2
  # KBV_BUDGET=0: no deferral by a kernel's last recorded wall time (one that was measured with its
  # baselines compiled inside it: fused_moe's 773 s on the H100 deferred a verify that now needs far less)
  local budget=(--budget "$t"); [[ ${KBV_BUDGET:-1} == 0 ]] && budget=()
  timeout --signal=INT --kill-after=10 $(( t + 10 )) python3 -m aka.cli kb verify --kb "$kb/knowledge_base" \
    --device cuda --shapes all --jobs "$j" --unlock-compiles --timeout "$t" "${budget[@]}" "$@" >> "$OUT/kbverify.log" 2>&1
  echo "[kb verify $* rc=$? $(( $(date +%s) - T0 ))s]"
}

# the call's opening: environment, xdist, provenance (with the peers' library versions) and the
# measured ceilings into $OUT; sets ON_H200 (1 on an H200)
device_open() {
  device_env; use_xdist
  device_provenance > "$OUT/provenance.txt" 2>&1; liger_install "$OUT/provenance.txt" "$OUT/install.log"
  cat "$OUT/provenance.txt"
  timeout 60 python3 -m aka.cli hw calibrate > "$OUT/calibration.json" 2> "$OUT/calibration.log"
  echo "[calibrate rc=$? $(( $(date +%s) - T0 ))s]"
  ON_H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && ON_H200=1
}

# a per-call script's first line after sourcing this file: `call_begin 560` sets T0 and DEADLINE
# (AKA_DEADLINE_S, else the given seconds), uses the carried cache, packs $OUT on exit, opens the call
call_begin() {
  T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-${1:-560}}
  mkdir -p "$OUT"   # a caller's OUT=$OUT/sub (2026-12-07e call 2: call_rest.sh failed on a missing folder)
  export AKA_CACHE_DIR=$PWD/.gpucache
  trap pack_out EXIT
  device_open
}
