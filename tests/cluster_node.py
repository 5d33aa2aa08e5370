"""One appliance daemon as a process with a stand-in engine: the nodes of the cluster tests and soak.

    python -m tests.cluster_node CONFIG [--text T] [--cost-ms N | --gate FILE]

Runs until SIGTERM (or until it is killed or stopped, which is what the tests do to it).
"""

from __future__ import annotations

import argparse
import functools
import signal
import threading
from pathlib import Path

from appliance.config import load_config
from appliance.daemon import Daemon
from appliance.logging_setup import setup_logging
from tests.fakes.engines import FixedCostEngine, FixedTextEngine, GatedEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("config", type=Path)
    parser.add_argument("--text", default="HELLO WORLD")
    parser.add_argument("--cost-ms", type=float, default=0.0)
    parser.add_argument("--gate", default=None)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    setup_logging(args.log_level)
    config = load_config(args.config)
    if args.gate:
        factory = functools.partial(GatedEngine, args.text, args.gate)
    elif args.cost_ms:
        factory = functools.partial(FixedCostEngine, args.text, args.cost_ms)
    else:
        factory = functools.partial(FixedTextEngine, args.text)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    Daemon(config, factory).run(stop)


if __name__ == "__main__":
    main()
