"""Peers: per operator, the production implementation a user could call instead of our kernel.

A benchmark operator's `meta.json` names its peer:

    "peer": {"impl": "aka.peers.dense:LinearPeer", "library": "torch",
             "what": "cuBLAS through F.linear"}

or says why it has none: `"peer": null, "peer_why": "..."`. A peer is trusted code (a library
call, never a candidate): it runs in the judge's process beside the eager reference and
torch.compile, is timed by the same method as every implementation of the shape
(aka/evaluate/timing.py), and must pass the candidate's correctness check against the reference
(aka/evaluate/peers.py) before its time is used. Its library and version go into every result.

A peer class is an nn.Module built from the reference module (`Peer(ref)`: it reads the
reference's init values, eps or scale) whose forward takes the reference's inputs by name.
`unavailable(device)` on the class says, in one line, why it cannot run here (None when it can).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

# Distribution names where they differ from the import name.
_DISTRIBUTIONS = {"liger_kernel": "liger-kernel", "fla": "fla-core"}


@dataclass(frozen=True)
class PeerInfo:
    impl: str          # "module:Class"
    library: str       # import name of the library whose code the peer calls ("torch", "liger_kernel")
    what: str = ""     # what the peer is, in words

    @property
    def name(self) -> str:
        return self.impl.rsplit(":", 1)[-1]


class PeerError(ValueError):
    """A meta.json `peer` entry that cannot be read."""


def peer_of(meta: dict) -> PeerInfo | None:
    """The operator's peer from its meta.json, None where it names none (or says null)."""
    p = (meta or {}).get("peer")
    if p is None:
        return None
    if not isinstance(p, dict) or ":" not in str(p.get("impl", "")) or not p.get("library"):
        raise PeerError(f"meta.json peer must be null or {{impl: 'module:Class', library, what}}, got {p!r}")
    return PeerInfo(impl=str(p["impl"]), library=str(p["library"]), what=str(p.get("what", "")))


def library_version(library: str) -> str | None:
    """The installed version of the peer's library, without importing it (None: not installed)."""
    if library == "torch":
        import torch
        return torch.__version__
    try:
        return version(_DISTRIBUTIONS.get(library, library))
    except PackageNotFoundError:
        return None


def peer_class(info: PeerInfo):
    mod, cls = info.impl.split(":", 1)
    return getattr(importlib.import_module(mod), cls)


def unavailable(info: PeerInfo, device: str) -> str | None:
    """Why this peer cannot run on `device` here, in one line; None when it can."""
    if library_version(info.library) is None:
        hint = " (pip install -e '.[peer]')" if info.library != "torch" else ""
        return f"{info.library} is not installed{hint}"
    try:
        cls = peer_class(info)
    except Exception as e:  # noqa: BLE001 - a library that fails to import is a reason, said
        return f"{info.impl} does not import: {type(e).__name__}: {str(e)[:160]}"
    check = getattr(cls, "unavailable", None)
    return check(device) if check is not None else None


def describe(info: PeerInfo | None) -> dict | None:
    """The peer as results record it: {name, impl, library, version, what}."""
    if info is None:
        return None
    return {"name": info.name, "impl": info.impl, "library": info.library,
            "version": library_version(info.library), "what": info.what}
