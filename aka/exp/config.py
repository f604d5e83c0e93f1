"""Experiment configs: YAML that composes (`extends:` a base, then small overrides), expanded into
a grid of arms x operators x seeds, each cell one `aka optimize` run under the same budget.

    extends: base.yaml                  # relative to this file; mappings merge, lists replace,
                                        # null deletes (e.g. an arm inherited from the base)
    name: tiny
    operators: [rms_norm, softmax]
    seeds: [0, 1, 2]
    budget: {rounds: 6, input_tokens: null, output_tokens: null, cost_usd: 5.0, wall_s: 900}
    optimize: {model: offline, shape: small}     # an OptimizeConfig layer under every arm
    factors: {dropout: [on, off], retrieval: [off, full]}   # crossed: 4 arms
    arms: {best_of_n: {best_of_n: true}}          # explicit arms, added to the crossed ones
    executor: {kind: local, cpu_workers: 1, jobs_per_gpu: 1, timeout_s: 3600}

`optimize.model: scripted:<replies.json>` (aka.agent.api.scripted_llm) is read relative to the
config file that names it.

An arm's keys: dropout (on/off), patience, p, retrieval (off | full | leave_op_out), best_of_n.
Settings that change nothing are errors here (patience without dropout, two arms that resolve to
the same optimize config); aka/exp/probe.py checks what the proposer sees before anything runs.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from aka.agent.config import ConfigError, OptimizeConfig, merge, set_path, validate

RETRIEVAL = ("off", "full", "leave_op_out")
ARM_KEYS = ("dropout", "patience", "p", "retrieval", "best_of_n")
TOP_KEYS = ("extends", "name", "operators", "seeds", "budget", "optimize", "factors", "arms", "executor", "out_dir")
BUDGET_KEYS = {"rounds": "iterations", "input_tokens": "max_input_tokens", "output_tokens": "max_output_tokens",
               "cost_usd": "max_cost_usd", "wall_s": "max_wall_s"}


@dataclass
class Arm:
    name: str
    dropout: bool | None = None      # None: as the base optimize layer says
    patience: int | None = None
    p: float | None = None
    retrieval: str | None = None     # off | full | leave_op_out; None: as the base says
    best_of_n: bool = False          # independent samples from the first round's context, no feedback

    def layer(self) -> dict:
        """The OptimizeConfig overrides that express this arm."""
        out: dict = {}
        d = {}
        if self.dropout is not None:
            d["enabled"] = self.dropout
        if self.patience is not None:
            d["patience"] = self.patience
        if self.p is not None:
            d["p"] = self.p
        if self.best_of_n:
            out["feedback"] = False
            d["enabled"] = False
        if d:
            out["dropout"] = d
        if self.retrieval is not None:
            out["retrieval"] = {"enabled": self.retrieval != "off", "exclude_op": self.retrieval == "leave_op_out"}
        return out

    def describe(self) -> str:
        parts = []
        if self.best_of_n:
            parts.append("best-of-N (independent samples, no feedback)")
        if self.dropout is not None:
            parts.append("dropout " + ("on" if self.dropout else "off"))
        if self.patience is not None:
            parts.append(f"patience {self.patience}")
        if self.p is not None:
            parts.append(f"p {self.p:g}")
        if self.retrieval is not None:
            parts.append(f"retrieval {self.retrieval}")
        return ", ".join(parts) or "base"


@dataclass
class ExpConfig:
    name: str
    operators: list[str]
    seeds: list[int]
    arms: list[Arm]
    budget: dict
    optimize: dict
    executor: dict
    out_dir: str | None = None            # None: experiments/runs/<name>
    files: list[str] = field(default_factory=list)  # the YAML files composed, base first
    raw: dict = field(default_factory=dict)         # the composed YAML

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def optimize_config(self, arm: Arm, op: str, seed: int, overrides: list | None = None) -> OptimizeConfig:
        """The resolved config of one cell: defaults, the base layer, the budget, the arm, then the
        command line's (dotted key, text) overrides, which apply to every arm alike."""
        cfg = OptimizeConfig()
        merge(cfg, copy.deepcopy(self.optimize), "optimize")
        merge(cfg, {"budget": {BUDGET_KEYS[k]: v for k, v in self.budget.items()}}, "budget")
        merge(cfg, arm.layer(), f"arm {arm.name}")
        for k, v in overrides or []:
            if k.split(".")[0] in ("op", "seed", "run_id", "runs_dir", "dropout", "feedback") or k == "retrieval.enabled" \
                    or k == "retrieval.exclude_op":
                raise ConfigError(f"override {k}: the grid and the arms set it")
            set_path(cfg, k, v)
        merge(cfg, {"op": op, "seed": seed, "live": "off"}, "cell")
        validate(cfg)
        return cfg

    def cells(self) -> list[tuple[Arm, str, int]]:
        return [(a, op, s) for a in self.arms for op in self.operators for s in self.seeds]


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def compose(path: Path, _seen: tuple = ()) -> tuple[dict, list[str]]:
    path = path.resolve()
    if path in _seen:
        raise ConfigError(f"{path}: extends itself (cycle {' -> '.join(map(str, _seen + (path,)))})")
    if not path.is_file():
        raise ConfigError(f"experiment config not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown} (valid: {', '.join(TOP_KEYS)})")
    model = (data.get("optimize") or {}).get("model")
    if isinstance(model, str) and model.startswith("scripted:"):
        # the replies file (aka.agent.api.scripted_llm) is relative to the config that names it
        data["optimize"]["model"] = "scripted:" + str((path.parent / model.split(":", 1)[1]).resolve())
    files = []
    if data.get("extends"):
        base, files = compose(path.parent / str(data["extends"]), _seen + (path,))
        data = deep_merge(base, {k: v for k, v in data.items() if k != "extends"})
    return data, files + [str(path)]


