"""Output comparison (aka/evaluate/compare.py): the tolerance table and every comparison mode."""
from __future__ import annotations

import math

import pytest
import torch

from aka.evaluate.compare import TOLERANCES, compare, compare_outputs, tolerance_for


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def bf16_step(t: torch.Tensor, steps: int) -> torch.Tensor:
    """Move every bf16 value `steps` ulps away from zero (bit pattern arithmetic on the magnitude)."""
    bits = t.view(torch.int16).to(torch.int32)
    return (bits + steps).to(torch.int16).view(torch.bfloat16)


def test_bf16_rounding_of_two_fp32_paths_passes():
    x = 3.0 * torch.randn(4099, generator=gen(1))
    ref = x.to(torch.bfloat16)
    # a different but correct fp32 computation: same value up to a few fp32 ulps, then rounded
    cand = (x * (1 + 3e-7) - 1e-7).to(torch.bfloat16)
    c = compare(cand, ref)
    assert c.ok and 0 < c.max_abs_err and c.rel_err < 1e-3


def test_one_ulp_on_one_percent_passes_but_on_every_element_fails_the_norm():
    # values in [1, 1.25): one bf16 ulp is 2^-7 = 0.0078, i.e. 0.62-0.78% relative
    ref = (1.0 + 0.25 * torch.rand(5000, generator=gen(2))).to(torch.bfloat16)
    idx = torch.randperm(5000, generator=gen(3))[:50]
    some = ref.clone()
    some[idx] = bf16_step(ref[idx], 1)
    c = compare(some, ref)
    assert c.ok, c.reason  # elementwise inside rtol 1.6e-2; norm error ~sqrt(1%) * 0.7% = 7e-4
    biased = bf16_step(ref, 1)
    c = compare(biased, ref)
    # each element is inside the elementwise band, but a bias on every element is caught by rel_norm
    assert not c.ok and "relative norm error" in c.reason
    assert TOLERANCES["bfloat16"]["rel_norm"] < c.rel_err < 0.0078


def test_four_ulps_on_one_percent_fails_elementwise():
    ref = (1.0 + 0.25 * torch.rand(5000, generator=gen(4))).to(torch.bfloat16)
    idx = torch.randperm(5000, generator=gen(5))[:50]
    cand = ref.clone()
    cand[idx] = bf16_step(ref[idx], 4)  # 4 * 2^-7 = 0.031 > atol 0.01 + rtol 0.016 * 1.25 = 0.03
    c = compare(cand, ref)
    assert not c.ok and "50 of 5000 elements outside" in c.reason


def test_fp32_default_is_tight():
    ref = torch.randn(1000, generator=gen(6))
    assert compare(ref * (1 + 1e-6), ref).ok
    c = compare(ref * (1 + 1e-3), ref)
    assert not c.ok


def test_nan_never_passes_where_the_reference_is_finite():
    ref = torch.randn(64, generator=gen(7))
    cand = ref.clone()
    cand[5] = float("nan")
    c = compare(cand, ref)
    assert not c.ok and "NaN/Inf" in c.reason and math.isinf(c.rel_err)
    cand[5] = float("inf")
    assert not compare(cand, ref).ok


def test_nan_matches_nan_in_the_reference():
    ref = torch.randn(16, generator=gen(8))
    ref[3] = float("nan")
    cand = ref.clone()
    assert compare(cand, ref).ok
    cand[3] = 0.0
    c = compare(cand, ref)
    assert not c.ok and "non-finite reference entries" in c.reason


def test_masked_minus_inf_must_be_matched_exactly():
    ref = torch.randn(4, 9, generator=gen(9))
    ref[:, 6:] = float("-inf")  # masked logits
    cand = ref.clone()
    assert compare(cand, ref).ok
    cand[1, 7] = -1e30
    assert not compare(cand, ref).ok
    cand[1, 7] = float("inf")
    assert not compare(cand, ref).ok


