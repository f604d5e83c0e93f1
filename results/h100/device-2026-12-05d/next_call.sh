# PREPARED, NOT RUN on 2026-12-05. Superseded by results/h100/device-2026-12-06/next_call.sh, which
# holds all of its steps (the adversarial case alone, the flex and fla peers on the GPU, the cuBLAS
# probe, kb verify with MLA first) and packs the verify's records.
