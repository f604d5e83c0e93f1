#!/usr/bin/env bash
# Fourteenth session, call 3 (short, the budget's rest): the first GPU run of `aka eval --ncu-stalls`
# (built in the thirteenth session, CPU-tested only), on the question it was built for: why fp8_kv's
# f16_mma (a third fewer loop instructions) runs 1.19x slower than v_words on an H100. The hypothesis
# (kernel notes): f16_mma's byte-wide shared loads (LDS.U8, twice v_words' count per tile) stall the
# warps on the shared-memory pipe (`mio_throttle`/`short_scoreboard` up in f16_mma, not in v_words).
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   AKA_DEADLINE_S=190 OUT=$OUT bash results/h100/device-2026-12-06f/call3.sh
set -uo pipefail
. scripts/device_lib.sh
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-190}
device_env; trap pack_out EXIT
device_provenance > $OUT/provenance.txt 2>&1; cat $OUT/provenance.txt
NCU_STALLS=1 NCU_TIMEOUT=$(( (DEADLINE - 15) / 2 )) bash scripts/gpu_ncu_probe.sh fp8_kv_decode_attention:v_words:2 \
  fp8_kv_decode_attention:f16_mma:2
for j in $OUT/ncu/ncu_*.json; do
  [[ -s $j ]] && python3 -c "import json,sys; from aka.evaluate.report import ncu_line
d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], [ncu_line(s['ncu']) for s in d['shapes'] if s.get('ncu')])" "$j"
done
tail -5 $OUT/ncu/*.log
echo "wall $(( $(date +%s) - T0 ))"
