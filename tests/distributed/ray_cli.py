"""The ``ray`` command line, kept on loopback: ``python ray_cli.py start ...``.

The tests run Ray with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` so that every socket is
bound to 127.0.0.1; with it, ``ray start --address`` refuses to add a node, and without
it the command turns a loopback address into the host's own address. This runs the same
command with the node allowed and the address left as given.

``ray stop`` stops every Ray process of the machine; ``python ray_cli.py stop --only
DIR ...`` stops only those whose command line names ``DIR`` (the cluster's temporary
directory), so that the other clusters of the machine are left alone.
"""

from __future__ import annotations

import sys
from typing import Any

from ray._private import ray_constants, services
from ray.scripts.scripts import main


def only_under(directory: str) -> None:
    """Let ``ray stop`` see only the processes whose command line names ``directory``."""
    import psutil  # type: ignore[import-untyped]  # Ray's own copy, put on the path by ray

    every = psutil.process_iter

    def ours(*args: Any, **kwargs: Any) -> Any:
        for proc in every(*args, **kwargs):
            try:
                if any(directory in part for part in proc.cmdline()):
                    yield proc
            except psutil.Error:
                continue

    psutil.process_iter = ours


if __name__ == "__main__":
    ray_constants.ENABLE_RAY_CLUSTER = True
    services.resolve_ip_for_localhost = lambda host: host
    if sys.argv[1:2] == ["stop"] and "--only" in sys.argv:
        at = sys.argv.index("--only")
        only_under(sys.argv[at + 1])
        del sys.argv[at : at + 2]
    sys.exit(main())  # type: ignore[no-untyped-call]
