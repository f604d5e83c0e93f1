"""`aka kb ...`: build, query, eval, stats, verify. argparse only at import; the work imports lazily
(chromadb and sentence-transformers take seconds to import)."""
from __future__ import annotations

import sys
from pathlib import Path

# dev sets, each reported apart: symptom queries, and queries whose answers are kernel files
DEV_FILES = ("dev_queries.yaml", "dev_kernel_queries.yaml", "dev3_queries.yaml", "dev4_queries.yaml",
             "dev5_queries.yaml", "dev6_queries.yaml")
# held-out sets, each reported apart (aggregates only): written by different people at different times
HELDOUT_FILES = ("heldout_queries.yaml", "heldout2_queries.yaml", "heldout3_queries.yaml", "heldout4_queries.yaml",
                 "heldout5_queries.yaml", "heldout6_queries.yaml", "heldout7_queries.yaml", "heldout8_queries.yaml")


def add_parser(sub) -> None:
    kb = sub.add_parser("kb", help="knowledge base: build the index, query it, evaluate retrieval, verify kernels")
    ks = kb.add_subparsers(dest="kb_cmd", required=True)

    def common(p):
        p.add_argument("--kb", default=None, help="knowledge-base root (default: knowledge_base/ of the repo)")
        p.add_argument("--cache", default=None, help="index directory (default: $AKA_CACHE_DIR/kb or ~/.cache/aka/kb)")

    b = ks.add_parser("build", help="(re)build the Chroma index incrementally")
    common(b)
    b.set_defaults(func=cmd_build)

    q = ks.add_parser("query", help="rank notes and kernels for a question")
    common(q)
    q.add_argument("text", nargs="+", help="the question or symptom")
    q.add_argument("-k", type=int, default=8, help="rows to show")
    q.add_argument("--op", default=None, help="only chunks whose ops include OP")
    q.add_argument("--layer", default=None, choices=["hardware", "triton", "patterns", "ops", "kernels"])
    q.add_argument("--category", default=None, help="only chunks of this category (e.g. Normalization)")
    q.add_argument("--technique", default=None, help="only chunks listing this technique")
    q.add_argument("--hardware", default=None, help="only chunks for this GPU (or for any GPU), e.g. H200")
    q.add_argument("--device", default=None,
                   help="the GPU in hand (e.g. H200): its notes rank first among GPU-specific ones when the "
                        "question names no GPU")
    q.add_argument("--exclude-op", default=None, help="leave out every chunk whose ops include OP (leave-one-out)")
    q.add_argument("--mode", default=None, choices=["hybrid", "embedding", "lexical"], help="ranker")
    q.add_argument("--chunks", action="store_true", help="show every chunk, not one per note")
    q.add_argument("--text", dest="show_text", action="store_true", help="print the chunk texts under the table")
    q.set_defaults(func=cmd_query)

    e = ks.add_parser("eval", help="recall@5, MRR and top-1 of the three rankers on the labelled queries")
    common(e)
    e.add_argument("--queries", default=None, help="tuning queries (default: knowledge_base/queries.yaml)")
    e.add_argument("--heldout", default=None, action="append",
                   help="held-out queries, reported apart; repeat for several files, each its own section "
                        f"(default: those of {', '.join(HELDOUT_FILES)} in the knowledge-base root that exist; "
                        "'-' for none)")
    e.add_argument("--dev", default=None, action="append",
                   help="dev queries, reported apart; repeat for several files (default: those of "
                        f"{', '.join(DEV_FILES)} in the knowledge-base root that exist; '-' for none)")
    e.add_argument("--out", default=None,
                   help="also write the markdown report here (the committed one: --out knowledge_base/EVAL.md); "
                        "default: print only, so a trial run never rewrites a tracked file")
    e.add_argument("-k", type=int, default=5)
    e.add_argument("--show", action="store_true",
                   help="print each query's top k (tuning and dev sets; the held-out set's are never shown)")
    e.set_defaults(func=cmd_eval)

    s = ks.add_parser("stats", help="counts of notes and kernels, ops covered, verification verdicts")
    common(s)
    s.add_argument("--json", action="store_true", help="print JSON instead of tables")
    s.set_defaults(func=cmd_stats)

    v = ks.add_parser("verify", help="evaluate every kernel and write results/kb/kernels/<op>/<kernel>.results.json")
    common(v)
    v.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu: small shapes under the interpreter")
    v.add_argument("--op", default=None, help="only kernels of this op (or of a comma list of ops)")
    v.add_argument("--force", action="store_true", help="re-run kernels whose result is current")
    v.add_argument("--shapes", default=None, help="shape ids, 'first', 'last', 'small' or 'all' (default: cpu small, cuda all)")
    v.add_argument("--timeout", type=float, default=900.0, help="seconds per kernel evaluation")
    v.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole run: a kernel whose last recorded GPU evaluation would not fit "
                        "in what is left is not started (deferred), each evaluation stops at the budget's end "
                        "and nothing is recorded for one stopped there")
    v.add_argument("--jobs", type=int, default=1,
                   help="kernels evaluated at once; on one GPU their checks overlap and their timings "
                        "take turns (aka/evaluate/gpulock.py)")
    v.add_argument("--no-timing", action="store_true", help="correctness verdicts only (GPU: no timing)")
    v.add_argument("--no-baselines", action="store_true",
                   help="GPU: time the kernels only; eager and torch.compile figures come from the baseline cache "
                        "where it has them (`aka bench run --impl reference,compile` fills it), else the record has "
                        "none. For an op whose torch.compile takes minutes a shape (fused_moe)")
    v.add_argument("--unlock-compiles", action="store_true",
                   help="GPU: let the GPU lock go while a kernel compiles in its runner (faster with --jobs; "
                        "for a knowledge base you trust: a kernel could use it to run GPU work during another's timing)")
    v.add_argument("--first", default=None, help="comma list of ops whose kernels go first (then the rest); outranks --missing-first and "
                        "--oldest-first, which order the work within each group")
    v.add_argument("--missing-first", action="store_true",
                   help="kernels with no result on this device first (then the rest, in order)")
    v.add_argument("--oldest-first", action="store_true",
                   help="kernels with no result on this device first, then the oldest results (a partial "
                        "re-verification after a harness change reaches the stalest verdicts)")
    v.add_argument("--reverse", action="store_true",
                   help="the rest in reverse op order (meets a `bench run` going forward mid-suite, "
                        "so the two share the baseline cache instead of timing the same shapes twice)")
    v.set_defaults(func=cmd_verify)

    b = ks.add_parser("best", help="per op, the best kernel on a GPU from the recorded verify results")
    common(b)
    b.add_argument("--device", default="cuda", help="whose recorded results (default cuda)")
    b.add_argument("--gpu", default=None,
                   help="only results recorded on a GPU whose name contains this (e.g. H200): one GPU's table")
    b.add_argument("--out", default=None, help="also write the markdown table here")
    b.set_defaults(func=cmd_best)

    c = ks.add_parser("compile-check", help="compile every kernel for a GPU target without a GPU (errors, regs, "
                                            "spills, narrow memory instructions)")
    c.add_argument("--op", default=None, help="only kernels of this op")
    c.add_argument("--kernel", default=None, help="only this kernel (its file stem)")
    c.add_argument("--shapes", default=None,
                   help="bench shape ids to compile for (default: the op's small shapes; full-size shapes "
                        "specialise like the GPU run: 16-divisible sizes vectorise)")
    c.add_argument("--sm", type=int, default=90, help="compute capability (default 90: H100/H200)")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="compile with this AKA_PARAMS entry changed (repeat for several)")
    c.add_argument("--ops", type=int, default=0, metavar="N",
                   help="also list each launch's N most frequent SASS opcodes")
    c.set_defaults(func=cmd_compile_check)


