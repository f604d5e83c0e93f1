"""Subcommands beyond `eval` register here, each importing its module lazily."""
from __future__ import annotations


def register(sub) -> None:
    h = sub.add_parser("hw", help="hardware: show the detected GPU and its ceilings, or calibrate")
    h.add_argument("action", choices=["show", "calibrate"])
    h.set_defaults(func=_hw)

    from aka.agent.cli import add_parser as add_optimize  # argparse only; the loop imports lazily
    add_optimize(sub)

    from aka.kb.cli import add_parser as add_kb  # argparse only; chromadb loads inside the commands
    add_kb(sub)

    from aka.bench.cli import register as add_bench
    add_bench(sub)

    from aka.convert.cli import add_parser as add_convert  # argparse only; the batch imports lazily
    add_convert(sub)

    from aka.exp.cli import add_parser as add_exp  # argparse only; the grid and the report import lazily
    add_exp(sub)


def _hw(args) -> int:
    import json

    from aka import hardware
    if args.action == "calibrate":
        import torch
        if not torch.cuda.is_available():
            from aka.cli import UserError
            raise UserError("aka hw calibrate needs a CUDA GPU")
        data = hardware.calibrate("cuda")
        print(json.dumps(data, indent=2))
        return 0
    st = hardware.read_device_state(0)
    print(json.dumps(vars(st) if st else {"gpu": None, "note": "no NVIDIA GPU visible through NVML"}, indent=2))
    return 0
