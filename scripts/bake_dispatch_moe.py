"""Write gpu_tune_moe.py's per-shape winners into the grouped fused_moe kernel's DISPATCH table.

    python scripts/bake_dispatch_moe.py OUTDIR/moe_tune.json [--kernel PATH] [--replace]

Each shape whose best config passed (on the tuning draw and again on a fresh one) becomes an
entry `"E,H,I,top_k": {num_tokens: config}`; geometries the file does not measure keep their
entries unless --replace. The block between the DISPATCH-BEGIN / DISPATCH-END markers is
rewritten with the provenance of the measurement beside it. A tuning run from the CPU
interpreter times nothing and is refused (--allow-unmeasured is for the pipeline's own test).
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "knowledge_base" / "kernels" / "fused_moe" / "grouped_dispatch.py"
BEGIN, END = "# DISPATCH-BEGIN", "# DISPATCH-END"
LAUNCH_KEYS = ("BM", "BN", "BN2", "BK", "GROUP", "num_warps", "num_stages", "COMBINE", "SPLIT_K", "PERSIST", "USE_TMA")


class BakeError(Exception):
    pass


def winners(tune: dict) -> dict[str, dict[int, tuple[dict, str]]]:
    """geometry key -> {num_tokens: (config, comment)} for shapes with a re-checked winner."""
    out: dict[str, dict[int, tuple[dict, str]]] = {}
    for rec in tune.get("shapes", []):
        best = rec.get("best")
        if not best or not best.get("ok") or not (best.get("recheck") or {}).get("ok"):
            continue
        kw = rec["input_kwargs"]
        key = f"{kw['num_experts']},{kw['hidden_size']},{kw['intermediate_size']},{kw['top_k']}"
        cfg = {k: best["config"][k] for k in LAUNCH_KEYS}
        frac = best.get("sol_fraction_measured")
        peer = rec.get("peer") or {}
        note = f"shape {rec['id']}: {best['time_us']:.1f} us"
        if frac:
            note += f", {frac:.2f} of the measured ceiling"
        if peer.get("ok") and peer.get("time_us"):
            note += f", torch._grouped_mm {peer['time_us']:.1f} us"
        out.setdefault(key, {})[int(kw["num_tokens"])] = (cfg, note)
    return out


def current_table(src: str) -> dict:
    block = src.split(BEGIN, 1)[1].split("\n", 1)[1].split(END, 1)[0]   # past the marker line
    tree = ast.parse(block)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DISPATCH":
            return ast.literal_eval(node.value)
    raise BakeError("no DISPATCH = {...} between the markers")


def current_notes(src: str) -> dict[str, dict[int, str]]:
    """The comment beside each entry of the current table (what measured it), so that a merge keeps
    the notes of the entries it does not re-measure."""
    import re
    block = src.split(BEGIN, 1)[1].split(END, 1)[0]
    notes: dict[str, dict[int, str]] = {}
    key = None
    for line in block.splitlines():
        m = re.match(r"\s{4}'([0-9,]+)': \{\s*$", line)
        if m:
            key = m.group(1)
            continue
        m = re.match(r"\s{8}(\d+): \{.*\},\s*#\s*(.*)$", line)
        if m and key is not None:
            notes.setdefault(key, {})[int(m.group(1))] = m.group(2).strip()
    return notes


def render(table: dict[str, dict[int, tuple[dict, str]]], provenance: str) -> str:
    lines = [f"{BEGIN} (scripts/bake_dispatch_moe.py rewrites this block)",
             f"# newest bake {provenance}",
             "DISPATCH = {"]
    for key in sorted(table, key=lambda k: tuple(int(x) for x in k.split(","))):
        lines.append(f"    {key!r}: {{")
        for n in sorted(table[key]):
            cfg, note = table[key][n]
            lines.append(f"        {n}: {cfg!r},{'  # ' + note if note else ''}")
        lines.append("    },")
    lines.append("}")
    lines.append(END)
    return "\n".join(lines)


def bake(tune: dict, kernel: Path, replace: bool = False, allow_unmeasured: bool = False) -> dict:
    prov = tune.get("provenance") or {}
    if not allow_unmeasured and not str(prov.get("timer", "")).startswith("CUDA"):
        raise BakeError(f"the tuning run timed nothing ({prov.get('gpu')}: {prov.get('timer')}); "
                        "bake a GPU run")
    src = kernel.read_text()
    if src.count(BEGIN) != 1 or src.count(END) != 1:
        raise BakeError(f"{kernel}: expected one {BEGIN} and one {END} line")
    new = winners(tune)
    if not new:
        raise BakeError("no shape has a passing, re-checked winner: nothing to bake")
    notes = current_notes(src)
    table = {} if replace else {k: {int(n): (c, notes.get(k, {}).get(int(n), "")) for n, c in v.items()}
                                for k, v in current_table(src).items()}
    for key, entries in new.items():
        table.setdefault(key, {}).update(entries)
    provenance = (f"measured: {prov.get('gpu')}, torch {prov.get('torch')}, triton {prov.get('triton')}, "
                  f"{prov.get('date')}, sha {prov.get('git_sha')}; {prov.get('timer')}")
    head, rest = src.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    kernel.write_text(head + render(table, provenance) + tail)
    return {k: sorted(v) for k, v in table.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tune_json", type=Path)
    ap.add_argument("--kernel", type=Path, default=KERNEL)
    ap.add_argument("--replace", action="store_true", help="drop entries this run did not measure")
    ap.add_argument("--allow-unmeasured", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        tune = json.loads(args.tune_json.read_text())
        baked = bake(tune, args.kernel, replace=args.replace, allow_unmeasured=args.allow_unmeasured)
    except (OSError, json.JSONDecodeError, BakeError) as exc:
        print(f"bake_dispatch_moe: {exc}", file=sys.stderr)
        return 2
    for key, ns in baked.items():
        print(f"{key}: num_tokens {ns}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
