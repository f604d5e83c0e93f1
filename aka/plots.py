"""matplotlib for the reports, or one plain sentence saying why a plot could not be drawn."""
from __future__ import annotations

MISSING = ("matplotlib cannot be imported ({err}); it is one of aka's default dependencies: "
           "pip install -e . (or pip install matplotlib)")


def pyplot():
    """(matplotlib.pyplot on the file-only Agg backend, None), or (None, why it is unavailable)."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display on GPU hosts and CI; PNG files only
        import matplotlib.pyplot as plt
    except ImportError as e:
        return None, MISSING.format(err=e)
    return plt, None


def failed(what: str, exc: Exception) -> str:
    return f"{what} could not be drawn: {type(exc).__name__}: {exc}"
