"""The evaluation harness. `evaluate()` lives in aka.evaluate.api; this package's __init__ stays
empty of imports because the sandboxed worker imports its submodules with torch and triton only."""


def __getattr__(name):
    if name in ("evaluate", "EvalConfig", "CandidateError"):
        from aka.evaluate import api
        return getattr(api, name)
    raise AttributeError(name)
