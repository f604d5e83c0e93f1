"""`aka exp`: research ablations over the agent's ingredients.

    aka exp run experiments/configs/ci_tiny.yaml                 # the grid -> experiments/runs/<name>/
    aka exp run CONFIG model=openai-compat:m@http://host/v1 llm.cache_mode=off   # same grid, a provider
    aka exp probe CONFIG [--device cuda]                         # what each arm's proposer sees, nothing run
    aka exp report experiments/runs/<name>                       # REPORT.md, stats.json, plots
"""
from __future__ import annotations


def add_parser(sub) -> None:
    from aka.agent.cli import _OverrideParser
    e = sub.add_parser("exp", help="ablation experiments: run a grid of arms x operators x seeds, report it")
    esub = e.add_subparsers(dest="exp_cmd", required=True)
    r = esub.add_parser("run", help="run (or resume) an experiment grid",
                        epilog="section.key=value words override every arm's optimize config alike")
    r.__class__ = _OverrideParser
    r.add_argument("config", help="experiment YAML (experiments/configs/)")
    r.add_argument("--model", help="replace optimize.model in every arm (e.g. an LLM provider)")
    r.add_argument("--out", help="output directory (default experiments/runs/<name>)")
    r.add_argument("--no-probe", action="store_true", help="skip the round-1 hollow-arm probe (not advised)")
    r.set_defaults(func=cmd_run)
    p = esub.add_parser("probe", help="check that every arm changes what its proposer sees; runs nothing")
    p.__class__ = _OverrideParser
    p.add_argument("config")
    p.add_argument("--model")
    p.add_argument("--device", help="probe as on this device (cuda: the kb's recorded GPU results count)")
    p.set_defaults(func=cmd_probe)
    rep = esub.add_parser("report", help="statistics, plots and REPORT.md of an experiment directory")
    rep.add_argument("dir", help="the experiment's output directory")
    rep.add_argument("--baseline", help="arm the others are tested against (default: every pair)")
    rep.add_argument("--boot", type=int, default=4000, help="bootstrap resamples")
    rep.add_argument("--rebuild-table", action="store_true",
                     help="first rewrite table.csv from the run stores in runs/ (after a change to how the "
                          "table is computed; needs cells.json)")
    rep.set_defaults(func=cmd_report)


def _overrides(args) -> list[tuple[str, str]]:
    from aka.errors import UserError
    out = [("model", args.model)] if getattr(args, "model", None) else []
    for w in getattr(args, "overrides", []):
        if "=" not in w:
            raise UserError(f"unexpected argument {w!r}: overrides look like section.key=value")
        k, v = w.split("=", 1)
        out.append((k, v))
    return out


def _load(args):
    from aka.agent.config import ConfigError
    from aka.errors import UserError
    from aka.exp.config import check_distinct, load_exp
    try:
        ex = load_exp(args.config)
        ov = _overrides(args)
        check_distinct(ex, ov)
    except ConfigError as e:
        raise UserError(str(e)) from None
    return ex, ov


def cmd_run(args) -> int:
    from aka.agent.config import ConfigError
    from aka.errors import UserError
    from aka.exp.run import run_experiment
    from aka.problem import ProblemError
    ex, ov = _load(args)
    try:
        out = run_experiment(ex, overrides=ov, out=args.out, probe=not args.no_probe,
                             progress=lambda m: print(m, flush=True))
    except (ConfigError, ProblemError) as e:
        raise UserError(str(e)) from None
    print(f"table: {out / 'table.csv'}\nnext: aka exp report {out}")
    return 0


def cmd_probe(args) -> int:
    from aka.agent.config import ConfigError
    from aka.errors import UserError
    from aka.exp.probe import check_arms
    ex, ov = _load(args)
    try:
        views = check_arms(ex, ov, device=args.device)
    except ConfigError as e:
        raise UserError(str(e)) from None
    for op, by_arm in views.items():
        distinct = len(set(by_arm.values()))
        print(f"{op}: {distinct} distinct round-1 views over {len(by_arm)} arms")
    return 0


def cmd_report(args) -> int:
    from pathlib import Path

    from aka.errors import UserError
    from aka.exp.report import write_report
    d = Path(args.dir)
    if args.rebuild_table:
        import json

        from aka.exp.run import collect
        from aka.exp.table import write_table
        if not (d / "cells.json").is_file() or not (d / "runs").is_dir():
            raise UserError(f"--rebuild-table: {d} needs cells.json and runs/")
        rows = collect(d, json.loads((d / "cells.json").read_text()))
        if not rows:
            raise UserError(f"--rebuild-table: no run store under {d / 'runs'} has events")
        write_table(rows, d / "table.csv")
    if not (d / "table.csv").is_file():
        raise UserError(f"no table.csv in {d}: run `aka exp run CONFIG` first")
    path = write_report(d, baseline=args.baseline, n_boot=args.boot)
    print(f"report: {path}")
    return 0
