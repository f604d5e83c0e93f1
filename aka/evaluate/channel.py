"""The judge <-> runner channel: JSON messages on a Unix socket, tensors in shared memory.

Messages are JSON objects, one per SOCK_SEQPACKET datagram, so a message arrives whole or not at
all. The judge never unpickles anything the runner sends: whatever the candidate does to the
runner, what comes back is data (JSON numbers and strings), never code.

Tensors cross by reference, not by copy through the socket:
  * CPU: each tensor lives in its own memfd (anonymous shared memory); the fd travels with the
    message (SCM_RIGHTS) and both processes map the same pages. The runner cannot reach any other
    memory of the judge.
  * CUDA: the judge's allocation is exported with CUDA IPC (torch's own storage sharing, as
    torch.multiprocessing does it) and opened by the runner; other CUDA memory of the judge stays
    in the judge's context, out of the runner's reach.

Standard library and torch only: the runner imports this module. torch is imported where tensors
are made, not at the top, so the judge can start its runner before paying for torch's import.
"""
from __future__ import annotations

import base64
import json
import mmap
import os
import socket

MAX_MSG = 1 << 20   # a datagram; messages are small (samples, evidence), tensors never travel inline


class ChannelClosed(EOFError):
    """The other side closed the socket or died."""


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock

    @classmethod
    def pair(cls) -> tuple["Channel", "Channel"]:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for s in (a, b):
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                try:
                    s.setsockopt(socket.SOL_SOCKET, opt, 4 * MAX_MSG)
                except OSError:
                    pass
        return cls(a), cls(b)

    @classmethod
    def from_fd(cls, fd: int) -> "Channel":
        return cls(socket.socket(fileno=fd))

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: dict, fds: list[int] = ()) -> None:
        data = json.dumps(msg, default=_jsonable).encode()
        if len(data) > MAX_MSG:
            raise ValueError(f"message of {len(data)} bytes exceeds {MAX_MSG}")
        if fds:
            socket.send_fds(self.sock, [data], list(fds))
        else:
            self.sock.sendall(data)

    def recv(self, max_fds: int = 512) -> tuple[dict, list[int]]:
        data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MSG, max_fds)
        if not data:
            for fd in fds:
                os.close(fd)
            raise ChannelClosed("channel closed")
        try:
            msg = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            for fd in fds:
                os.close(fd)
            raise ChannelClosed("malformed message on the channel") from None
        if not isinstance(msg, dict):
            raise ChannelClosed("malformed message on the channel")
        return msg, fds

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _jsonable(x):
    import torch
    if isinstance(x, float):
        return x
    if isinstance(x, (bytes, bytearray)):
        return {"__b64__": base64.b64encode(bytes(x)).decode()}
    if isinstance(x, torch.dtype):
        return str(x)
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


# -- shared tensors -----------------------------------------------------------------------------

