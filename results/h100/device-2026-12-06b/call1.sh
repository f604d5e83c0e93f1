#!/usr/bin/env bash
# Call 1 of 2026-12-06 (afternoon), on the H100: the prepared next_call.sh as it was at source
# 75285f5 (`git show 75285f5:results/h100/device-2026-12-06/next_call.sh`), with the card-independent
# steps skipped and a deadline that fit the 614 s left. Command wall 404.5 s.
AKA_SKIP="adv probe peers" AKA_DEADLINE_S=420 OUT=$OUT bash results/h100/device-2026-12-06/next_call.sh
