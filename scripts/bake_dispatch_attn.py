"""Write the measured winners of scripts/gpu_tune_attn.py into the kernels' DISPATCH tables.

    python scripts/bake_dispatch_attn.py OUTDIR/tune_attn.json [more.json ...] [--dry-run] [--kernel K]

Per op and shape key, the fastest correct record over all files wins; its config replaces the
table entry for that key (entries for keys not measured are kept). Each entry carries a comment
with its time, ratio, GPU and date. --kernel bakes another kernel's records (the tuner's
`other_records`, --kernels K) into that kernel's own table, for a kernel with a dispatch block
of its own (mla_decode_attention/page_tile); without it, each op's dispatch kernel (KERNELS[op])
takes the `records`. Refuses interpreter runs (their times are not timings)
unless --allow-cpu, which exists for the end-to-end test.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.gpu_tune_attn import KERNELS  # noqa: E402

_BLOCK = re.compile(r"(# dispatch: begin[^\n]*\n)(.*?)(# dispatch: end)", re.S)


def winners(docs: list[dict], kernel: str | None = None) -> dict[str, dict[str, dict]]:
    """op -> key -> the fastest correct record (with its provenance): of the dispatch kernels'
    `records`, or of `kernel`'s among the `other_records`."""
    best: dict[str, dict[str, dict]] = {}
    for doc in docs:
        prov = doc["provenance"]
        rows = (doc["records"] if kernel is None
                else [r for r in doc.get("other_records", []) if r.get("kernel") == kernel])
        for r in rows:
            if not (r.get("correct") and r.get("us")):
                continue
            cur = best.setdefault(r["op"], {}).get(r["key"])
            if cur is None or r["us"] < cur["us"]:
                best[r["op"]][r["key"]] = {**r, "gpu": prov["gpu"], "date": prov["date"][:10]}
    return best


def _current(src: str) -> dict:
    m = _BLOCK.search(src)
    if not m:
        raise SystemExit("error: no '# dispatch: begin' ... '# dispatch: end' block")
    for node in ast.parse(m.group(2)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DISPATCH" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


_NOTE = re.compile(r"^\s+'([^']+)': \{.*\},\s+# (.*)$", re.M)


def _notes(src: str) -> dict[str, str]:
    """key -> the comment on its table line (time, GPU, date: where the entry came from)."""
    m = _BLOCK.search(src)
    return dict(_NOTE.findall(m.group(2))) if m else {}


def render(table: dict, notes: dict[str, str]) -> str:
    if not table:
        return "DISPATCH = {}\n"
    lines = ["DISPATCH = {"]
    for key in sorted(table, key=lambda k: [float(x) for x in k.split("/")]):
        note = f"  # {notes[key]}" if key in notes else ""
        lines.append(f"    {key!r}: {table[key]!r},{note}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def bake(path: Path, won: dict[str, dict], dry_run: bool = False) -> str:
    src = path.read_text()
    table = dict(_current(src))
    notes = _notes(src)  # kept entries keep their provenance comments
    for key, r in won.items():
        table[key] = r["config"]
        ratio = f", ratio {r['ratio']:.2f}" if r.get("ratio") else ""
        notes[key] = f"{r['us']:.1f} us{ratio}, shape {r['shape']}, {r['gpu']} {r['date']}"
    m = _BLOCK.search(src)
    new = src[:m.start(2)] + render(table, notes) + src[m.end(2):]
    if not dry_run:
        path.write_text(new)
    return new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--allow-cpu", action="store_true", help="accept interpreter runs (tests only)")
    ap.add_argument("--kb", default=str(ROOT / "knowledge_base"))
    ap.add_argument("--kernel", default=None, help="bake this other kernel's records into its own table")
    args = ap.parse_args(argv)
    docs = []
    for p in args.results:
        try:
            doc = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"error: cannot read {p}: {e}", file=sys.stderr)
            return 2
        if doc.get("provenance", {}).get("device") != "cuda" and not args.allow_cpu:
            print(f"error: {p} is not a GPU run (its times are interpreter wall clock)", file=sys.stderr)
            return 2
        docs.append(doc)
    won_by_op = winners(docs, args.kernel)
    if args.kernel and not won_by_op:
        print(f"error: no correct record of kernel {args.kernel!r} in {', '.join(args.results)}", file=sys.stderr)
        return 2
    for op, won in won_by_op.items():
        path = Path(args.kb) / "kernels" / op / f"{args.kernel or KERNELS[op]}.py"
        bake(path, won, args.dry_run)
        print(f"{op}: {len(won)} entries -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
