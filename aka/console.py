"""Printing rich tables whole. Off a terminal (a pipe, a log, CI) rich lays everything out in 80
columns, which cut `fp8_block_scaled_matmul` to `fp8_block_sca…` in `aka bench list`; there the
console takes the table's own width. On a terminal the terminal's width holds, and the columns a
caller marks `key` (names the user copies into the next command) keep their full width while the
others wrap."""
from __future__ import annotations


def key_column(table, header: str, values, **kw) -> None:
    """A column that is never cut or wrapped: as wide as its longest value."""
    width = max([len(header)] + [len(str(v)) for v in values])
    table.add_column(header, no_wrap=True, min_width=width, **kw)


def print_table(table, console=None) -> None:
    from rich.console import Console
    from rich.measure import Measurement
    console = console or Console(soft_wrap=True)
    if not console.is_terminal:
        # measured against an unbounded width: a measurement is otherwise capped at the console's
        need = Measurement.get(console, console.options.update_width(100_000), table).maximum
        if need > console.width:
            console = Console(width=need, soft_wrap=True, file=console.file)
    console.print(table)
