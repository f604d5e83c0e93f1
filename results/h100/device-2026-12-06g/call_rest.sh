#!/usr/bin/env bash
# A call (either card): kb verify of the kernels with no verdict on this card, the ones that can move an
# issue figure first: mla_decode_attention/page_tile (1.31x split_dispatch on the H100; MLA is issue 21's
# 0.28 of the measured ceiling) and the memory-bound ops whose H200 best is slower than torch.compile at a
# large shape while a newer kernel beat compile on the H100 (softmax dispatch 1.15x, causal_conv1d
# pair_words 1.28x, top_k_top_p_filter tail_scatter; issue 20's "faster than compile at large shapes").
#   OUT=$OUT bash results/h100/device-2026-12-06g/call_rest.sh   (carry .gpucache and .whl)
#   AKA_FIRST_OPS=a,b puts those ops' kernels before the list below
#   after: untar out.tgz; mkdir -p /tmp/kbvN/results/kb && tar xzf <folder>/kbv.tgz -C /tmp/kbvN/results/kb
#   python scripts/collect_kbverify.py callN=/tmp/kbvN --since <start> --out <folder>/kbverify.tsv --merge
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
kb_copy /tmp/kbv
FIRST=${AKA_FIRST_OPS:+$AKA_FIRST_OPS,}mla_decode_attention,softmax,causal_conv1d,top_k_top_p_filter,rms_norm,silu_and_mul,gelu_and_mul
FIRST=$FIRST,gated_rms_norm,l2_norm,qk_norm,fused_qkv_rope,moe_sum,layer_norm,fused_add_rms_norm,$KBV_ORDER
kbv $(( $(left) - 25 )) 4 --first "$FIRST" --missing-first
kbv_pack
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -40
echo "wall $(( $(date +%s) - T0 ))"
