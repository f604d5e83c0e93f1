#!/usr/bin/env bash
# One device call: tune an attention op's dispatch kernel (scripts/gpu_tune_attn.py, alone on the
# GPU), bake the winners into this copy of the kernel (scripts/bake_dispatch_attn.py), then judge
# the baked kernel through the harness (`aka kb verify --device cuda --shapes all`, in a scratch copy
# of the knowledge base) with the measured ceilings of `aka hw calibrate`, optionally beside other
# ops' kernels whose verdicts are stale or missing. Everything lands in $OUT/abv.tgz; then, here:
#   tar xzf <files_at>/abv.tgz -C /tmp && python scripts/bake_dispatch_attn.py /tmp/abv/attn/tune_attn.json
#   (the same bake of the same JSON gives the file the harness judged: abv/baked.sha256 says so)
#
#   device: AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT bash scripts/gpu_attn_bake_verify.sh
#   env: AKA_DEADLINE_S (default 430), AKA_ABV_OPS (tuned ops, default paged_decode_attention),
#        AKA_ABV_TUNE_S (tuner deadline, default 100), AKA_ABV_KBV_OPS (more ops to kb verify),
#        AKA_ABV_REJUDGE (comma list op/kernel: drop its cuda record in the scratch copy first, so a
#        kernel whose code is unchanged is judged again, e.g. after a harness change)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-430}
OPS=${AKA_ABV_OPS:-paged_decode_attention}
. scripts/device_lib.sh
device_env
W=$OUT/abv; mkdir -p "$W"
pack() {
  echo "total wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$W/steps.txt"
  tar czf "$OUT/abv.tgz" -C "$OUT" abv && rm -rf "$W"
  ls -la "$OUT"
}
trap pack EXIT
device_provenance > "$W/provenance.txt" 2>&1

s=$(date +%s)
timeout $(( ${AKA_ABV_TUNE_S:-100} + 40 )) python3 scripts/gpu_tune_attn.py "$W/attn" --ops "$OPS" \
  --deadline "${AKA_ABV_TUNE_S:-100}" > "$W/tune.log" 2>&1
echo "[tune rc=$? wall=$(( $(date +%s) - s ))s ops $OPS]" | tee -a "$W/steps.txt"
python3 scripts/bake_dispatch_attn.py "$W/attn/tune_attn.json" >> "$W/steps.txt" 2>&1 \
  && sha256sum knowledge_base/kernels/*/{split_dispatch,flash_dispatch}.py > "$W/baked.sha256"

timeout 120 python3 -m aka.cli hw calibrate > "$W/calibration.json" 2> "$W/calibration.log"
echo "[calibrate rc=$?]" | tee -a "$W/steps.txt"

kb_copy /tmp/kbv
for ok in ${AKA_ABV_REJUDGE//,/ }; do
  python3 - "/tmp/kbv/results/kb/kernels/$ok.results.json" <<'P'
import json, sys
d = json.load(open(sys.argv[1])); d["devices"].pop("cuda", None); json.dump(d, open(sys.argv[1], "w"), indent=2)
P
done
ops="${AKA_ABV_KBV_OPS:+$AKA_ABV_KBV_OPS,}${OPS// /,}"
t=$(( $(left) - 20 ))
timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
  --op "$ops" --first "$ops" --shapes all --jobs 2 --timeout "$t" --budget $(( t - 10 )) > "$W/kbverify.log" 2>&1
echo "[kb verify rc=$? ops $ops]" | tee -a "$W/steps.txt"
mkdir -p "$W/kbv"
for op in ${ops//,/ }; do cp -r "/tmp/kbv/results/kb/kernels/$op" "$W/kbv/"; done
