"""Child processes that cannot outlive the process that started them.

The demos start a broker (and the bank demo a Spark driver) as subprocesses and kill them at the
end; if the demo itself is killed from outside (Ctrl-C twice, a CI timeout, SIGKILL) no cleanup
runs and the children would linger, holding a port and a data directory lock. Linux's
PR_SET_PDEATHSIG has the kernel deliver SIGKILL to the child when its parent dies. The standard
library has no wrapper for it, hence the one ``prctl`` call through ctypes.
"""

from __future__ import annotations

import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: SIGKILL this child when its parent dies.

    The signal follows the *thread* that started the child, so start long-lived children from a
    thread that outlives them (the main thread). Linux only; elsewhere it does nothing.
    """
    if sys.platform != "linux":
        return
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
