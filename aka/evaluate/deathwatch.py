"""PR_SET_PDEATHSIG for the judge: it dies with the process that started it, including a parent
killed by SIGTERM or SIGHUP (an evaluation outliving its parent was seen holding the GPU ~40 s).
Standard library only, imported before torch."""
from __future__ import annotations

import os


def die_with_parent(env_var: str) -> None:
    try:
        import ctypes
        import signal
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    want = os.environ.get(env_var)
    if want and os.getppid() != int(want):  # the parent died before the line above
        os._exit(3)
