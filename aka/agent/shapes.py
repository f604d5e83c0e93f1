"""The task's shape set: `shape=` words resolved against an op, and the CPU small-shape switch."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from aka.problem import Problem, ProblemError, ShapeCase

_DIMS = re.compile(r"^\d+(x\d+)+$")

NO_GPU_NOTE = "no GPU: correctness only through the interpreter on small shapes; timings unavailable"


def int_dims(shape: ShapeCase) -> list[int]:
    """The integer input kwargs in declaration order (booleans are flags, not sizes)."""
    return [v for v in shape.input_kwargs.values() if isinstance(v, int) and not isinstance(v, bool)]


def dims_text(shape: ShapeCase) -> str:
    d = int_dims(shape)
    return "x".join(map(str, d)) if d else "-"


def elements(shape: ShapeCase) -> int:
    return math.prod(int_dims(shape)) if int_dims(shape) else 0


def available(problem: Problem) -> str:
    rows = [f"{s.id}={dims_text(s)}" for s in problem.shapes.values()]
    small = [f"{s.id}={dims_text(s)}" for s in problem.small_shapes.values()]
    return ", ".join(rows) + (f"; small: {', '.join(small)}" if small else "")


def match_shapes(problem: Problem, spec: str | None) -> list[ShapeCase]:
    """`4096x4096` matches the shapes whose first int input kwargs are 4096 and 4096 (benchmark
    shapes first, then small ones); anything else goes to Problem.select (ids, all, small, first)."""
    spec = (spec or "all").strip()
    if _DIMS.match(spec):
        want = [int(x) for x in spec.split("x")]
        for pool in (problem.shapes, problem.small_shapes):
            hits = [s for s in pool.values() if int_dims(s)[: len(want)] == want]
            if hits:
                return hits
        raise ProblemError(f"{problem.name}: no shape matches {spec} (input kwargs in order); "
                           f"available: {available(problem)}")
    try:
        return problem.select(spec)
    except ProblemError as e:
        raise ProblemError(f"{e}; available: {available(problem)}") from None


def shapes_text(shapes: list[ShapeCase], limit: int = 4) -> str:
    """`4096x4096 (shape 9)`: the sizes a user types first, the id the files use after. More than
    `limit` shapes read as a count: a 15-shape list is noise in a one-line notice."""
    if len(shapes) > limit:
        return f"{len(shapes)} shapes"
    return ", ".join(f"{dims_text(s)} (shape id {s.id})" for s in shapes)


@dataclass
class TaskShapes:
    shapes: list[ShapeCase]
    requested: list[ShapeCase]
    device: str
    note: str | None = None  # the loud line when the CPU switched to small shapes

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.shapes]

    @property
    def weights(self) -> dict[str, float]:
        return {s.id: s.weight for s in self.shapes}


def task_shapes(problem: Problem, spec: str | None, device: str, cpu_max_elems: int) -> TaskShapes:
    """On CPU, shapes too big for the interpreter are replaced by the op's small_shapes."""
    requested = match_shapes(problem, spec)
    if not device.startswith("cpu"):
        return TaskShapes(requested, requested, device)
    if all(elements(s) <= cpu_max_elems for s in requested):
        return TaskShapes(requested, requested, device, "no GPU: correctness only through the interpreter; "
                          "timings unavailable")
    if not problem.small_shapes:
        raise ProblemError(f"{problem.name}: no GPU, the requested shapes are too large for the Triton "
                           "interpreter, and meta.json lists no small_shapes")
    return TaskShapes(list(problem.small_shapes.values()), requested, device,
                      f"{NO_GPU_NOTE}: asked for {shapes_text(requested)}, running the small shapes "
                      f"{', '.join(f'{s.id}={dims_text(s)}' for s in problem.small_shapes.values())} instead")
