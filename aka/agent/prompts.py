"""Prompt assembly: Jinja2 templates from prompts/ (StrictUndefined: a missing variable fails) and
the plain-data contexts they render (task, hardware, results); the roofline signals they render are
aka.kb.retrieval.Signals, the same object the retrievers read."""
from __future__ import annotations

from pathlib import Path

import jinja2

from aka.evaluate.result import EvalResult
from aka.problem import REPO_ROOT, Problem
from aka.util import fmt, trim

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


def failure_text(res: EvalResult) -> str:
    """The reason, plus the worker's stderr tail where the failure is a crash or an exception."""
    parts = [f"{res.status}: {res.reason}"]
    parts += [f"shape {s.id}: {s.reason}" for s in res.shapes if s.reason and s.correct is False][:3]
    if res.status in ("compile_error", "runtime_error", "crashed", "timeout") and res.stderr_tail:
        parts.append("stderr:\n" + res.stderr_tail)
    return trim("\n".join(parts), ERROR_CHARS)


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
