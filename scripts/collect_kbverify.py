"""Tabulate an H200 `aka kb verify` (the results/kb copy it wrote, brought back in a tarball) and
fold its verdicts into the committed records where they add something.

    python scripts/collect_kbverify.py LABEL=DIR [LABEL=DIR ...] --out results/h200/.../kbverify.tsv [--merge]

DIR holds results/kb/kernels/<op>/<kernel>.results.json. A kernel seen in several DIRs takes the
newest verdict; rows already in --out for kernels no DIR covers are kept. --merge writes the cuda result into results/kb/ as the primary verdict only where
the committed one is missing, covers fewer shapes than 'all', or judged another source (`aka kb
best` ranks current all-shape results; a one-shape verdict never replaces one, nor does any over a
current all-shape verdict of the same source), and else as its GPU model's verdict (the record's
"gpus", unless a newer one of that GPU is there).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from aka.kb.verify import put_cuda  # noqa: E402  (the record layout is the harness's)
COLS = ("kernel", "call", "source", "status", "shape", "time_us", "speedup_eager", "speedup_compile", "reason")


def _cuda(path: Path) -> dict | None:
    return json.loads(path.read_text()).get("devices", {}).get("cuda")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+", help="LABEL=DIR")
    ap.add_argument("--out", required=True)
    ap.add_argument("--since", default="", help="only verdicts dated at or after this ISO time")
    ap.add_argument("--merge", action="store_true")
    ap.add_argument("--into", default=str(REPO / "results" / "kb"), help="the records --merge writes (default: results/kb)")
    a = ap.parse_args(argv)
    seen: dict[str, tuple[str, Path, dict]] = {}
    for item in a.dirs:
        label, _, d = item.partition("=")
        for p in sorted(Path(d).glob("results/kb/kernels/*/*.results.json")):
            r = _cuda(p)
            if not r or r.get("date", "") < a.since:
                continue
            k = f"{p.parent.name}/{p.name.removesuffix('.results.json')}"
            if k not in seen or r["date"] > seen[k][2]["date"]:
                seen[k] = (label, p, r)
    rows = ["\t".join(COLS)]
    merged = 0
    for k in sorted(seen):
        label, p, r = seen[k]
        s = (r.get("shapes") or [{}])[0]
        nums = [f"{s[f]:.2f}" if s.get(f) else "" for f in ("time_us", "speedup_eager", "speedup_compile")]
        rows.append("\t".join(str(x) for x in (k, label, r.get("git_sha", ""), r["status"], s.get("label", ""),
                                               *nums, r.get("reason", ""))))
        if a.merge:
            dest = Path(a.into) / "kernels" / p.parent.name / p.name
            have = json.loads(dest.read_text()) if dest.exists() else {"kernel": f"kernels/{k}", "op": p.parent.name, "devices": {}}
            cur = have["devices"].get("cuda") or {}
            # the new verdict goes in as the primary where the committed one is missing, covers fewer
            # shapes, or judged another source (stale: `aka kb best` ignores it); never over a current
            # all-shape verdict of the same source (it may be the home GPU's). Else it is kept as its
            # GPU model's verdict (aka.kb.verify.put_cuda: `aka kb best --gpu` and a verify on that
            # GPU read it), unless a newer one of that model is there.
            replace = cur.get("shapes_spec") != "all" or cur.get("source_hash") != r.get("source_hash")
            if put_cuda(have, r, primary=replace):
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(json.dumps(have, indent=2) + "\n")
                merged += 1
    # rows an earlier run wrote to the same table for kernels this run does not cover stay (one run
    # per device call used to leave only the last call's rows: results/h100/device-2026-12-06g)
    kept = []
    out = Path(a.out)
    if out.exists():
        lines = out.read_text().splitlines()
        if lines and lines[0] == rows[0]:
            kept = [ln for ln in lines[1:] if ln.strip() and ln.split("\t", 1)[0] not in seen]
    body = sorted(rows[1:] + kept)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join([rows[0], *body]) + "\n")
    n = len(seen)
    print(f"{n} kernels, {sum(1 for v in seen.values() if v[2]['status'] == 'pass')} pass -> {a.out}"
          + (f" (beside {len(kept)} rows of earlier runs)" if kept else "")
          + (f"; {merged} records merged into results/kb" if a.merge else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