def test_exact_integers():
    ref = torch.randint(0, 50_000, (11, 7), generator=gen(10))
    assert compare(ref.clone(), ref).ok
    cand = ref.clone()
    cand[2, 3] += 1
    c = compare(cand, ref, mode="exact")
    assert not c.ok and "1 of 77 elements differ" in c.reason and c.max_abs_err == 1.0
    # integers are compared exactly even under the default mode, and the dtype must match
    assert not compare(cand, ref).ok
    c = compare(ref.to(torch.int32), ref)
    assert not c.ok and "dtype" in c.reason


def test_exact_mode_on_floats_accepts_only_identical_values():
    ref = torch.randn(32, generator=gen(11))
    assert compare(ref.clone(), ref, mode="exact").ok
    assert not compare(torch.nextafter(ref, ref + 1), ref, mode="exact").ok


def test_sorted_rows_ignores_order_within_rows_only():
    vals = torch.randn(5, 8, generator=gen(12))
    perm = vals[:, torch.randperm(8, generator=gen(13))]
    assert compare(perm, vals, mode="sorted_rows").ok
    assert not compare(perm, vals).ok
    other_row = vals.clone()
    other_row[0], other_row[1] = vals[1], vals[0]  # rows swapped: row sets differ
    assert not compare(other_row, vals, mode="sorted_rows").ok
    ids = torch.randint(0, 1000, (5, 4), generator=gen(14))
    assert compare(ids.flip(-1), ids, mode="sorted_rows").ok
    wrong = ids.flip(-1).clone()
    wrong[0, 0] += 1
    assert not compare(wrong, ids, mode="sorted_rows").ok


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="no fp8 dtype in this torch")
def test_fp8_mode_allows_one_ulp_and_rejects_two():
    ref = torch.tensor([1.0, -1.5, 3.0, 0.25] * 16).to(torch.float8_e4m3fn)
    one_ulp = torch.tensor([1.125, -1.5, 3.0, 0.25] * 16).to(torch.float8_e4m3fn)  # e4m3: 3 mantissa bits
    assert compare(one_ulp, ref, mode="fp8").ok
    two_ulp = torch.tensor([1.25, -1.5, 3.0, 0.25] * 16).to(torch.float8_e4m3fn)
    c = compare(two_ulp, ref, mode="fp8")
    assert not c.ok and "outside" in c.reason
    assert tolerance_for(torch.float8_e4m3fn) == TOLERANCES["fp8"]


def test_shape_mismatch_and_non_tensor_outputs():
    ref = torch.randn(3, 4, generator=gen(15))
    c = compare(ref.reshape(4, 3), ref)
    assert not c.ok and "shape (4, 3) != reference (3, 4)" in c.reason
    assert not compare(ref.T.contiguous(), ref).ok
    c = compare(3.0, ref)
    assert not c.ok and "not a tensor" in c.reason
    assert not compare(ref.to(torch.float64), ref).ok  # fp32 reference: an fp64 answer is a dtype error


def test_dict_outputs_by_key_with_per_output_tolerance():
    g = gen(16)
    ref = {"out": torch.randn(7, 33, generator=g).to(torch.bfloat16), "residual": torch.randn(7, 33, generator=g)}
    meta = {"tolerance": {"residual": {"atol": 1e-1, "rtol": 1e-1, "rel_norm": 1e-1}}}
    cand = {"residual": ref["residual"] * 1.01, "out": ref["out"].clone()}  # key order is free
    worst, checks = compare_outputs(cand, ref, meta)
    assert worst.ok and [n for n, _ in checks] == ["out", "residual"]
    worst, _ = compare_outputs(cand, ref, {})  # without the override 1% is far outside fp32 tolerance
    assert not worst.ok and worst.reason.startswith("output residual:")
    worst, _ = compare_outputs({"out": ref["out"], "resid": ref["residual"]}, ref, meta)
    assert not worst.ok and "output keys" in worst.reason
    worst, _ = compare_outputs({"out": ref["out"]}, ref, meta)
    assert not worst.ok and "1 outputs, reference has 2" in worst.reason


