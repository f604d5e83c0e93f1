"""The shape dispatch inside a generated dispatching candidate (aka/agent/dispatch.py).

This file's text is copied verbatim into every dispatching candidate, and the agent imports the
same functions to compute the table's keys from the task's inputs, so the key the table was built
with and the key the candidate computes at run time come from one definition. It therefore imports
only what a candidate may (aka/evaluate/static.py: torch, math) and reads nothing but shapes,
dtypes and scalar arguments: the dispatch is a pure function of them, never of tensor values.
"""
import math

import torch


def aka_feature(v):
    """One argument as a hashable literal: a tensor by its shape and dtype, a scalar by its value."""
    if isinstance(v, torch.Tensor):
        return ("t", tuple(int(d) for d in v.shape), str(v.dtype))
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("n",)
    if isinstance(v, (list, tuple)):
        return ("l", tuple(aka_feature(x) for x in v))
    return ("o",)


def aka_key(args, kwargs):
    """The forward call's key: positional arguments in order, keywords by name."""
    return (tuple(aka_feature(a) for a in args), tuple((k, aka_feature(kwargs[k])) for k in sorted(kwargs)))


def aka_sizes(feature, out):
    """(the feature with its sizes taken out, for structural equality); the sizes go into `out`."""
    tag = feature[0]
    if tag == "t":
        out.extend(feature[1])
        return ("t", len(feature[1]), feature[2])
    if tag == "i":
        out.append(feature[1])
        return ("i",)
    if tag == "l":
        return ("l", tuple(aka_sizes(x, out) for x in feature[1]))
    return feature


def aka_split(key):
    sizes = []
    args, kwargs = key
    structure = (tuple(aka_sizes(f, sizes) for f in args), tuple((k, aka_sizes(f, sizes)) for k, f in kwargs))
    return structure, sizes


def aka_distance(a, b):
    """Sizes compared on a log scale (M 8 is as far from 16 as 4096 from 8192); a sign change is far."""
    d = 0.0
    for x, y in zip(a, b):
        if (x < 0) != (y < 0):
            d += 1000.0
        d += abs(math.log2(1 + abs(x)) - math.log2(1 + abs(y)))
    return d


def aka_pick(key, table, default):
    """The variant for `key`: its own entry, else the entry of the nearest measured shape with the
    same structure (same arguments, ranks, dtypes and flags), else `default`."""
    if key in table:
        return table[key]
    structure, sizes = aka_split(key)
    best, best_d = default, None
    for k, index in table.items():
        s, z = aka_split(k)
        if s != structure or len(z) != len(sizes):
            continue
        d = aka_distance(sizes, z)
        if best_d is None or d < best_d:
            best, best_d = index, d
    return best
