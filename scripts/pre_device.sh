#!/usr/bin/env bash
# Run here before a device call: the device's copy of the tree carries a .git that is not this
# one's, so its `git rev-parse HEAD` names the wrong commit. This writes the commit (and whether
# tracked files differ from it) into the carried cache; gpu_run.sh exports it as AKA_GIT_SHA,
# which every record's provenance uses.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpucache
# baseline timings brought back by scripts/device_between.sh serve this session's calls only
[[ -d .gpucache/baselines ]] && find .gpucache/baselines -type f -mmin +360 -delete
# so do the kb verdicts it kept (kbv_prev): a later session's verdicts are in results/kb by then
[[ -d .gpucache/kbv_prev ]] && find .gpucache/kbv_prev -type f -mmin +360 -delete
sha=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- || sha="$sha-dirty"
echo "$sha" > .gpucache/source_sha
echo "source: $sha"
