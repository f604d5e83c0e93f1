"""Typed configuration of `aka optimize`, one dataclass per component.

Defaults are documented where they are declared; configs/optimize.yaml mirrors them (a test keeps
the two equal). Layers apply in order: defaults, then each `--config` YAML file, then CLI flags
and `section.key=value` words. The resolved config is saved as `runs/<id>/config.yaml`.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml


class ConfigError(ValueError):
    """A bad key or value in a config file or override; the message names it."""


@dataclass
class BudgetConfig:
    iterations: int = 20                  # rounds; each round proposes `n` candidates
    max_calls: int | None = None          # LLM calls
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_cost_usd: float | None = 20.0     # a guard against a runaway loop, not a target
    max_wall_s: float | None = None       # whole run, evaluations included (resumes add up); no round starts that would pass it


@dataclass
class StopConfig:
    target_sol: float | None = None       # GPU: stop once the objective (geomean sol_fraction) reaches it
    stall_rounds: int = 12                # stop after this many rounds without an accepted improvement
    cpu_stop_on_pass: bool = True         # CPU: pass rate 1.0 is the ceiling; nothing more can be measured


@dataclass
class DropoutConfig:
    enabled: bool = True
    patience: int = 3                     # rounds without an accepted improvement before a dropout
    fresh_context: bool = True            # restart the conversation from a compact summary
    drop_techniques: bool = True          # forget each previously used technique with probability p
    drop_hints: bool = True               # withhold each previously retrieved KB hint with probability p
    p: float = 0.5
    restart_parent: bool = False          # next parent: a passing non-incumbent candidate
    restart_top_k: int = 3                # ... drawn from the best k of them


@dataclass
class LLMConfig:
    max_tokens: int = 16384
    temperature: float = 0.7
    timeout_s: float = 600.0              # one HTTP request
    base_url: str | None = None           # a proxy or a local server; keys come from the environment only
    cache_dir: str | None = None          # None: $AKA_CACHE_DIR/llm (default ~/.cache/aka/llm)
    cache_mode: str = "use"               # use | refresh | off
    retry_attempts: int = 6
    retry_base_delay_s: float = 1.0
    retry_max_delay_s: float = 60.0
    history_rounds: int = 4               # exchanges kept in the conversation besides the task


@dataclass
class EvalSettings:
    device: str = "auto"                  # auto | cuda | cpu (auto: cuda when visible)
    draws: int = 3                        # fresh input draws per shape
    timeout_s: float = 900.0
    idle_timeout_s: float = 180.0
    ncu: bool = False                     # Nsight Compute metrics for one shape of passing candidates
    ncu_stalls: bool = False              # with ncu: the warp-state stall reasons too (a symptom for retrieval)
    compile_report: bool = True           # offline sm_90a compile of every candidate (registers, spills, programs
                                          # per SM), in a confined process: the prompt's compiler evidence, no GPU needed
    peer: bool = True                     # GPU: the op's production peer checked and timed beside (×peer)
    calibrate: bool = True                # GPU: measure the ceilings once per GPU model when the cache has none
                                          # (`aka hw calibrate`, about 30 s), so every record carries the fraction
                                          # of the measured ceiling beside the datasheet one
    confirm_repeats: int = 2              # GPU: fresh evaluations of challenger and incumbent before promotion
    min_rel_gain: float = 0.02            # GPU: the challenger's median objective must beat the incumbent's by this
    cpu_max_elems: int = 65536            # CPU: a shape whose int kwargs multiply past this is too big for the interpreter
    parallel: int = 4                     # a round's candidates evaluated at once, up to this many (1: one after
                                          # another); their checks overlap, their timings take turns on the GPU


@dataclass
class RetrievalConfig:
    enabled: bool = True
    k: int = 4
    kb_dir: str | None = None             # None: knowledge_base/ of the repo
    max_chars: int = 1800                 # per hit, in the prompt
    backend: str = "auto"                 # auto: the Chroma hybrid index when installed, else files
    exclude_op: bool = False              # leave-op-out: withhold every entry that lists the op (its playbook,
                                          # its kernels); the offline proposer then searches its category's kernels


@dataclass
class OfflineConfig:
    kernels_dir: str | None = None        # None: knowledge_base/kernels of the repo
    retune: bool = True                   # GPU: re-tune a dispatch kernel's table here once it passes (aka/agent/retune.py)
    tune_s: float = 100.0                 # the tuner's deadline for that move, seconds


@dataclass
class DispatchConfig:
    enabled: bool = True                  # end a timed run with one candidate that sends each shape to the variant
                                          # measured fastest on it (aka/agent/dispatch.py), evaluated as a whole and
                                          # promoted by the usual rules; a candidate faster than every earlier one on
                                          # some shape counts as progress, and the offline search tries every family
                                          # and moves around each shape's fastest variant
    accept_within_noise: bool = True      # GPU: the dispatcher is also promoted when it ties the incumbent: its
                                          # objective within eval.min_rel_gain below, and the incumbent not faster
                                          # beyond noise on the interleaved re-measurement. By construction each shape
                                          # runs the variant measured fastest on it, so a tie on the weighted
                                          # objective still returns a kernel at least as good as every variant on every
                                          # shape (issue 21); false: the usual rules (a gain beyond noise)


@dataclass
class OptimizeConfig:
    op: str = ""                          # bundled op name or path (aka.problem.load_problem)
    shape: str = "all"                    # id list, all, small, first, or AxB[xC]
    model: str = "anthropic:claude-opus-4-5"  # provider:model, or "offline"; offline when the key is missing
    n: int = 1                            # candidates per round (evaluated at once: eval.parallel)
    seed: int = 0                         # dropout and restart draws; the LLM's sample index (distinct cached samples)
    feedback: bool = True                 # false: the best-of-N control; every round proposes from the first
                                          # round's context (no parent, results or history), needs dropout off
    runs_dir: str = "runs"
    run_id: str | None = None             # None: <op>-<UTC time>
    target_gpu: str = "H200 SXM 141GB"    # hardware described to the model when no GPU is visible
    live: str = "auto"                    # auto (a terminal) | on | off
    prompts_dir: str | None = None        # None: prompts/ of the repo
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    dropout: DropoutConfig = field(default_factory=DropoutConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    eval: EvalSettings = field(default_factory=EvalSettings)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)

    def to_dict(self) -> dict:
        return asdict(self)

    def dump(self, path: Path) -> None:
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def _coerce(value, tp, where: str):
    """Check `value` against a field annotation (int, float, str, bool, X | None)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    raise ConfigError(f"{where}: unsupported type {tp}")


