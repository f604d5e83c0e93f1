"""Write gpu_tune_moe.py's per-shape winners into the grouped fused_moe kernel's per-GPU DISPATCH tables.

    python scripts/bake_dispatch_moe.py OUTDIR/moe_tune.json [--kernel PATH] [--replace]

Each shape whose best config passed (on the tuning draw and again on a fresh one) becomes an
entry `"E,H,I,top_k": {num_tokens: config}` of the table of the GPU that measured it
(`DISPATCH_BY_GPU[torch's device name]`, the tuning run's provenance); other GPUs' tables are left
as they are, and within this GPU's table the geometries and token counts the run did not measure
keep their entries (and the notes of what measured them) unless --replace. The block between the
DISPATCH-BEGIN / DISPATCH-END markers is rewritten with each table's newest provenance above it.
A tuning run from the CPU interpreter times nothing and is refused (--allow-unmeasured, for the
pipeline's own test, bakes it into the default GPU's table).
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
OPTIONAL_KEYS = ("TMA_ACT", "GATHER_X")   # A tiles by TMA (2026-12-06): written when the winner sets them


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
        cfg.update({k: best["config"][k] for k in OPTIONAL_KEYS if best["config"].get(k)})
        frac = best.get("sol_fraction_measured")
        peer = rec.get("peer") or {}
        note = f"shape {rec['id']}: {best['time_us']:.1f} us"
        if frac:
            note += f", {frac:.2f} of the measured ceiling"
        if peer.get("ok") and peer.get("time_us"):
            note += f", torch._grouped_mm {peer['time_us']:.1f} us"
        out.setdefault(key, {})[int(kw["num_tokens"])] = (cfg, note)
    return out


def _block(src: str) -> str:
    return src.split(BEGIN, 1)[1].split("\n", 1)[1].split(END, 1)[0]   # past the marker line


def current_tables(src: str) -> tuple[str, dict]:
    """(DEFAULT_GPU, DISPATCH_BY_GPU) between the markers."""
    found = {}
    for node in ast.parse(_block(src)).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in ("DEFAULT_GPU", "DISPATCH_BY_GPU"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    if set(found) != {"DEFAULT_GPU", "DISPATCH_BY_GPU"} or found["DEFAULT_GPU"] not in found["DISPATCH_BY_GPU"]:
        raise BakeError("expected DEFAULT_GPU = '...' and DISPATCH_BY_GPU = {gpu: {...}} holding it between the markers")
    return found["DEFAULT_GPU"], found["DISPATCH_BY_GPU"]


def current_notes(src: str) -> tuple[dict[str, str], dict[str, dict[str, dict[int, str]]]]:
    """The provenance line above each GPU's table and the comment beside each entry (what measured
    it), so that a merge keeps what it does not re-measure."""
    import re
    provenance: dict[str, str] = {}
    notes: dict[str, dict[str, dict[int, str]]] = {}
    gpu = key = None
    for line in _block(src).splitlines():
        if m := re.match(r"# (.+?): newest bake (.*)$", line):
            provenance[m.group(1)] = m.group(2)
        elif m := re.match(r"\s{4}'([^']+)': \{\s*$", line):
            gpu, key = m.group(1), None
        elif m := re.match(r"\s{8}'([0-9,]+)': \{\s*$", line):
            key = m.group(1)
        elif (m := re.match(r"\s{12}(\d+): \{.*\},\s*#\s*(.*)$", line)) and gpu and key:
            notes.setdefault(gpu, {}).setdefault(key, {})[int(m.group(1))] = m.group(2).strip()
    return provenance, notes


def render(default: str, tables: dict[str, dict[str, dict[int, tuple[dict, str]]]], provenance: dict[str, str]) -> str:
    order = [default] + sorted(g for g in tables if g != default)
    lines = [f"{BEGIN} (scripts/bake_dispatch_moe.py rewrites this block)"]
    lines += [f"# {g}: newest bake {provenance[g]}" for g in order if provenance.get(g)]
    lines += [f"DEFAULT_GPU = {default!r}", "DISPATCH_BY_GPU = {"]
    for g in order:
        lines.append(f"    {g!r}: {{")
        table = tables[g]
        for key in sorted(table, key=lambda k: tuple(int(x) for x in k.split(","))):
            lines.append(f"        {key!r}: {{")
            for n in sorted(table[key]):
                cfg, note = table[key][n]
                lines.append(f"            {n}: {cfg!r},{'  # ' + note if note else ''}")
            lines.append("        },")
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
    default, current = current_tables(src)
    provenance, notes = current_notes(src)
    measured = str(prov.get("timer", "")).startswith("CUDA") and prov.get("gpu")
    gpu = prov["gpu"] if measured else default
    tables = {g: {k: {int(n): (c, notes.get(g, {}).get(k, {}).get(int(n), "")) for n, c in v.items()}
                  for k, v in t.items()} for g, t in current.items()}
    if replace or gpu not in tables:
        tables[gpu] = {}
    for key, entries in new.items():
        tables[gpu].setdefault(key, {}).update(entries)
    provenance[gpu] = (f"measured: {prov.get('gpu')}, torch {prov.get('torch')}, triton {prov.get('triton')}, "
                       f"{prov.get('date')}, sha {prov.get('git_sha')}; {prov.get('timer')}")
    head, rest = src.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    kernel.write_text(head + render(default, tables, provenance) + tail)
    return {gpu: {k: sorted(v) for k, v in tables[gpu].items()}}


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
    for gpu, table in baked.items():
        for key, ns in table.items():
            print(f"{gpu} {key}: num_tokens {ns}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
