"""Small shared helpers (standard library only: the evaluation worker may import this)."""
from __future__ import annotations

import ast
import json
import os
import tempfile
import threading
from pathlib import Path

_AST_LOCK = threading.Lock()


def parse_py(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` one thread at a time. CPython 3.11 before 3.11.8 keeps the AST converter's
    recursion depth in interpreter-wide state, so two threads parsing at once can fail with
    "SystemError: AST constructor recursion depth mismatch" (seen in CI with the agent's n=2
    round evaluated in threads)."""
    with _AST_LOCK:
        return ast.parse(source, filename=filename)


def atomic_write_json(path: str | Path, data, **dump_kwargs) -> Path:
    """Write JSON so a crash never leaves a half file: temp file in the same folder, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:24]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, **dump_kwargs)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def fmt(v, spec: str = ".3g") -> str:
    """A value for a table, a report or a prompt: None -> "-", a bool -> yes/no, a float by `spec`;
    an integer (a count, a register number) prints exactly, as does anything else."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def trim(text: str | None, limit: int) -> str:
    """The last `limit` characters of a text (a traceback's last frames say the most), marked as cut."""
    text = (text or "").strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def parse_assignments(text: str) -> dict:
    """`BINS=128,BLOCK=1024` -> {"BINS": 128, "BLOCK": 1024}: kernel parameters as a command line
    gives them, each value an int, else a float, else the string. ValueError on a pair without a
    key or an '='."""
    out = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = pair.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"KEY=VALUE wanted, got {pair!r}")
        val = val.strip()
        for cast in (int, float):
            try:
                val = cast(val)
                break
            except ValueError:
                pass
        out[key.strip()] = val
    return out