def merge(obj, data: dict, where: str = "config"):
    """Apply a nested dict onto a config dataclass in place; unknown keys fail with the valid ones."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for k, v in data.items():
        key = str(k).replace("-", "_")
        if key not in names:
            raise ConfigError(f"{where}: unknown key {k!r} (valid: {', '.join(sorted(names))})")
        cur = getattr(obj, key)
        if dataclasses.is_dataclass(cur):
            merge(cur, v or {}, f"{where}.{key}")
        else:
            setattr(obj, key, _coerce(v, hints[key], f"{where}.{key}"))
    return obj


def _field_type(cfg, parts: list[str]):
    obj = cfg
    for p in parts[:-1]:
        obj = getattr(obj, p, None)
        if not dataclasses.is_dataclass(obj):
            return None
    return typing.get_type_hints(type(obj)).get(parts[-1])


def set_path(cfg: OptimizeConfig, dotted: str, raw, parse: bool = True) -> None:
    """`dropout.p=0.3` style override. Text is read as YAML (numbers, true/false, null) except
    for string fields, which keep it verbatim (so `llm.cache_mode=off` stays "off", not false)."""
    parts = dotted.replace("-", "_").split(".")
    value = raw
    if parse and isinstance(raw, str):
        tp = _field_type(cfg, parts)
        args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        if str in args:
            value = None if (type(None) in args and raw in ("null", "~", "None", "")) else raw
        else:
            value = yaml.safe_load(raw) if raw != "" else ""
    nested: dict = {parts[-1]: value}
    for p in reversed(parts[:-1]):
        nested = {p: nested}
    merge(cfg, nested)


def load_config(files: list[str | Path] = (), overrides: dict | None = None) -> OptimizeConfig:
    cfg = OptimizeConfig()
    for f in files:
        p = Path(f)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        merge(cfg, data, str(p))
    if overrides:
        merge(cfg, overrides, "overrides")
    validate(cfg)
    return cfg


def validate(cfg: OptimizeConfig) -> None:
    checks = [
        (cfg.n >= 1, "n must be >= 1"),
        (cfg.budget.iterations >= 1, "budget.iterations must be >= 1"),
        (0.0 <= cfg.dropout.p <= 1.0, "dropout.p must be in [0, 1]"),
        (cfg.dropout.patience >= 1, "dropout.patience must be >= 1"),
        (cfg.stop.stall_rounds >= 1, "stop.stall_rounds must be >= 1"),
        (cfg.llm.cache_mode in ("use", "refresh", "off"), "llm.cache_mode must be use, refresh or off"),
        (cfg.eval.device in ("auto", "cpu", "cuda") or cfg.eval.device.startswith("cuda:"),
         "eval.device must be auto, cpu or cuda[:i]"),
        (cfg.live in ("auto", "on", "off"), "live must be auto, on or off"),
        (cfg.eval.confirm_repeats >= 0, "eval.confirm_repeats must be >= 0"),
        (cfg.feedback or not cfg.dropout.enabled,
         "feedback=false (best-of-N) needs dropout.enabled=false: dropout acts on the feedback it withholds"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)


def from_dict(data: dict) -> OptimizeConfig:
    """Rebuild a saved (resolved) config, e.g. runs/<id>/config.yaml on resume."""
    cfg = merge(OptimizeConfig(), data, "saved config")
    validate(cfg)
    return cfg
