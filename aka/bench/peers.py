"""`aka bench peers`: our kernels against each op's production peer, from `aka bench run` records.

Per (op, candidate impl): the geomean over shapes of peer time / kernel time, and the worst shape.
A shape's ratio is the candidate record's own `speedup_peer` (the peer timed in the same rounds as
the kernel) where it has one, else the peer record's time over the kernel's (two evaluations).
Shapes where either side failed or was not timed are left out and counted, each side's first
failure named. Ops whose peer was recorded with no kernel beside it get a line under the
table. The same table goes to
a markdown file and, between its markers, into bench/README.md.

Several run directories may hold the same op (a call that timed the shapes an earlier call did
not reach): a kernel record is only ever set against a peer record of its own run (`_run`, set
by `write`), and a shape recorded in more than one run counts once, with its newest record; the
row says how many runs its shapes come from and how many older records it left out.
A figure the harness noted as host-bound (`timing_note` on the record) is named under the table.
`--shapes "op=id,id;op2=id"` keeps only those shapes of the ops it names (the others' records as they
are), and the table's heading says so: a comparison over a stated subset, e.g. fused_moe without its
expert-parallel shapes.
"""
from __future__ import annotations

import json
from pathlib import Path

from aka.evaluate.stats import geomean
from aka.util import fmt

BEGIN, END = "<!-- peers-table:begin -->", "<!-- peers-table:end -->"


def _ratio(cand: dict, peer: dict | None) -> float | None:
    if not cand.get("correct") or not cand.get("time_us"):
        return None
    if cand.get("speedup_peer"):
        return float(cand["speedup_peer"])
    if peer and peer.get("correct") and peer.get("time_us"):
        return float(peer["time_us"]) / float(cand["time_us"])
    return None


def _span(days) -> str | None:
    days = sorted(set(days))
    return None if not days else days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def peer_rows(records: list[dict]) -> list[dict]:
    """One row per (op, candidate impl) that has peer records or peer times."""
    from aka.bench.run import BASELINES
    peers = {(r.get("_run"), r["op"], r["shape"]): r for r in records if r.get("impl") == "peer"}
    newest: dict = {}      # (op, impl, shape) -> the newest record (a later one wins a tie)
    superseded: dict = {}
    for r in records:
        if r.get("impl") not in BASELINES:
            key = (r["op"], r["impl"], r["shape"])
            old = newest.get(key)
            if old is not None:
                superseded[key[:2]] = superseded.get(key[:2], 0) + 1
                if str(old.get("date") or "") > str(r.get("date") or ""):
                    continue
            newest[key] = r
    cands: dict = {}
    for (op, impl, _), r in newest.items():
        cands.setdefault((op, impl), []).append(r)
    out = []
    for (op, impl), rs in sorted(cands.items()):
        prs = [peers.get((r.get("_run"), op, r["shape"])) for r in rs]
        if not any(prs) and not any(r.get("peer_us") for r in rs):
            continue
        ratios = [(_ratio(r, p), r) for r, p in zip(rs, prs)]
        got = [(x, r) for x, r in ratios if x]
        worst = min(got, key=lambda t: t[0]) if got else None
        bad_peer = [p for p in prs if p and not p.get("correct")]
        bad_kernel = [r for r in rs if not r.get("correct") or r.get("status") not in (None, "pass")]
        info = next((p for p in prs if p and p.get("peer")), None) or next((r for r in rs if r.get("peer")), {})
        kernel = next((r.get("candidate") for r in rs if r.get("candidate")), None)
        out.append({"op": op, "impl": impl if not kernel or kernel == op else f"{impl}/{kernel}",
                    "peer": info.get("peer"), "library": info.get("peer_library"),
                    "version": info.get("peer_version"), "shapes": len(rs), "compared": len(got),
                    "geomean": geomean([x for x, _ in got]) if got else None,
                    "worst": worst[0] if worst else None,
                    "worst_shape": (f"{worst[1]['shape']} ({worst[1].get('label', '')})" if worst else None),
                    "peer_failed": len(bad_peer),
                    "peer_failure": (f"{bad_peer[0].get('status')}: {str(bad_peer[0].get('reason', ''))[:90]}"
                                     if bad_peer else ""),
                    "kernel_failed": len(bad_kernel),
                    "kernel_failure": (f"{bad_kernel[0].get('status')}: {str(bad_kernel[0].get('reason', ''))[:90]}"
                                       if bad_kernel else ""),
                    "gpu": next((r.get("gpu") for r in rs if r.get("gpu")), None),
                    "git_sha": ", ".join(sorted({r["git_sha"] for r in rs if r.get("git_sha")})) or None,
                    "date": _span(str(r["date"])[:10] for r in rs if r.get("date")),
                    "runs": len({r.get("_run") for r in rs}), "superseded": superseded.get((op, impl), 0),
                    # shapes whose figure the harness noted as carrying host time (run.py timing_note)
                    "host_bound": [f"{r['shape']} ({who})" for r, p in zip(rs, prs)
                                   for who, x in (("kernel", r), ("peer", p)) if x and x.get("timing_note")]})
    return out


