"""Per-shape times of an `aka optimize` run's candidates side by side, with the peer each was timed beside.

    python scripts/candidates_table.py RUN_DIR [--ids c0001,c0002]

Reads RUN_DIR/candidates/*.json (what the run store wrote) and prints a markdown table: per shape,
each candidate's median time (the harness's), the ratio of each later candidate to the first, and
the peer's time from the last candidate's own rounds; then the provenance line (GPU, torch,
triton, git, the candidates' objective and decision) and each candidate's geomean and worst ratio
to its peer. The report of the run shows the incumbent alone; this is the comparison.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def load(run: Path, ids: list[str] | None) -> list[dict]:
    files = sorted((run / "candidates").glob("c*.json"))
    cands = [json.loads(f.read_text()) for f in files]
    cands = [c for c in cands if c.get("result") and (ids is None or c["id"] in ids)]
    if not cands:
        raise SystemExit(f"candidates_table: no evaluated candidate in {run / 'candidates'}")
    return cands


def table(cands: list[dict]) -> str:
    shapes = {c["id"]: {s["id"]: s for s in c["result"]["shapes"]} for c in cands}
    first, last = cands[0]["id"], cands[-1]["id"]
    ids = list(shapes[first])
    head = ["shape"] + [f"{c['id']} us" for c in cands]
    head += [f"{c['id']} / {first}" for c in cands[1:]] + [f"peer us ({last}'s rounds)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sid in ids:
        row = [f"{sid} {shapes[first][sid].get('label') or ''}".strip()]
        t = [(shapes[c["id"]].get(sid) or {}).get("time_us") for c in cands]
        row += [f"{v:.1f}" if v else "-" for v in t]
        row += [f"{v / t[0]:.3f}" if v and t[0] else "-" for v in t[1:]]
        peer = (shapes[last].get(sid) or {}).get("peer_us")
        row.append(f"{peer:.1f}" if peer else "-")
        lines.append("| " + " | ".join(row) + " |")
    env = cands[0]["result"].get("env") or {}
    lines += ["", f"GPU {env.get('gpu')}, torch {env.get('torch')}, triton {env.get('triton')}, git {env.get('git_sha')}."]
    for c in cands:
        r = [s["peer_us"] / s["time_us"] for s in c["result"]["shapes"] if s.get("peer_us") and s.get("time_us")]
        vs = (f"{math.exp(sum(map(math.log, r)) / len(r)):.3f}x peer geomean over {len(r)} shapes, worst {min(r):.3f}x"
              if r else "no peer times")
        score = (c.get("score") or {}).get("value")
        lines.append(f"- {c['id']}: objective {score:.3f}, {vs}; decision: {(c.get('meta') or {}).get('decision', '-')}"
                     if score is not None else f"- {c['id']}: {c['result'].get('status')}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--ids", default=None, help="comma list of candidate ids (default: every evaluated one)")
    a = ap.parse_args(argv)
    cands = load(Path(a.run), a.ids.split(",") if a.ids else None)
    print(table(cands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
