"""kernels/softmax/dispatch picks, per shape, between the row-in-registers and the split-row
designs. Its rule is checked against what the H200 measured for the two kernels it merges
(results/kb/kernels/softmax/*.results.json, `aka kb verify --device cuda`): on every bench shape
where one was clearly faster (by more than 5%), the rule must pick that one."""
from __future__ import annotations

import importlib.util
import json
import re

import pytest

from aka.problem import REPO_ROOT

KB = REPO_ROOT / "knowledge_base" / "kernels" / "softmax"
RESULTS = REPO_ROOT / "results" / "kb" / "kernels" / "softmax"
H200_SMS = 132


def _load():
    spec = importlib.util.spec_from_file_location("softmax_dispatch", KB / "dispatch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _h200(kernel: str) -> dict:
    d = json.loads((RESULTS / f"{kernel}.results.json").read_text())["devices"]["cuda"]
    return {s["label"]: s["time_us"] for s in d["shapes"]}


def test_the_rule_picks_the_kernel_the_h200_measured_faster():
    mod = _load()
    tile, split = _h200("row_in_registers"), _h200("split_row")
    clear = 0
    for label in tile.keys() & split.keys():
        batch = int(re.search(r"batch=(\d+)", label).group(1))
        vocab = int(re.search(r"vocab=(\d+)", label).group(1))
        if max(tile[label], split[label]) < 1.05 * min(tile[label], split[label]):
            continue  # within 5%: either is fine
        clear += 1
        want_tile = tile[label] < split[label]
        assert mod.use_tile(batch, vocab, H200_SMS) == want_tile, (label, tile[label], split[label])
    assert clear >= 10  # the measurements cover the rule on most of the 14 shapes


@pytest.mark.parametrize("rows,n,sms,want", [
    (4096, 32768, 132, True), (1024, 32000, 132, True), (64, 32000, 132, False),
    (4096, 32769, 132, False),   # the padded row (65536) no longer fits
    (8, 4500, 4, True), (7, 4099, 4, False)])
def test_the_rule_at_its_edges(rows, n, sms, want):
    assert _load().use_tile(rows, n, sms) is want
