"""How the project's onnxruntime sessions (the drafters' models, the verifier's CPU passes) use
their threads: one owner, so that both services share two cores the same way.

A call runs ~1,000-1,600 small nodes; a worker thread that parks between two of them must be
woken for the next, and that cost a one-token call a fifth of its time on the 2-core host. So the
threads spin while a call runs and stop spinning when it returns (`session.force_spinning_stop`):
between calls the other service, or this one's gRPC work, has the cores. Measured with the int8
drafter's step (docs/design/onnx-threads.md): 13.2 ms spinning in the call against 16.9 parked,
the CPU time of a parked pool between calls.
"""

from __future__ import annotations

from typing import Any


def session_options(threads: int) -> Any:
    """onnxruntime.SessionOptions for a CPU session on `threads` intra-op threads (0: onnxruntime's
    choice), nodes run one after another, threads spinning only within a call."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return options
