"""Write the measured winners of scripts/gpu_tune_gemm.py into the dispatch kernels' tables.

    python scripts/bake_dispatch.py TUNE.json [--ops gemm_bf16,fp8_block_scaled_gemm] [--kernels DIR]
                                    [--merge] [--dry-run]

For each op in TUNE.json, the fastest *correct* measured config per shape becomes one row
(M, N, K, config) of `_TABLE` in knowledge_base/kernels/<op>/dispatch.py, between the
'dispatch table' markers, with `_TABLE_SOURCE` naming the file, GPU, versions and date. The rest
of the kernel file is untouched. With --merge the rows of shapes the tune file did not measure are
kept (a tuner run over some shapes, as `aka optimize`'s re-tune move makes, replaces only theirs);
without it the table is the tune file's winners alone. Incorrect or failed configs are never baked, and an op whose
file has no markers, or a tune file without measurements, is an error (exit 2).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "# --- dispatch table: scripts/bake_dispatch.py rewrites from here to the end marker ---"
END = "# --- end of dispatch table ---"
CONFIG_KEYS = {"path", "BM", "BN", "BK", "GROUP", "SPLIT_K", "num_warps", "num_stages", "TMA", "PERSIST", "WS", "OCC"}


class BakeError(Exception):
    pass


def winners(doc: dict, op: str) -> list[tuple[int, int, int, dict, float]]:
    """(M, N, K, config, us) per shape: the fastest record that is correct and timed."""
    best: dict[str, dict] = {}
    for r in doc.get("records", []):
        if r.get("op") != op or not r.get("correct") or not r.get("us") or r.get("error"):
            continue
        if r["shape"] not in best or r["us"] < best[r["shape"]]["us"]:
            best[r["shape"]] = r
    rows = []
    for r in best.values():
        cfg = r["config"]
        unknown = set(cfg) - CONFIG_KEYS
        if unknown or cfg.get("path") not in ("gemv", "tile"):
            raise BakeError(f"{op} shape {r['shape']}: config {cfg} has unknown keys {sorted(unknown)}")
        rows.append((int(r["M"]), int(r["N"]), int(r["K"]), cfg, float(r["us"])))
    return sorted(rows, key=lambda t: (t[0], t[1], t[2]))


def render(rows, source: str) -> str:
    lines = [BEGIN, f"_TABLE_SOURCE = {source!r}", "_TABLE = ["]
    for M, N, K, cfg, us in rows:
        items = ", ".join(f"{k!r}: {cfg[k]!r}" for k in sorted(cfg))
        lines.append(f"    ({M}, {N}, {K}, {{{items}}}),  # " + (f"{us:.1f} us" if us is not None else "kept"))
    lines += ["]", END]
    return "\n".join(lines)


def current_rows(src: str) -> list[tuple[int, int, int, dict, float | None]]:
    """The (M, N, K, config, us) rows of the `_TABLE` between the markers (us from the row's comment)."""
    block = src[src.index(BEGIN):src.index(END)]
    body = block[block.index("_TABLE = ["):]
    rows = []
    for line in body.splitlines()[1:]:
        line = line.strip()
        if not line.startswith("("):
            continue
        code, _, note = line.partition("#")
        M, N, K, cfg = ast.literal_eval(code.strip().rstrip(","))
        us = note.strip().removesuffix("us").strip()
        rows.append((int(M), int(N), int(K), dict(cfg), float(us) if us.replace(".", "", 1).isdigit() else None))
    return rows


def bake(tune_path: Path, op: str, kernel_path: Path, dry_run: bool = False, merge: bool = False) -> str:
    doc = json.loads(tune_path.read_text())
    rows = winners(doc, op)
    if not rows:
        raise BakeError(f"{tune_path}: no correct, timed record for {op}")
    src = kernel_path.read_text()
    if src.count(BEGIN) != 1 or src.count(END) != 1:
        raise BakeError(f"{kernel_path}: expected one pair of dispatch-table markers")
    if merge:
        measured = {(M, N, K) for M, N, K, _, _ in rows}
        kept = [r for r in current_rows(src) if r[:3] not in measured]
        rows = sorted(rows + kept, key=lambda t: (t[0], t[1], t[2]))
    env = doc.get("env", {})
    source = (f"{tune_path.name}: {env.get('gpu')}, torch {env.get('torch')}, triton {env.get('triton')}, "
              f"sha {env.get('git_sha')}, {env.get('date')}, {env.get('timing')}")
    if merge and kept:
        prev = re.search(r"^_TABLE_SOURCE = (.*)$", src, re.M)
        source += f"; {len(kept)} rows not measured there kept from " + (ast.literal_eval(prev.group(1)) if prev else "the previous table")
    head, rest = src.split(BEGIN)
    _, tail = rest.split(END)
    new = head + render(rows, source) + tail
    if not dry_run:
        kernel_path.write_text(new)
    return new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tune_json")
    ap.add_argument("--ops", default="gemm_bf16,fp8_block_scaled_gemm")
    ap.add_argument("--kernels", default=str(ROOT / "knowledge_base" / "kernels"),
                    help="folder holding <op>/dispatch.py (default: the repo's knowledge base)")
    ap.add_argument("--merge", action="store_true", help="keep the rows of shapes the tune file did not measure")
    ap.add_argument("--dry-run", action="store_true", help="print the tables, write nothing")
    args = ap.parse_args(argv)
    tune = Path(args.tune_json)
    try:
        if not tune.is_file():
            raise BakeError(f"{tune}: no such file")
        present = {r.get("op") for r in json.loads(tune.read_text()).get("records", [])}
        for op in [o for o in args.ops.split(",") if o]:
            if op not in present:
                print(f"bake_dispatch: {tune} has no records for {op}: left as it is", file=sys.stderr)
                continue
            path = Path(args.kernels) / op / "dispatch.py"
            new = bake(tune, op, path, args.dry_run, args.merge)
            table = new[new.index(BEGIN):new.index(END)]
            print(f"{path}: {table.count(chr(10)) - 3} rows" + ("" if not args.dry_run else "\n" + table))
    except (BakeError, json.JSONDecodeError, OSError) as exc:
        print(f"bake_dispatch: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