def _dtype(name: str):
    import torch
    dt = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def _span(shape, stride) -> int:
    """Elements a strided view reaches from its storage offset (0 for an empty tensor)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(shape, stride))


class Arena:
    """The judge's shared tensors for one exchange: it owns them, the runner maps them.

    `share(t)` returns a new tensor in shared memory holding t's values (same shape, strides and
    dtype; an expanded input with zero strides becomes contiguous) and a descriptor the runner
    turns back into a tensor on the same memory. Keep the Arena alive while the runner uses it."""

    def __init__(self, device: str):
        self.device = device
        self.fds: list[int] = []
        self._keep: list = []

    def empty(self, shape, dtype, stride=None) -> tuple:
        import torch
        shape = tuple(int(s) for s in shape)
        if stride is None or any(s == 0 for s in stride) or any(s < 0 for s in stride):
            stride = _contiguous_stride(shape)
        stride = tuple(int(s) for s in stride)
        n = _span(shape, stride)
        esize = torch.empty((), dtype=dtype).element_size()
        if self.device.startswith("cuda"):
            base = torch.empty(max(n, 1) * esize, dtype=torch.uint8, device=self.device)
            t = base.view(dtype)[:max(n, 1)].as_strided(shape, stride)
            desc = {"kind": "cuda", "ipc": _cuda_ipc(t), "dtype": str(dtype).replace("torch.", ""),
                    "shape": list(shape), "stride": list(stride), "nbytes": max(n, 1) * esize}
            self._keep.append(base)
            return t, desc
        nbytes = max(n, 1) * esize
        fd = os.memfd_create("aka-tensor", os.MFD_CLOEXEC)
        os.ftruncate(fd, nbytes)
        mm = mmap.mmap(fd, nbytes)
        t = torch.frombuffer(mm, dtype=torch.uint8).view(dtype)[:max(n, 1)].as_strided(shape, stride)
        self._keep.append(mm)
        desc = {"kind": "memfd", "fd_index": len(self.fds), "dtype": str(dtype).replace("torch.", ""),
                "shape": list(shape), "stride": list(stride), "nbytes": nbytes}
        self.fds.append(fd)
        return t, desc

    def share(self, t) -> tuple:
        import torch
        out, desc = self.empty(t.shape, t.dtype, t.stride())
        with torch.no_grad():
            out.copy_(t)
        return out, desc

    def share_tree(self, values: dict) -> tuple[dict, dict]:
        """{name: tensor | JSON value} -> (judge-side shared copies, descriptors)."""
        shared, descs = {}, {}
        for k, v in values.items():
            shared[k], descs[k] = self._share_value(v)
        return shared, descs

    def _share_value(self, v):
        import torch
        if isinstance(v, torch.Tensor):
            return self.share(v)
        if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
            pairs = [self._share_value(x) for x in v]  # a list of tensors (KernelBench-X cat/stack inputs)
            return type(v)(p[0] for p in pairs), {"kind": "list", "tuple": isinstance(v, tuple),
                                                  "items": [p[1] for p in pairs]}
        return v, {"kind": "value", "value": v}

    def close(self) -> None:
        """Drop the judge's side (the fds already sent stay valid in the runner until it closes them)."""
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def _contiguous_stride(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(out))


def _cuda_ipc(t) -> dict:
    """Export a CUDA tensor with torch's own IPC reduction (what torch.multiprocessing sends), so
    the runner rebuilds it with torch's own code: its cache of opened handles (a handle opened twice
    in one process is an error) and its reference counters, which keep the judge's block alive while
    the runner maps it."""
    from torch.multiprocessing.reductions import reduce_tensor
    _fn, args = reduce_tensor(t)
    (_tcls, size, stride, offset, _scls, _dtype, device, handle, size_bytes, offset_bytes, _grad,
     ref_handle, ref_offset, event_handle, event_sync) = args
    return {"size": list(size), "stride": list(stride), "offset": int(offset), "device": int(device),
            "handle": handle, "size_bytes": int(size_bytes), "offset_bytes": int(offset_bytes),
            "ref_handle": ref_handle, "ref_offset": int(ref_offset), "event_handle": event_handle,
            "event_sync": bool(event_sync)}


def _unb64(x):
    return base64.b64decode(x["__b64__"]) if isinstance(x, dict) and "__b64__" in x else x


def open_tensor(desc: dict, fds: list[int], keep: list) -> object:
    """Runner side: a descriptor (and the message's fds) back to a tensor on the judge's memory."""
    import torch
    kind = desc.get("kind")
    if kind == "value":
        return desc.get("value")
    if kind == "list":
        items = [open_tensor(d, fds, keep) for d in desc["items"]]
        return tuple(items) if desc.get("tuple") else items
    dtype, shape, stride = _dtype(desc["dtype"]), tuple(desc["shape"]), tuple(desc["stride"])
    n = _span(shape, stride)
    if kind == "memfd":
        fd = fds[int(desc["fd_index"])]
        mm = mmap.mmap(fd, int(desc["nbytes"]))
        keep.append(mm)
        return torch.frombuffer(mm, dtype=torch.uint8).view(dtype)[:max(n, 1)].as_strided(shape, stride)
    if kind == "cuda":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor
        ipc = {k: _unb64(v) for k, v in desc["ipc"].items()}
        t = rebuild_cuda_tensor(torch.Tensor, tuple(ipc["size"]), tuple(ipc["stride"]), ipc["offset"],
                                torch.storage.TypedStorage, dtype, ipc["device"], ipc["handle"], ipc["size_bytes"],
                                ipc["offset_bytes"], False, ipc["ref_handle"], ipc["ref_offset"],
                                ipc["event_handle"], ipc["event_sync"])
        keep.append(t)
        return t
    raise ValueError(f"unknown tensor descriptor kind {kind!r}")


def open_tree(descs: dict, fds: list[int], keep: list) -> dict:
    return {k: open_tensor(d, fds, keep) for k, d in descs.items()}