def peer_only(records: list[dict]) -> list[dict]:
    """Ops whose peer has records but no kernel was recorded beside it (a run cut off before the
    kernel's turn): the table has no row for them, so the report says what the peer did."""
    from aka.bench.run import BASELINES
    with_kernel = {r["op"] for r in records if r.get("impl") not in BASELINES}
    by_op: dict[str, list[dict]] = {}
    for r in records:
        if r.get("impl") == "peer" and r["op"] not in with_kernel:
            by_op.setdefault(r["op"], []).append(r)
    out = []
    for op, prs in sorted(by_op.items()):
        timed = sorted(float(r["time_us"]) for r in prs if r.get("correct") and r.get("time_us"))
        info = prs[0]
        out.append({"op": op, "peer": info.get("peer"), "library": info.get("peer_library"),
                    "version": info.get("peer_version"), "shapes": len(prs),
                    "passed": sum(1 for r in prs if r.get("correct")), "timed": len(timed),
                    "median_us": timed[len(timed) // 2] if timed else None})
    return out


def _x(v) -> str:
    return "-" if v is None else f"{fmt(v, '.2f')}x"


def markdown(rows: list[dict], source: str = "", alone: list[dict] | None = None) -> str:
    """One row per (op, kernel). Rows measured from more than one commit (a table merging an older
    call's ops with a newer call's) get a column saying which commit and day each row is from."""
    env = next((r for r in rows if r.get("gpu")), rows[0] if rows else {})
    mixed = len({r.get("git_sha") for r in rows}) > 1 or any(r.get("runs", 1) > 1 for r in rows)
    head = (f"aka's kernel vs the op's peer, peer time / kernel time per shape (> 1: aka faster). "
            f"GPU {env.get('gpu') or 'none'}, git {'per row' if mixed else env.get('git_sha')}"
            + (f", records {source}" if source else "") + "; produced by `aka bench peers`.")
    cols = "| op | kernel | peer | shapes compared | aka vs peer (geomean) | worst shape | peer failed | kernel failed |"
    lines = [head, "", cols + (" measured (git, date) |" if mixed else ""), "|---" * (9 if mixed else 8) + "|"]
    for r in rows:
        peer = f"{r['peer']} ({r['library']} {r['version']})" if r.get("peer") else "-"
        failed = f"{r['peer_failed']}: {r['peer_failure']}" if r["peer_failed"] else "0"
        kfailed = f"{r['kernel_failed']}: {r['kernel_failure']}" if r.get("kernel_failed") else "0"
        lines.append(f"| {r['op']} | {r['impl']} | {peer} | {r['compared']}/{r['shapes']} | "
                     f"{_x(r['geomean'])} | {_x(r['worst'])} {r['worst_shape'] or ''} | {failed} | {kfailed} |"
                     + (f" {r.get('git_sha')}, {r.get('date') or '-'} |" if mixed else ""))
    several = [r for r in rows if r.get("runs", 1) > 1 or r.get("superseded")]
    if several:
        def merged(r):
            runs = f"{r['runs']} run{'s' if r['runs'] > 1 else ''}"
            older = f", {r['superseded']} older records left out" if r.get("superseded") else ""
            return f"{r['op']} {r['impl']}: {runs}{older}"
        lines += ["", "Rows from several runs (each shape's kernel set against the peer of its own run; a shape "
                  "recorded in more than one run counts once, with its newest record): "
                  + "; ".join(merged(r) for r in several) + "."]
    noted = [r for r in rows if r.get("host_bound")]
    if noted:
        lines += ["", "Figures the harness noted as host-bound (the event timing carried the call's host path; "
                  "the ratio is partly the host's): " + "; ".join(
                      f"{r['op']} {r['impl']}: shape{'s' if len(r['host_bound']) > 1 else ''} "
                      + ", ".join(r["host_bound"]) for r in noted) + "."]
    if alone:
        lines += ["", "Peer recorded, no kernel beside it (not compared): " + "; ".join(
            f"{a['op']} ({a['peer']} {a['library']} {a['version']}: passed the check on {a['passed']} of "
            f"{a['shapes']} shapes, timed on {a['timed']}"
            + (f", median {fmt(a['median_us'], '.1f')} us" if a.get("median_us") is not None else "") + ")"
            for a in alone) + "."]
    return "\n".join(lines) + "\n"


def update_readme(readme: Path, table: str) -> bool:
    """Replace the text between the markers (appended with them when absent). Returns whether it changed."""
    text = readme.read_text() if readme.exists() else ""
    block = f"{BEGIN}\n{table}{END}"
    if BEGIN in text and END in text:
        new = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        new = text.rstrip("\n") + "\n\n## aka vs production peers\n\n" + block + "\n"
    if new != text:
        readme.write_text(new)
    return new != text


def parse_shapes(spec: str | None) -> dict[str, set[str]]:
    """'op=1,2;op2=3' -> {op: {'1', '2'}, op2: {'3'}}; a malformed part is a ValueError that names it."""
    out: dict[str, set[str]] = {}
    for part in (spec or "").split(";"):
        if not part.strip():
            continue
        op, eq, ids = part.partition("=")
        got = {i.strip() for i in ids.split(",") if i.strip()}
        if not eq or not op.strip() or not got:
            raise ValueError(f"--shapes: {part.strip()!r} is not OP=ID[,ID...]")
        out[op.strip()] = got
    return out


def write(run_dirs: list[Path], out: Path | None, readme: Path | None, shapes: str | None = None) -> str:
    from aka.bench.run import load_records
    records = [dict(r, _run=i) for i, d in enumerate(run_dirs) for r in load_records(d)]
    if not records:
        raise FileNotFoundError(f"no records in {', '.join(map(str, run_dirs))}")
    keep = parse_shapes(shapes)
    missing = sorted(set(keep) - {r["op"] for r in records})
    if missing:
        raise ValueError(f"--shapes names op(s) with no records here: {', '.join(missing)}")
    records = [r for r in records if r["op"] not in keep or str(r["shape"]) in keep[r["op"]]]
    rows = peer_rows(records)
    source = ", ".join(str(d) for d in run_dirs)
    if keep:
        source += "; shapes kept: " + "; ".join(f"{op} {','.join(sorted(ids, key=lambda x: (len(x), x)))}"
                                                for op, ids in sorted(keep.items()))
    md = markdown(rows, source, peer_only(records))
    if out is not None:
        out.write_text(md)
        out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    if readme is not None:
        update_readme(readme, md)
    return md