def _onoff(v, where: str) -> bool:
    if isinstance(v, bool):
        return v  # YAML 1.1 reads on/off as booleans
    if str(v).lower() in ("on", "true"):
        return True
    if str(v).lower() in ("off", "false"):
        return False
    raise ConfigError(f"{where}: expected on/off, got {v!r}")


def make_arm(name: str, spec: dict) -> Arm:
    if not isinstance(spec, dict):
        raise ConfigError(f"arm {name}: expected a mapping of {', '.join(ARM_KEYS)}")
    bad = sorted(set(spec) - set(ARM_KEYS))
    if bad:
        raise ConfigError(f"arm {name}: unknown key(s) {bad} (valid: {', '.join(ARM_KEYS)})")
    arm = Arm(name)
    if "dropout" in spec:
        arm.dropout = _onoff(spec["dropout"], f"arm {name}.dropout")
    if "patience" in spec:
        arm.patience = int(spec["patience"])
    if "p" in spec:
        arm.p = float(spec["p"])
    if "retrieval" in spec:
        r = str(spec["retrieval"]).replace("-", "_")
        if r not in RETRIEVAL:
            raise ConfigError(f"arm {name}.retrieval: {spec['retrieval']!r} is not one of {', '.join(RETRIEVAL)}")
        arm.retrieval = r
    if "best_of_n" in spec:
        arm.best_of_n = _onoff(spec["best_of_n"], f"arm {name}.best_of_n")
    if arm.best_of_n and arm.dropout:
        raise ConfigError(f"arm {name}: best_of_n with dropout on: dropout acts on the feedback best-of-N withholds")
    if arm.dropout is False and (arm.patience is not None or arm.p is not None):
        raise ConfigError(f"arm {name}: patience/p with dropout off change nothing")
    return arm


def _arms(data: dict) -> list[Arm]:
    arms: list[Arm] = []
    factors = data.get("factors") or {}
    if factors:
        bad = sorted(set(factors) - set(ARM_KEYS))
        if bad:
            raise ConfigError(f"factors: unknown key(s) {bad} (valid: {', '.join(ARM_KEYS)})")
        names = list(factors)
        for combo in itertools.product(*(list(factors[n]) for n in names)):
            spec = dict(zip(names, combo))
            label = "+".join(f"{n}={'on' if v is True else 'off' if v is False else v}" for n, v in spec.items())
            arms.append(make_arm(label, spec))
    for name, spec in (data.get("arms") or {}).items():
        arms.append(make_arm(str(name), spec))
    if len(arms) < 2:
        raise ConfigError("an experiment needs at least two arms (factors and/or arms)")
    names = [a.name for a in arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"arm names repeat: {dup}")
    return arms


def load_exp(path: str | Path) -> ExpConfig:
    data, files = compose(Path(path))
    for key in ("name", "operators", "seeds", "budget"):
        if not data.get(key):
            raise ConfigError(f"{path}: missing {key}")
    budget = dict(data["budget"])
    bad = sorted(set(budget) - set(BUDGET_KEYS))
    if bad:
        raise ConfigError(f"budget: unknown key(s) {bad} (valid: {', '.join(BUDGET_KEYS)})")
    if not budget.get("rounds"):
        raise ConfigError("budget.rounds is required: every run of the grid gets the same number of rounds")
    optimize = dict(data.get("optimize") or {})
    for k in ("op", "seed", "run_id", "runs_dir"):
        if k in optimize:
            raise ConfigError(f"optimize.{k} is set per cell by the grid; remove it")
    ex = ExpConfig(name=str(data["name"]), operators=[str(o) for o in data["operators"]],
                   seeds=[int(s) for s in data["seeds"]], arms=_arms(data), budget=budget, optimize=optimize,
                   executor=dict(data.get("executor") or {}), out_dir=data.get("out_dir"), files=files, raw=data)
    check_distinct(ex)
    return ex


def check_distinct(ex: ExpConfig, overrides: list | None = None) -> None:
    """Two arms that resolve to the same optimize config would measure the same thing twice."""
    seen: dict[str, str] = {}
    op, seed = ex.operators[0], ex.seeds[0]
    for arm in ex.arms:
        try:
            key = yaml.safe_dump(ex.optimize_config(arm, op, seed, overrides).to_dict(), sort_keys=True)
        except ConfigError as e:
            raise ConfigError(f"arm {arm.name}: {e}") from None
        if key in seen:
            raise ConfigError(f"arms {seen[key]} and {arm.name} resolve to the same config: one of them changes "
                              "nothing (a hollow arm is an error, not a result)")
        seen[key] = arm.name
