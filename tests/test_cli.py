"""The command line a user meets first: `aka eval`'s exit codes, its CPU default and piped progress,
flag defaults taken from the library, one-line errors for missing extras, table widths."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aka import cli
from aka.cli import EVAL_EXIT, main
from aka.errors import MissingExtra, UserError, require
from aka.evaluate.api import EvalConfig
from aka.evaluate.result import STATUSES
from aka.evaluate.sandbox import SandboxConfig

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VEC_ADD = HERE / "fixtures" / "problems" / "vec_add"
HONEST = HERE / "fixtures" / "candidates" / "honest"
CHEATS = HERE / "fixtures" / "candidates" / "cheats"


def test_every_verdict_has_an_exit_code_and_only_pass_is_zero():
    assert set(EVAL_EXIT) == set(STATUSES)
    assert [s for s, code in EVAL_EXIT.items() if code == 0] == ["pass"]
    assert 2 not in EVAL_EXIT.values()  # 2 stays the usage error's
    assert EVAL_EXIT["incorrect"] == EVAL_EXIT["rejected"] == 1 and EVAL_EXIT["timeout"] == EVAL_EXIT["crashed"] == 3


def test_eval_exit_codes_in_a_subprocess(tmp_path):
    """The real entry point: 1 for a rejected candidate and for an incorrect one, the JSON still written."""
    def run(cand, *extra):
        out = tmp_path / f"{cand.stem}.json"
        proc = subprocess.run([sys.executable, "-m", "aka.cli", "eval", str(VEC_ADD), str(cand), "--device", "cpu",
                               "--json", str(out), *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)
        return proc, json.loads(out.read_text())

    proc, data = run(CHEATS / "os_subprocess.py")
    assert proc.returncode == 1 and data["status"] == "rejected", proc.stderr
    proc, data = run(CHEATS / "masked_tail_dropped.py", "--shapes", "0,2")
    assert proc.returncode == 1 and data["status"] == "incorrect", proc.stderr


def test_a_worker_killed_mid_evaluation_exits_3(capsys):
    code = main(["eval", str(VEC_ADD), str(CHEATS / "illegal_memory_access.py"), "--device", "cpu", "--shapes", "0"])
    assert code == 3, capsys.readouterr()
    assert "crashed" in capsys.readouterr().out


def test_aka_failing_inside_the_harness_exits_4_with_its_traceback(monkeypatch, capsys):
    import aka.evaluate.api as api

    def broken(*a, **k):  # a fault injected in aka, not a verdict: there is no candidate result to fake
        raise RuntimeError("injected harness fault")

    monkeypatch.setattr(api, "evaluate", broken)
    code = main(["eval", str(VEC_ADD), str(HONEST / "vec_add.py"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 4 and "Traceback" in err
    assert err.strip().splitlines()[-1] == "aka: internal error, no verdict: RuntimeError: injected harness fault"


def test_cpu_default_is_the_small_shapes_said_so_with_progress_lines_when_piped(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "aka.cli", "eval", str(VEC_ADD), str(HONEST / "vec_add.py"),
                           "--device", "cpu", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert [s["id"] for s in json.loads(out.read_text())["shapes"]] == ["s0"]
    assert "small shapes (s0)" in proc.stdout and "--shapes all" in proc.stdout
    lines = proc.stderr.splitlines()
    # one line per stage and shape, heartbeats folded, each stamped with the seconds since the start
    for want in ("import", "first_call shape s0", "correctness shape s0", "outliers shape s0", "fallback"):
        assert sum(ln.endswith("] " + want) for ln in lines) == 1, proc.stderr
    assert all(ln.startswith("[") and " s] " in ln for ln in lines), proc.stderr


def test_cpu_default_without_small_shapes_runs_every_shape_and_says_so(capsys):
    """An Atrex-Bench directory has no small_shapes: all of its shapes, announced."""
    code = main(["eval", str(HERE / "fixtures" / "problems" / "atrex_fused_add_rms_norm"),
                 str(HONEST / "atrex_fused_add_rms_norm.py"), "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "every shape of atrex_fused_add_rms_norm (it lists no small_shapes)" in out


def test_a_failing_candidate_prints_no_cost_model_error(capsys):
    code = main(["eval", str(VEC_ADD), str(CHEATS / "os_subprocess.py"), "--device", "cpu", "--shapes", "all"])
    out = capsys.readouterr().out
    assert code == 1 and "rejected" in out
    assert "cost model error" not in out and "needs the real tensors" not in out


def test_eval_flag_defaults_are_the_library_defaults():
    args = cli.build_parser().parse_args(["eval", "p", "c"])
    d, box = EvalConfig(), SandboxConfig()
    assert (args.device, args.draws, args.seed, args.ncu_shape) == (d.device, d.draws, d.seed, d.ncu_shape)
    assert (not args.no_outliers, not args.no_timing, args.fresh_baselines, args.ncu) == \
        (d.outliers, d.timing, d.fresh_baselines, d.ncu)
    assert (args.timeout, args.idle_timeout) == (box.timeout_s, box.idle_timeout_s)


def test_user_error_lives_outside_the_cli_and_is_still_importable_from_it():
    assert cli.UserError is UserError
    assert not (ROOT / "aka" / "cli_more.py").exists()
    # importing the error module pulls in no part of aka's command line (the cycle it breaks)
    proc = subprocess.run([sys.executable, "-c", "import sys, aka.errors; print(sorted(m for m in sys.modules "
                           "if m.startswith('aka')))"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "['aka', 'aka.errors']", proc.stderr


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    import aka.errors
    monkeypatch.setitem(aka.errors.EXTRAS, "tenacity_not_installed_here", "llm")
    with pytest.raises(MissingExtra, match=r"pip install -e '\.\[llm\]'"):
        require("tenacity_not_installed_here", "LLM retries")
    e = MissingExtra("tenacity", "llm", "model=openai-compat:... (LLM retries)")
    assert isinstance(e, UserError) and isinstance(e, ImportError) and "\n" not in str(e)


def test_the_cli_turns_a_known_missing_module_into_one_line(monkeypatch, capsys):
    def no_chroma(args):
        raise ModuleNotFoundError("No module named 'chromadb'", name="chromadb")

    monkeypatch.setattr(cli, "cmd_hw", no_chroma)
    assert main(["hw", "show"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("aka: error: ") and "'.[kb]'" in err[0]


def test_an_unknown_missing_module_still_raises(monkeypatch):
    def broken(args):
        raise ModuleNotFoundError("No module named 'aka_internal_typo'", name="aka_internal_typo")

    monkeypatch.setattr(cli, "cmd_hw", broken)
    with pytest.raises(ModuleNotFoundError):
        main(["hw", "show"])


def test_an_llm_run_without_the_llm_extra_is_one_line_and_starts_nothing(tmp_path, monkeypatch, capsys):
    """`pip install -e .` without extras: tenacity is absent (None in sys.modules makes its import fail
    the way a missing package does), so `model=openai-compat:...` stops before a run exists."""
    for mod in ("tenacity", "aka.llm.retry", "aka.llm.factory"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    monkeypatch.setitem(sys.modules, "tenacity", None)
    code = main(["optimize", f"op={HERE / 'fixtures' / 'agent' / 'rms_norm_small'}", "device=cpu",
                 "model=openai-compat:qwen3@http://127.0.0.1:8000/v1", f"runs_dir={tmp_path}", "run_id=r", "live=off"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == ("aka: error: model=openai-compat:qwen3@http://127.0.0.1:8000/v1 (its retries) needs the "
                      "'tenacity' package, which is not installed: pip install -e '.[llm]' (or pip install 'aka[llm]')")
    assert not (tmp_path / "r").exists()


def test_an_llm_import_inside_a_run_without_the_extra_is_still_one_line(monkeypatch):
    for mod in ("tenacity", "aka.llm.retry", "aka.llm.factory"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    monkeypatch.setitem(sys.modules, "tenacity", None)
    with pytest.raises(MissingExtra, match=r"'tenacity' package.*'\.\[llm\]'"):
        from aka.llm import build_llm  # noqa: F401


def test_bench_list_piped_prints_every_op_name_whole(capsys):
    from aka.bench.suite import load_suite
    names = [p.name for p in load_suite(None, None, None).problems]
    assert max(map(len, names)) > 20  # fp8_per_token_group_quant and kin: what an 80-column layout cut
    assert main(["bench", "list"]) == 0
    out = capsys.readouterr().out
    assert all(f"│ {n} " in out for n in names) and "…" not in out


def test_table_key_column_survives_a_narrow_terminal():
    import io

    from rich.console import Console
    from rich.table import Table

    from aka.console import key_column, print_table
    names = ["fp8_per_token_group_quant", "fused_add_rms_norm_quant_fp8"]
    t = Table()
    key_column(t, "op", names)
    t.add_column("notes")
    for n in names:
        t.add_row(n, "a long free-text column that has to wrap on a narrow terminal " * 2)
    buf = io.StringIO()
    print_table(t, Console(file=buf, width=60, force_terminal=True, color_system=None))
    assert all(n in buf.getvalue() for n in names) and max(map(len, buf.getvalue().splitlines())) <= 60


def test_optimize_help_shows_the_key_value_form(capsys):
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: aka optimize op=OP [shape=SPEC] [model=SPEC]")
    assert "aka optimize op=rms_norm shape=4096x4096" in out and "also flag=VALUE" in out


def test_the_no_gpu_notice_names_the_shape_the_user_typed():
    from aka.agent.shapes import task_shapes
    from aka.problem import load_problem
    note = task_shapes(load_problem("rms_norm"), "4096x4096", "cpu", 65536).note
    assert "asked for 4096x4096 (shape id 9)" in note and "requested 9" not in note
    assert "running the small shapes s0=7x96, s1=13x333, s2=3x1000 instead" in note


@pytest.mark.parametrize("spec,sdk", [("anthropic:claude-opus-5", "anthropic"), ("openai:gpt-5.4", "openai"),
                                      ("openai-compat:qwen3@http://127.0.0.1:8000/v1", "openai")])
def test_a_missing_provider_sdk_is_named_with_its_extra(monkeypatch, spec, sdk):
    from aka.llm import check_installed
    monkeypatch.setitem(sys.modules, sdk, None)
    with pytest.raises(MissingExtra, match=rf"model={spec} needs the '{sdk}' package.*'\.\[llm\]'"):
        check_installed(spec)
    check_installed("offline")  # the offline proposer needs neither
