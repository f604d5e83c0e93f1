"""Print a kernel file with one AKA_PARAMS entry changed, for an A/B beside the committed kernel.

    python scripts/params_variant.py knowledge_base/kernels/gemm_bf16/dispatch.py FIXUP=0 > variant.py

The value is a Python literal. The key must already be in the file's module-level AKA_PARAMS dict
(a typo would otherwise time the committed kernel twice and call it an A/B).
"""
from __future__ import annotations

import ast
import re
import sys

_LINE = re.compile(r"^AKA_PARAMS\s*=\s*(\{.*\})\s*$", re.M)


def variant(source: str, assignment: str) -> str:
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ValueError(f"expected KEY=VALUE, got {assignment!r}")
    m = _LINE.search(source)
    if m is None:
        raise ValueError("no one-line module-level `AKA_PARAMS = {...}` in the file")
    params = ast.literal_eval(m.group(1))
    if key not in params:
        raise ValueError(f"{key!r} is not in AKA_PARAMS (keys: {', '.join(params)})")
    params[key] = ast.literal_eval(raw)
    return source[: m.start(1)] + repr(params) + source[m.end(1):]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    path, assignment = argv
    try:
        sys.stdout.write(variant(open(path).read(), assignment))
    except (OSError, ValueError, SyntaxError) as exc:
        print(f"params_variant: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