def _fmt_loops(loops: list[int], most: int = 4) -> str:
    """Loop bodies in program order, in SASS instructions; past `most`, how many more."""
    if not loops:
        return "-"
    shown = ",".join(str(n) for n in loops[:most])
    return shown + (f" +{len(loops) - most}" if len(loops) > most else "")


def cmd_compile_check(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from aka.kb.compile_check import compile_check, dot_notes, wait_notes
    from aka.problem import REPO_ROOT
    from aka.util import parse_assignments
    kernels = sorted((REPO_ROOT / "knowledge_base" / "kernels").glob(f"{args.op or '*'}/{args.kernel or '*'}.py"))
    if not kernels:
        print(f"no kernel matches op {args.op or '*'} / kernel {args.kernel or '*'}", file=sys.stderr)
        return 2
    shape_ids = args.shapes.split(",") if args.shapes else None
    params = {}
    try:
        for kv in args.set:
            params.update(parse_assignments(kv))
    except ValueError as e:
        print(f"--set: {e}", file=sys.stderr)
        return 2
    title = f"offline compile for sm_{args.sm}" + (f", shapes {args.shapes}" if args.shapes else "")
    t = Table(title=title + (f", {', '.join(f'{k}={v}' for k, v in params.items())}" if params else ""))
    # ld.g: global loads in the PTX, scalar / vector; smem<4B: shared loads / stores under 4 bytes
    # (compile_check.memory_ops: static counts, each instruction once)
    # SASS: instructions in the kernel; loops: each loop body's instructions (compile_check.parse_sass)
    # dots: each tensor-core dot's output M x N, its warps over M x N, and xK where it is computed K times
    # (compile_check.mma_dots); wgmma: its wgmma groups and the N of each wait_group N in program order
    # (compile_check.wgmma_waits: all 0 = the warpgroup waits for every group at once)
    cols = ["kernel", "launch", "warps", "smem B", "regs", "spill B", "CTAs/SM", "ld.g s/v", "smem<4B ld/st",
            "SASS", "loops", "dots", "wgmma"] + (["top SASS ops"] if args.ops else []) + ["error"]
    for col in cols:
        t.add_column(col)
    failed, dup, ser = 0, [], []
    for k in kernels:
        try:
            r = compile_check(k.parent.name, str(k), shape_ids, capability=args.sm, params=params or None,
                              sass=True)
        except ValueError as e:
            print(str(e), file=sys.stderr)
            return 2
        failed += not r.ok
        for lr in r.launches or [None]:
            if lr is None:
                t.add_row(f"{k.parent.name}/{k.stem}", *["-"] * (len(cols) - 2), r.error or "")
                continue
            m, sa = lr.mem or {}, lr.sass or {}
            dup += [f"{k.parent.name}/{k.stem} {lr.kernel} ({lr.num_warps} warps): {n}" for n in dot_notes(lr.dots)]
            if wait_notes(lr.wgmma):
                ser.append(f"{k.parent.name}/{k.stem} {lr.kernel} ({lr.num_warps} warps, "
                           f"{lr.ctas_per_sm if lr.ctas_per_sm is not None else '?'} per SM)")
            top = ", ".join(f"{op} {n}" for op, n in list(sa.get("ops", {}).items())[:args.ops])
            t.add_row(f"{k.parent.name}/{k.stem}", lr.kernel, str(lr.num_warps), str(lr.shared_bytes),
                      str(lr.registers), str(lr.spill_bytes), str(lr.ctas_per_sm if lr.ctas_per_sm is not None else "-"),
                      f"{m.get('ld_global_scalar', '-')}/{m.get('ld_global_vector', '-')}",
                      f"{m.get('ld_shared_narrow', '-')}/{m.get('st_shared_narrow', '-')}",
                      str(sa.get("instructions", "-")), _fmt_loops(sa.get("loops", [])), _fmt_dots(lr.dots),
                      _fmt_wgmma(lr.wgmma),
                      *([top or "-"] if args.ops else []), lr.error or "")
    Console(soft_wrap=True).print(t)
    print(f"{len(kernels)} kernels, {failed} with compile errors")
    if dup:
        print(f"{len(dict.fromkeys(dup))} dot(s) computed more than once:")
        for line in dict.fromkeys(dup):
            print(f"  {line}")
    if ser:
        print(f"{len(dict.fromkeys(ser))} launch(es) wait for every wgmma group at once (wait_group 0 only; "
              "only other warpgroups or programs on the SM overlap their tensor-core work):")
        for line in dict.fromkeys(ser):
            print(f"  {line}")
    return 1 if failed else 0


def _fmt_wgmma(w: dict) -> str:
    """'2: 0,1': the wgmma groups committed, then the N of each wait_group N ('-' without wgmma)."""
    return f"{w['commits']}: {','.join(map(str, w.get('waits') or [])) or '-'}" if w else "-"


def _fmt_dots(dots: list[dict]) -> str:
    """'64x32@8x1 x2, 64x512@4x2': each dot's output, its warps over M x N, and xK when computed K times."""
    return ", ".join(f"{d['m']}x{d['n']}@{d['warps'][0]}x{d['warps'][1]}" + (f" x{d['dup']}" if d["dup"] > 1 else "")
                     for d in dots) or "-"


def _index(args):
    from aka.kb.index import KBIndex
    return KBIndex(args.kb, args.cache)


def _root(args) -> Path:
    from aka.kb.index import DEFAULT_KB
    return Path(args.kb or DEFAULT_KB).resolve()


def _console():
    from rich.console import Console
    return Console()


def cmd_build(args) -> int:
    console = _console()
    ix = _index(args)
    with console.status("embedding…") as st:
        rep = ix.build(on_progress=lambda n, tot: st.update(f"embedding {n}/{tot} chunks"))
    console.print(f"{ix.root} -> {ix.cache_dir} [{ix.name}]", markup=False)
    console.print(rep.line())
    return 0


def cmd_query(args) -> int:
    from rich.table import Table

    from aka.kb.index import DEFAULT_MODE, Filters, one_per_doc
    console = _console()
    ix = _index(args)
    if ix.ensure_built():
        console.print("[dim]index built first[/]")
    f = Filters(layer=args.layer, op=args.op, category=args.category, technique=args.technique,
                hardware=args.hardware, exclude_op=args.exclude_op)
    mode = args.mode or DEFAULT_MODE
    res = ix.search(" ".join(args.text), mode=mode, filters=f, device=args.device)
    rows = res[: args.k] if args.chunks else one_per_doc(res, args.k)
    from aka.console import key_column, print_table
    t = Table(title=f"{mode}: {' '.join(args.text)}")
    t.add_column("rank", justify="right", no_wrap=True)
    key_column(t, "id", [r.doc_id for r in rows])  # the id is what `--op`, notes and kernels are found by
    for col in ("section", "layer", "score", "emb", "lex"):
        t.add_column(col, justify="right" if col in ("score", "emb", "lex") else "left", no_wrap=True,
                     overflow="ellipsis", max_width=22 if col == "section" else None)
    for i, r in enumerate(rows, 1):
        t.add_row(str(i), r.doc_id, r.meta.get("section", ""), r.meta.get("layer", ""), f"{r.score:.4g}",
                  str(r.ranks.get("embedding", "-")), str(r.ranks.get("lexical", "-")))
    print_table(t, console)
    if args.show_text:
        for r in rows:
            console.rule(r.id)
            console.print(r.text, markup=False, highlight=False)
    return 0


def cmd_eval(args) -> int:
    from rich.table import Table

    from aka.kb import evalset
    from aka.kb.index import DEFAULT_MODE, model_name
    from aka.errors import UserError
    console = _console()
    # the default dev and held-out files are the base's own (knowledge_base/*_queries.yaml for ours)
    extra = []
    devs = [None] if not args.dev else [None if d == "-" else Path(d) for d in args.dev]
    if devs == [None] and not args.dev:
        extra += [("dev", _root(args) / n) for n in DEV_FILES if (_root(args) / n).exists()]
    for path in (d for d in devs if d is not None):
        if not path.exists():
            raise UserError(f"no dev query file at {path}")
        extra.append(("dev", path))
    if not args.heldout:
        extra += [("held-out", _root(args) / n) for n in HELDOUT_FILES if (_root(args) / n).exists()]
    for given in (h for h in args.heldout or [] if h != "-"):
        if not Path(given).exists():
            raise UserError(f"no held-out query file at {given}")
        extra.append(("held-out", Path(given)))
    try:  # a bad query file or label: one line, exit 2 (queries are read before the slow build)
        sets = [evalset.QuerySet("tuning", _shown(args.queries or evalset.DEFAULT_QUERIES),
                                 evalset.load_queries(args.queries))]
        sets += [evalset.QuerySet(name, _shown(path), evalset.load_queries(path)) for name, path in extra]
        ix = _index(args)
        console.print(ix.build().line())
        for qs in sets:
            qs.results = evalset.run(ix, qs.queries, k=args.k)
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None
    for qs in sets:
        t = Table(title=f"{qs.name}: {len(qs.queries)} queries ({qs.source})")
        for col in ("ranker", f"recall@{args.k}", "MRR", "top-1"):
            t.add_column(col)
        for r in qs.results:
            t.add_row(r.mode + (" (default)" if r.mode == DEFAULT_MODE else ""), f"{r.recall:.3f}", f"{r.mrr:.3f}",
                      f"{r.top1:.3f}")
        console.print(t)
        if args.show and qs.name != "held-out":  # held-out misses would steer tuning
            for r in qs.results:
                console.rule(f"{qs.name}: {r.mode}")
                for p in r.per_query:
                    mark = "ok  " if p["recall"] == 1 and p["top1"] else "MISS"
                    console.print(f"{mark} {p['q'][:70]!r} -> {', '.join(p['top'])}", markup=False, highlight=False)
    if args.out not in (None, "-"):
        out = evalset.write_report(args.out, sets, evalset.kb_counts(ix),
                                   model_name(), args.k, default_mode=DEFAULT_MODE)
        console.print(f"wrote {out}")
    else:
        console.print(f"[dim]not written: --out {evalset.DEFAULT_REPORT.relative_to(evalset.REPO_ROOT)} "
                      "updates the committed report[/]")
    return 0


def _shown(path) -> str:
    from aka.problem import REPO_ROOT
    p = Path(path).resolve()
    return str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else str(p)


def cmd_stats(args) -> int:
    import json

    from rich.table import Table

    from aka.kb.verify import stats
    st = stats(_root(args))
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    console = _console()
    console.print(f"notes: {st['notes_total']} ({', '.join(f'{k} {v}' for k, v in st['notes'].items())}); "
                  f"kernels: {st['kernels_total']} for {len(st['ops_with_kernel'])} ops; "
                  f"ops with a playbook or pattern note: {len(st['ops_with_notes'])}")
    console.print(f"benchmark ops without a kernel ({len(st['bench_ops_without_kernel'])}/{len(st['bench_ops'])}): "
                  f"{', '.join(st['bench_ops_without_kernel']) or 'none'}")
    gpus = list(st["verified_by_gpu"])
    t = Table(title=f"kernels (verified: cpu {st['verified']['cpu']}"
              + "".join(f", {g} {n}" for g, n in st["verified_by_gpu"].items()) + ")")
    for col in ("kernel", "op", "cpu", *(g.removeprefix("NVIDIA ") for g in gpus)):
        t.add_column(col, no_wrap=col == "kernel")
    for k in st["kernels"]:
        t.add_row(k["id"].removeprefix("kernels/"), k["op"], k["verdicts"].get("cpu", "-"),
                  *(k["gpus"].get(g, "-") for g in gpus))
    console.print(t)
    return 0


def cmd_verify(args) -> int:
    from aka.kb.verify import DEFERRED, verify
    console = _console()
    if args.device == "cuda":
        from aka.evaluate.api import cuda_available
        if not cuda_available():
            from aka.errors import UserError
            raise UserError("aka kb verify --device cuda needs a CUDA GPU")
    if args.budget is not None and args.budget <= 0:
        from aka.errors import UserError
        raise UserError(f"--budget must be a positive number of seconds, not {args.budget:g}")
    out = verify(_root(args), args.device, op=args.op, force=args.force, console=console, shapes=args.shapes,
                 timeout_s=args.timeout, jobs=args.jobs, timing=not args.no_timing,
                 first=[o for o in (args.first or "").split(",") if o], reverse=args.reverse,
                 missing_first=args.missing_first, oldest_first=args.oldest_first,
                 unlock_compiles=args.unlock_compiles, budget_s=args.budget, baselines=not args.no_baselines)
    bad = [(p, s) for p, s in out if s not in ("pass", "skipped", DEFERRED)]
    deferred = sum(s == DEFERRED for _, s in out)
    console.print(f"{len(out)} kernels: {sum(s == 'pass' for _, s in out)} pass, "
                  f"{sum(s == 'skipped' for _, s in out)} skipped (current), {len(bad)} not passing"
                  + (f", {deferred} deferred (would not finish within the budget)" if deferred else ""))
    for p, s in bad:
        console.print(f"  {p.parent.name}/{p.name}: {s}", markup=False)
    if deferred:
        console.print("  deferred: " + ", ".join(f"{p.parent.name}/{p.stem}" for p, s in out if s == DEFERRED),
                      markup=False, highlight=False)
    return 1 if bad else 0



def cmd_best(args) -> int:
    from aka.kb.best import best_table, markdown, scan, stale_leaders, suite_estimate, unverified
    console = _console()
    verdicts = scan(_root(args), args.device, args.gpu)
    rows = best_table(_root(args), args.device, args.gpu, verdicts)
    if not rows:
        on = f" on a GPU named *{args.gpu}*" if args.gpu else ""
        console.print(f"no current, passing {args.device} results{on}: run `aka kb verify --device {args.device}` first")
        return 1
    gpus = sorted({str(r["gpu"]) for r in rows})
    dates = sorted(str(r["date"]) for r in rows if r.get("date"))
    prov = f"GPU {', '.join(gpus)}; results recorded {dates[0]} to {dates[-1]}" if dates else f"GPU {', '.join(gpus)}"
    missing, ops = unverified(_root(args), args.device, args.gpu, verdicts)
    from aka.bench.suite import load_suite
    text = markdown(rows, prov, (len(missing), len(verdicts), ops),
                    suite=suite_estimate(rows, load_suite().weights),
                    stale=stale_leaders(_root(args), rows, args.device, args.gpu, verdicts))
    if args.out:
        Path(args.out).write_text(text)
        console.print(f"wrote {args.out}")
    console.print(text, markup=False, highlight=False)
    return 0
