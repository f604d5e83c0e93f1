"""scripts/restamp_code_hashes.py on a throwaway git repository: a verdict recorded under the old
whole-file hash is restamped when only the kernel's docstring changed since, and left stale when
its code changed; aka.kb.verify.source_hash ignores the module docstring."""
import json
import subprocess

from aka.evaluate.loader import import_file
from aka.kb.verify import code_bytes, results_path, source_hash
from aka.problem import REPO_ROOT

restamp = import_file(REPO_ROOT / "scripts" / "restamp_code_hashes.py", "_restamp_script")
KERNEL = '"""\n---\nid: kernels/toy/k\nop: toy\n---\n{doc}\n"""\nimport torch\n\nX = {x}\n'


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _full(text: str) -> str:
    return restamp._full(text.encode())


def test_docstring_edits_keep_verdicts_code_edits_do_not(tmp_path):
    kb = tmp_path / "knowledge_base"
    (kb / "kernels" / "toy").mkdir(parents=True)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    paths = {n: kb / "kernels" / "toy" / f"{n}.py" for n in ("doc_only", "code_too")}
    old = KERNEL.format(doc="First words.", x=1)
    for p in paths.values():
        p.write_text(old)
        res = results_path(p)
        res.parent.mkdir(parents=True, exist_ok=True)
        res.write_text(json.dumps({"devices": {"cuda": {"status": "pass", "source_hash": _full(old)}}}))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "v1")
    paths["doc_only"].write_text(KERNEL.format(doc="Reworded, with more symptoms.", x=1))
    paths["code_too"].write_text(KERNEL.format(doc="Reworded.", x=2))
    assert source_hash(paths["doc_only"]) == _full("import torch\n\nX = 1\n")
    assert code_bytes(paths["code_too"].read_bytes()) == b"import torch\n\nX = 2\n"
    assert restamp.main(["--kb", str(kb)]) == 0
    got = {n: json.loads(results_path(p).read_text())["devices"]["cuda"]["source_hash"] for n, p in paths.items()}
    assert got["doc_only"] == source_hash(paths["doc_only"])      # the same code was measured
    assert got["code_too"] == _full(old)                         # stale stays stale
    assert restamp.main(["--kb", str(kb)]) == 0                  # idempotent
