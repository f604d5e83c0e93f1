"""Write the measured winners of scripts/gpu_tune_gemm.py into the dispatch kernels' tables.

    python scripts/bake_dispatch.py TUNE.json [--ops gemm_bf16,fp8_block_scaled_gemm] [--kernels DIR]
                                    [--merge] [--dry-run]

For each op in TUNE.json, the fastest *correct* measured config per shape becomes one row
(M, N, K, config) of a table in knowledge_base/kernels/<op>/dispatch.py, between the 'dispatch
table' markers, with a source line naming the file, GPU, versions and date. The rest of the kernel
file is untouched. Incorrect or failed configs are never baked, and an op whose file has no
markers, or a tune file without measurements, is an error (exit 2).

Tables are per GPU: `_TABLE` (with `_TABLE_SOURCE`) was measured on `_TABLE_GPU` and serves every
GPU without a table of its own; `_GPU_TABLES[name]` (with `_GPU_TABLE_SOURCES[name]`) serves the GPU
torch names `name`. A tune file measured on the default table's GPU (or without a GPU, or into an
empty default table) rewrites `_TABLE`; one measured on another GPU rewrites that GPU's table and
leaves the others as they are, so an H100 re-tune never replaces the H200's rows. With --merge the
rows of shapes the tune file did not measure are kept (from that GPU's table, or, for a GPU that had
none, from the default table: another GPU's measurement of the same shape beats the nearest row of a
different shape); without it the table is the tune file's winners alone.
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


def _row_line(M, N, K, cfg, us) -> str:
    items = ", ".join(f"{k!r}: {cfg[k]!r}" for k in sorted(cfg))
    return f"    ({M}, {N}, {K}, {{{items}}}),  # " + (f"{us:.1f} us" if us is not None else "kept")


def render(default_gpu: str | None, tables: dict) -> str:
    """The block between the markers: the default table (key None), then one table per other GPU."""
    src, rows = tables.get(None, ("", []))
    lines = [BEGIN, f"_TABLE_GPU = {default_gpu!r}", f"_TABLE_SOURCE = {src!r}", "_TABLE = ["]
    lines += [_row_line(*r) for r in rows]
    lines += ["]", "# tables measured on other GPUs, keyed by torch.cuda.get_device_name(); pick_config takes the",
              "# GPU in hand's and falls back to _TABLE", "_GPU_TABLE_SOURCES = {}", "_GPU_TABLES = {}"]
    for gpu in sorted(k for k in tables if k is not None):
        gsrc, grows = tables[gpu]
        lines += [f"_GPU_TABLE_SOURCES[{gpu!r}] = {gsrc!r}", f"_GPU_TABLES[{gpu!r}] = ["]
        lines += [_row_line(*r) for r in grows]
        lines.append("]")
    lines.append(END)
    return "\n".join(lines)


def _row(line: str) -> tuple[int, int, int, dict, float | None]:
    code, _, note = line.partition("#")
    M, N, K, cfg = ast.literal_eval(code.strip().rstrip(","))
    us = note.strip().removesuffix("us").strip()
    return int(M), int(N), int(K), dict(cfg), float(us) if us.replace(".", "", 1).isdigit() else None


def _key(lhs: str) -> str:
    return ast.literal_eval(lhs[lhs.index("[") + 1:lhs.rindex("]")])


def current_tables(src: str) -> tuple[str | None, dict]:
    """(default GPU, {None or GPU name: (source, rows)}) from the block between the markers; each
    row (M, N, K, config, us), us from the row's comment. A block written before tables were per
    GPU has no _TABLE_GPU: the GPU its source names is taken."""
    block = src[src.index(BEGIN):src.index(END)]
    default_gpu, sources, rows, section = None, {None: ""}, {None: []}, None
    for line in block.splitlines()[1:]:
        s = line.strip()
        if s.startswith("("):
            rows[section].append(_row(s))
        elif s.startswith("_TABLE_GPU = "):
            default_gpu = ast.literal_eval(s.split("= ", 1)[1])
        elif s.startswith("_TABLE_SOURCE = "):
            sources[None] = ast.literal_eval(s.split("= ", 1)[1])
        elif s.startswith("_TABLE = ["):
            section = None
        elif s.startswith("_GPU_TABLE_SOURCES["):
            lhs, rhs = s.split(" = ", 1)
            sources[_key(lhs)] = ast.literal_eval(rhs)
        elif s.startswith("_GPU_TABLES[") and s.endswith("["):
            section = _key(s.split(" = ", 1)[0])
            rows[section] = []
    if default_gpu is None:
        m = re.match(r"[^:]*: (.+?), torch ", sources[None])
        default_gpu = m.group(1) if m else None
    return default_gpu, {k: (sources.get(k, ""), v) for k, v in rows.items()}


def bake(tune_path: Path, op: str, kernel_path: Path, dry_run: bool = False, merge: bool = False) -> tuple[str, str, int]:
    """Bake one op; returns the new source, which table it wrote ("default (GPU)" or the GPU) and that
    table's row count."""
    doc = json.loads(tune_path.read_text())
    rows = winners(doc, op)
    if not rows:
        raise BakeError(f"{tune_path}: no correct, timed record for {op}")
    src = kernel_path.read_text()
    if src.count(BEGIN) != 1 or src.count(END) != 1:
        raise BakeError(f"{kernel_path}: expected one pair of dispatch-table markers")
    default_gpu, tables = current_tables(src)
    env = doc.get("env", {})
    gpu = env.get("gpu")
    target = None
    if gpu and gpu != default_gpu and (tables[None][1] or default_gpu):
        target = gpu            # another GPU's measurement: its own table
    elif gpu and not tables[None][1] and default_gpu is None:
        default_gpu = gpu       # the first measurement names the default table's GPU
    source = (f"{tune_path.name}: {gpu}, torch {env.get('torch')}, triton {env.get('triton')}, "
              f"sha {env.get('git_sha')}, {env.get('date')}, {env.get('timing')}")
    if merge:
        prev_src, prev_rows = tables.get(target) or tables[None]
        if target is not None and target not in tables:
            prev_src = f"the default table ({default_gpu}): {prev_src}"
        measured = {(M, N, K) for M, N, K, _, _ in rows}
        kept = [r for r in prev_rows if r[:3] not in measured]
        rows = sorted(rows + kept, key=lambda t: (t[0], t[1], t[2]))
        if kept:
            source += f"; {len(kept)} rows not measured there kept from " + (prev_src or "the previous table")
    tables[target] = (source, rows)
    head, rest = src.split(BEGIN)
    _, tail = rest.split(END)
    new = head + render(default_gpu, tables) + tail
    if not dry_run:
        kernel_path.write_text(new)
    return new, (f"default ({default_gpu})" if target is None else target), len(rows)


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
            new, which, n = bake(tune, op, path, args.dry_run, args.merge)
            table = new[new.index(BEGIN):new.index(END)]
            print(f"{path}: {n} rows, table of {which}" + ("" if not args.dry_run else "\n" + table))
    except (BakeError, json.JSONDecodeError, OSError) as exc:
        print(f"bake_dispatch: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
