"""How a failure inside the runner becomes a verdict: the exception's class and where it was
raised (Triton's compiler, a CUDA error, memory) decide the status. Used by the runner, which
reports the classification; the judge accepts only failures from it, never a pass."""
from __future__ import annotations

import traceback

import torch

from aka.evaluate.result import StageFailure


def trim(text: str, max_lines: int = 30, max_chars: int = 2500) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    if len(lines) > max_lines:
        lines = lines[:8] + [f"... ({len(lines) - max_lines} lines cut) ..."] + lines[-(max_lines - 9):]
    out = "\n".join(lines)
    return out if len(out) <= max_chars else out[:600] + "\n...\n" + out[-(max_chars - 610):]


def classify_exception(e: BaseException, stage: str) -> StageFailure:
    text = f"{type(e).__name__}: {e}"
    low = text.lower()
    if isinstance(e, torch.OutOfMemoryError) or "out of memory" in low or "can't allocate memory" in low:
        return StageFailure("crashed", "out of memory: " + trim(text, 6, 600), stage)
    if any(s in low for s in ("illegal memory access", "misaligned address", "device-side assert",
                              "unspecified launch failure", "cuda error", "illegal instruction")):
        return StageFailure("crashed", trim(text, 8, 800), stage)
    names = {c.__name__ for c in type(e).__mro__}
    # Raised from inside Triton's compiler (code generation, "Unsupported function referenced"):
    # a compile error whatever the exception class.
    in_compiler = any("/triton/compiler/" in f.filename for f in traceback.extract_tb(e.__traceback__))
    if names & {"CompilationError", "CompileTimeAssertionFailure", "SyntaxError", "ImportError", "NameError"} \
            or in_compiler or (stage == "import"):
        return StageFailure("compile_error", trim(_compile_message(e)), stage)
    return StageFailure("runtime_error", trim(text + "\n" + _user_frames(e)), stage)


def _compile_message(e: BaseException) -> str:
    # Triton's CompilationError already carries the offending kernel line with a caret.
    return f"{type(e).__name__}: {e}"


def _user_frames(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f"  {f.filename.split('/')[-1]}:{f.lineno} in {f.name}: {f.line}" for f in tb
              if f.filename.endswith("candidate.py")]
    return "\n".join(frames[-4:])
