"""Prompt assembly: Jinja2 templates from prompts/ (StrictUndefined: a missing variable fails) and
the plain-data contexts they render (task, hardware, results, roofline signals)."""
from __future__ import annotations

from pathlib import Path

import jinja2

from aka.evaluate.result import EvalResult
from aka.problem import REPO_ROOT, Problem

ERROR_CHARS = 1500       # trimmed failure text in a prompt: enough for a traceback's last frames
SUMMARY_ROWS = 16        # attempts listed in the "tried" summary; older ones are counted only


class PromptRenderer:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root else REPO_ROOT / "prompts"
        if not self.root.is_dir():
            raise FileNotFoundError(f"prompt templates not found: {self.root}")
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(self.root)),
                                      undefined=jinja2.StrictUndefined, trim_blocks=True,
                                      lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
        self.env.filters["fmt"] = fmt

    def render(self, name: str, **variables) -> str:
        return self.env.get_template(name).render(**variables)


def trim(text: str | None, limit: int = ERROR_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def failure_text(res: EvalResult) -> str:
    """The reason, plus the worker's stderr tail where the failure is a crash or an exception."""
    parts = [f"{res.status}: {res.reason}"]
    parts += [f"shape {s.id}: {s.reason}" for s in res.shapes if s.reason and s.correct is False][:3]
    if res.status in ("compile_error", "runtime_error", "crashed", "timeout") and res.stderr_tail:
        parts.append("stderr:\n" + res.stderr_tail)
    return trim("\n".join(parts))


def hardware_context(device: str, target_gpu: str) -> dict:
    """Datasheet figures (aka.hardware.SPECS) and measured ceilings for the GPU in use, or for
    `target_gpu` when none is visible (the model still writes for a GPU)."""
    from aka import hardware
    name, present = target_gpu, False
    if device.startswith("cuda"):
        # NVML first: it names the GPU without creating a CUDA context in this (parent) process.
        st = hardware.read_device_state(int(device.split(":")[1]) if ":" in device else 0)
        if st is not None:
            name, present = st.name, True
        else:
            try:
                import torch
                name, present = torch.cuda.get_device_name(), True
            except Exception:  # noqa: BLE001 - a broken driver leaves the target description
                pass
    spec = hardware.match_spec(name)
    ctx = {"gpu": name, "present": present, "known": spec is not None, "measured": None}
    if spec is None:
        return ctx
    ctx.update(sm_count=spec.sm_count, arch=spec.arch, smem_per_sm_kib=spec.smem_per_sm_kib,
               max_smem_per_block_kib=spec.max_smem_per_block_kib, regs_per_sm=spec.regs_per_sm,
               max_threads_per_sm=spec.max_threads_per_sm, l2_mib=spec.l2_mib, mem_tbps=spec.mem_tbps,
               peak_tflops=dict(spec.peak_tflops), source=spec.source)
    try:
        _, measured = hardware.ceilings_for(name)
        if measured is not None:
            ctx["measured"] = {"mem_tbps": measured.mem_tbps, "peak_tflops": measured.peak_tflops,
                               "source": measured.source}
    except ValueError:
        pass
    return ctx


def task_context(problem: Problem, task, device_note: str | None, device: str) -> dict:
    from aka.agent.shapes import dims_text
    from aka.evaluate.static import RULES
    meta = problem.meta
    shapes = [{"id": s.id, "label": s.label(), "dims": dims_text(s), "weight": s.weight,
               "init": s.init_kwargs, "phase": s.info.get("phase", "")} for s in task.shapes]
    return {
        "name": problem.name,
        "category": problem.category or "unknown",
        "description": meta.get("description", ""),
        "reference": problem.reference_path.read_text(),
        "inputs": problem.input_path.read_text() if problem.input_path else "",
        "shapes": shapes,
        "dtypes": meta.get("dtypes") or [],
        "tolerance": meta.get("tolerance") or "harness defaults per dtype",
        "mutates": meta.get("mutates") or [],
        "rules": RULES,
        "device": device,
        "device_note": device_note or "",
    }


def shape_rows(res: EvalResult, weights: dict[str, float], small_ids: set[str]) -> list[dict]:
    rows = []
    for s in res.shapes:
        ncu = s.ncu if s.ncu and s.ncu.get("available") and not s.ncu.get("error") else None
        rows.append({
            "id": s.id, "label": s.label, "weight": weights.get(s.id, 1.0), "correct": s.correct,
            "failed_stage": s.failed_stage, "reason": trim(s.reason, 300), "time_us": s.time_us,
            "sol_us": s.sol_us, "sol_fraction": s.sol_fraction, "bound": s.bound, "iou": s.iou,
            "mfu": s.mfu, "speedup_eager": s.speedup_eager, "speedup_compile": s.speedup_compile,
            "small": s.id in small_ids,
            "ncu": {k: ncu.get(k) for k in ("bytes_over_min", "occupancy_pct", "spill_bytes",
                                            "registers_per_thread", "dram_pct", "sm_pct")} if ncu else None,
            "profile": [{"kernel": p.get("kernel", "")[:80], "kind": p.get("kind"), "calls": p.get("calls"),
                         "us": p.get("us")} for p in (s.profile or [])[:4]],
        })
    return rows


def signals(res: EvalResult | None, weights: dict[str, float], small_ids: set[str],
            failure: str | None = None) -> dict:
    """The roofline cost signal of the parent kernel, as plain data for prompts and the retriever."""
    return {"shapes": shape_rows(res, weights, small_ids) if res else [], "failure": failure or ""}


def fmt(v, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)
