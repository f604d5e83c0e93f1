#!/usr/bin/env bash
# The fixed cost of one evaluation: `aka eval OP KERNEL --shapes 0` with the judge/runner harness
# (this tree) and the single-process one (.oldaka), alternating, N times each (the first of each
# with an empty cache). Prints one line per run: harness, run, wall seconds, status.
#   usage: bash scripts/cost1.sh OUTDIR [OP] [KERNEL] [N]
set -uo pipefail
out=$1; op=${2:-rms_norm}; k=${3:-knowledge_base/kernels/rms_norm/rowwise.py}; n=${4:-3}
cd "$(dirname "$0")/.."
here=$PWD; mkdir -p "$out"
for i in $(seq 1 "$n"); do
  for h in new old; do
    if [[ $h == old ]]; then
      [[ -d .oldaka/aka ]] || continue
      dir=.oldaka; pp=$here/.oldaka${PYTHONPATH:+:$PYTHONPATH}; extra=()
    else
      dir=.; pp=$here${PYTHONPATH:+:$PYTHONPATH}; extra=(--no-peer)
    fi
    s=$EPOCHREALTIME
    (cd "$dir" && AKA_CACHE_DIR=/tmp/cost1-$h PYTHONPATH=$pp python3 -m aka.cli eval "$op" "$k" --shapes 0 ${AKA_COST1_DEVICE:+--device $AKA_COST1_DEVICE} \
      "${extra[@]}" --json "$out/cost1_${h}_$i.json" > "$out/cost1_${h}_$i.log" 2>&1)
    e=$EPOCHREALTIME
    st=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['status'])" "$out/cost1_${h}_$i.json" 2>/dev/null || echo none)
    python3 -c "import sys; print(sys.argv[1], sys.argv[2], f'{float(sys.argv[4]) - float(sys.argv[3]):.2f} s', sys.argv[5])" \
      "$h" "$i" "$s" "$e" "$st"
  done
done
