"""A model of evaluations sharing one GPU through aka's GPU lock (aka/evaluate/gpulock.py), on CPU.

Each job stands for one evaluation: per shape, a stretch of checks (shared lock, work in pieces
with a breath between them), then timing. Work is `time.sleep`, so the model measures the lock's
coordination, not the host: what several jobs lose to waiting for each other. Two timing layouts:

  per-round: a shared refresh and then an exclusive hold for each of 5 rounds, plus one for
             preparation (timing before afe14af)
  one-hold:  the 4 refreshes made ahead under the shared lock, then preparation and all rounds in
             one exclusive hold (timing.ShapeTimer.run since afe14af)

    python experiments/lock_model.py [--jobs 8] [--shapes 6] > results/cpu/lock_model.md

Bound: all jobs' exclusive time in series plus one job's shared work (shared work overlaps other
jobs' shared work, never an exclusive hold).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PIECE_S, PIECES = 0.025, 12      # checks: 12 pieces of 25 ms per shape
REFRESH_S, ROUND_S, PREP_S = 0.03, 0.012, 0.02
ROUNDS = 5


def job(root: str, layout: str, shapes: int, out, poll_max: float, ready, go) -> None:
    from aka.evaluate import gpulock
    gpulock._compile_hooks(lambda: None, lambda: None)()  # its imports (torch, triton) before the clock
    gpulock.POLL_S = (gpulock.POLL_S[0], poll_max)
    lk = gpulock.GpuLock(root, "model")
    ready.put(1)
    go.wait()
    t0 = time.monotonic()
    for _ in range(shapes):
        with lk.shared("checks"):
            for _ in range(PIECES):
                time.sleep(PIECE_S)
                lk.breathe()
        if layout == "per-round":
            with lk.exclusive():
                time.sleep(PREP_S)
            for r in range(ROUNDS):
                if r:
                    with lk.shared("refresh"):
                        time.sleep(REFRESH_S)
                with lk.exclusive():
                    time.sleep(ROUND_S)
        else:
            with lk.shared("refresh"):
                for _ in range(ROUNDS - 1):
                    time.sleep(REFRESH_S)
                    lk.breathe()
            with lk.exclusive():
                time.sleep(PREP_S + ROUNDS * ROUND_S)
    out.put((time.monotonic() - t0, lk.waited_s, lk.held_s))


def run(layout: str, jobs: int, shapes: int, poll_max: float) -> dict:
    with tempfile.TemporaryDirectory() as root:
        q, ready, go = mp.Queue(), mp.Queue(), mp.Event()
        ps = [mp.Process(target=job, args=(root, layout, shapes, q, poll_max, ready, go)) for _ in range(jobs)]
        for p in ps:
            p.start()
        for _ in ps:
            ready.get()
        t0 = time.monotonic()
        go.set()
        res = [q.get() for _ in ps]
        for p in ps:
            p.join()
        wall = time.monotonic() - t0
    # Bound: every job's exclusive time in series (no other work may overlap it), plus one job's
    # shared work (the jobs' shared work can all overlap, but not with any exclusive hold).
    excl = jobs * shapes * (PREP_S + ROUNDS * ROUND_S)
    shared = shapes * (PIECES * PIECE_S + (ROUNDS - 1) * REFRESH_S)
    return {"layout": layout, "jobs": jobs, "poll_max": poll_max, "wall_s": wall, "ideal_s": excl + shared,
            "wait_s": sum(r[1] for r in res) / jobs, "held_s": sum(r[2] for r in res) / jobs}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--shapes", type=int, default=6)
    ap.add_argument("--poll-max", default="0.002", help="comma-separated longest waits between lock tries (s)")
    a = ap.parse_args()
    print("| layout | jobs | poll max ms | wall s | bound s | wall / bound | mean wait s | mean exclusive s |")
    print("|---|---|---|---|---|---|---|---|")
    for poll in [float(x) for x in a.poll_max.split(",")]:
        for jobs in sorted({1, a.jobs}):
            for layout in ("per-round", "one-hold"):
                r = run(layout, jobs, a.shapes, poll)
                print(f"| {r['layout']} | {r['jobs']} | {poll * 1000:g} | {r['wall_s']:.2f} | {r['ideal_s']:.2f} | "
                  f"{r['wall_s'] / r['ideal_s']:.2f} | {r['wait_s']:.2f} | {r['held_s']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