def test_tuple_outputs_with_modes_keyed_by_index():
    g = gen(17)
    vals = torch.randn(4, 6, generator=g)
    idx = torch.randint(0, 100, (4, 6), generator=g)
    meta = {"compare": {"default": "allclose", "1": "exact"}}
    assert compare_outputs((vals.clone(), idx.clone()), (vals, idx), meta)[0].ok
    bad = idx.clone()
    bad[0, 0] += 1
    worst, checks = compare_outputs((vals, bad), (vals, idx), meta)
    assert not worst.ok and "output 1" in worst.reason and checks[0][1].ok
    worst, _ = compare_outputs(vals, (vals, idx), meta)
    assert not worst.ok


def test_single_tolerance_override_applies_to_every_output():
    ref = torch.randn(50, generator=gen(18))
    meta = {"tolerance": {"atol": 2e-2, "rtol": 1e-2, "rel_norm": 2e-3}}
    close = ref + 1e-3 * torch.randn(50, generator=gen(19))
    assert compare_outputs(close, ref, meta)[0].ok
    assert not compare_outputs(close, ref, {})[0].ok


def test_error_figures():
    ref = torch.tensor([1.0, 2.0, -2.0, 4.0])
    cand = torch.tensor([1.0, 2.0, -2.0, 4.5])
    c = compare(cand, ref, tol={"atol": 1.0, "rtol": 0.0, "rel_norm": 1.0})
    assert c.ok and c.max_abs_err == pytest.approx(0.5)
    assert c.rel_err == pytest.approx(0.5 / math.sqrt(1 + 4 + 4 + 16))
    zero = torch.zeros(5)
    assert compare(zero.clone(), zero).ok
    c = compare(zero + 1e-3, zero)
    assert not c.ok and math.isinf(c.rel_err)


def test_row_band_admits_cancellation_error_but_not_a_systematic_one():
    """The outlier stage of a contraction op: an element that came out small from large terms may
    be off by rtol of its row's largest magnitude; every element off by 3 rtol still fails (norm)."""
    ref = torch.tensor([[40.0, 0.5, -1.0, 2.0], [1.0, 0.8, -0.6, 0.4]], dtype=torch.bfloat16)
    got = ref.clone()
    got[0, 1] = 0.375  # 0.125 off: 7x the element's own band, 0.2 of its row's
    assert not compare(got, ref).ok
    assert compare(got, ref, row_band=True).ok
    got2 = ref.clone()
    got2[1, 1] = 0.675  # the same 0.125 in a small row: its band stays small
    assert not compare(got2, ref, row_band=True).ok
    biased = (ref.double() * (1 + 3 * 1.6e-2)).to(torch.bfloat16)
    assert not compare(biased, ref, row_band=True).ok


def test_row_band_is_the_meta_outlier_band_and_only_in_the_outlier_stage():
    ref = torch.tensor([[40.0, 0.5, -1.0, 2.0]], dtype=torch.bfloat16)
    got = ref.clone()
    got[0, 1] = 0.375
    row = {"outliers": {"enabled": True, "band": "row"}}
    assert compare_outputs(got, ref, row, outliers=True)[0].ok
    assert not compare_outputs(got, ref, row)[0].ok                      # correctness stage
    assert not compare_outputs(got, ref, {}, outliers=True)[0].ok        # op without the band


def test_row_band_skips_non_finite_reference_entries_and_ignores_fp8_mode():
    ref = torch.tensor([[float("-inf"), 30.0, 0.5], [float("-inf"), 1.0, 0.5]])
    got = ref.clone()
    got[0, 2] = 0.2
    assert compare(got, ref, row_band=True, tol={"atol": 1e-4, "rtol": 1e-2, "rel_norm": 0.05}).ok
    got[1, 2] = 0.2
    assert not compare(got, ref, row_band=True, tol={"atol": 1e-4, "rtol": 1e-2, "rel_norm": 0.05}).ok
    q = torch.tensor([[448.0, 1.0]]).to(torch.float8_e4m3fn)
    bad = torch.tensor([[448.0, 16.0]]).to(torch.float8_e4m3fn)
    assert not compare(bad, q, mode="fp8", row_band=True).ok
