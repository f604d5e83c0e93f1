# Sourced by the one-call device scripts (gpu_session.sh, gpu_judge_accept.sh); $S is their
# results folder.
# part NAME SECONDS CMD...: the command under its own budget (0 skips it), its log in $S/NAME.log,
# one line in $S/parts.txt, the log's last lines (AKA_TAIL, default 6) on stdout.
part() {
  local name=$1 t=$2; shift 2
  if (( t <= 0 )); then echo "[$name skipped]" | tee -a "$S/parts.txt"; return 0; fi
  local s=$(date +%s)
  timeout --signal=INT --kill-after=8 "$t" "$@" > "$S/$name.log" 2>&1
  local rc=$?
  echo "[$name rc=$rc wall=$(( $(date +%s) - s ))s budget=${t}s]" | tee -a "$S/parts.txt"
  tail -${AKA_TAIL:-6} "$S/$name.log"
  return $rc
}
