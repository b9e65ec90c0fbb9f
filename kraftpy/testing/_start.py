"""The supervisor's entry point: ``python -m kraftpy.testing._start SPEC`` (see `kraftpy.testing._supervisor`).

It forks the zygote before anything heavy is imported: the zygote imports the nodes' modules while
this process imports the supervisor's own (trio, the admin client, the proxy), side by side instead
of one after the other, which took a quarter of a second of every test cluster's start. Only the
standard library and the zygote's module are imported before the fork, and no thread is started.
"""

from __future__ import annotations

import gc
import json
import signal
import sys

from kraftpy.testing import _zygote


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    zygote_pid, sock = _zygote.start(None if spec["keep"] else spec["directory"])
    gc.disable()  # as the zygote does: no collector passes over what the import makes
    from kraftpy.testing import _supervisor

    gc.freeze()
    gc.enable()

    return _supervisor.run(spec, zygote_pid, sock)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
