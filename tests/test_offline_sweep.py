"""experiments/offline_sweep.py's tables (the GPU run itself needs a GPU)."""
import importlib.util

from aka.problem import REPO_ROOT


def _sweep():
    spec = importlib.util.spec_from_file_location("offline_sweep", REPO_ROOT / "experiments" / "offline_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tables_judge_large_shapes_against_the_measured_ceiling_and_compile(tmp_path):
    sw = _sweep()
    shapes = [{"sol_us": 40.0, "sol_fraction_measured": 0.93}, {"sol_us": 12.0, "sol_fraction_measured": 0.87},
              {"sol_us": 2.0, "sol_fraction_measured": 0.10}]  # the small one is launch-bound: not judged
    rows = [
        {"op": "b_op", "eager": 0.1, "compile": 0.50, "best_kb_untuned": 0.55, "best_kb_kernel": "k1",
         "best_kb_shapes": shapes, "offline_tuned": 0.60, "optimize_rc": 0},
        {"op": "a_op", "eager": 0.1, "compile": 0.50, "best_kb_untuned": 0.45, "best_kb_kernel": "k2",
         "best_kb_shapes": shapes, "offline_tuned": None, "optimize_rc": None},  # not tuned: KB table only
    ]
    sw.write_tables(rows, tmp_path, "provenance line")
    kb = (tmp_path / "kb_best.md").read_text().splitlines()
    a_line = next(line for line in kb if line.startswith("| a_op"))
    b_line = next(line for line in kb if line.startswith("| b_op"))
    assert "| 2 | 0.90, 0.87 | 0.90 | no |" in a_line  # slower than compile on the weighted set
    assert "| 2 | 0.90, 0.87 | 1.10 | yes |" in b_line
    sweep = (tmp_path / "offline_sweep.md").read_text()
    assert "| b_op | 0.100 | 0.500 | 0.550 (k1) | 0.600 | 1.20 |" in sweep and "a_op" not in sweep
    assert "provenance line" in sweep and kb.index(a_line) < kb.index(b_line)  # sorted by op
