"""Restamp recorded kernel verdicts from whole-file hashes to code hashes (aka.kb.verify.source_hash).

    python scripts/restamp_code_hashes.py [--kb knowledge_base] [--dry-run]

Until 2026-12-04 a verdict in results/kb/kernels/ named its kernel by the hash of the whole file, so
rewording a kernel's docstring (its notes and front matter) made its H200 verdicts stale. The hash
is now of the code alone. An entry is restamped only when the code it was measured on is byte for
byte the code in the file now: its stored hash must be the whole-file hash of some version of the
file in git history or in the work tree, and that version's code (the file without its module
docstring) must equal today's. Every other entry is left as it is (stale stays stale). Prints one
line per restamped entry and a count.
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aka.kb.verify import code_bytes, kernel_paths, read_results, results_path, source_hash, write_result  # noqa: E402


def _full(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


def versions(kernel: Path) -> list[bytes]:
    """Every committed version of the file (newest first), then the work tree's; git runs in the
    kernel's folder, so any repository holding the knowledge base works."""
    cwd, name = kernel.resolve().parent, kernel.name
    shas = subprocess.run(["git", "log", "--format=%H", "--", name], cwd=cwd, capture_output=True,
                          text=True).stdout.split()
    out = []
    for sha in shas:
        got = subprocess.run(["git", "show", f"{sha}:./{name}"], cwd=cwd, capture_output=True)
        if got.returncode == 0:
            out.append(got.stdout)
    return out + [kernel.read_bytes()]


def restamp(kernel: Path, root: Path, dry_run: bool = False) -> list[str]:
    if not results_path(kernel).exists():
        return []
    now = kernel.read_bytes()
    new = source_hash(kernel)
    same_code = {_full(v) for v in versions(kernel) if code_bytes(v) == code_bytes(now)}
    done = []
    for device, entry in (read_results(kernel).get("devices") or {}).items():
        old = entry.get("source_hash")
        if old != new and old in same_code:
            done.append(f"{kernel.parent.name}/{kernel.stem} {device}: {old} -> {new}")
            if not dry_run:
                write_result(kernel, root, device, dict(entry, source_hash=new))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb", default=str(ROOT / "knowledge_base"))
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    root = Path(args.kb)
    lines = [ln for k in kernel_paths(root) for ln in restamp(k, root, args.dry_run)]
    print("\n".join(lines + [f"{len(lines)} entries restamped" + (" (dry run)" if args.dry_run else "")]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
