"""The real agent (``python -m agents``) with its clock ``--skew-s`` seconds off the machine's,
for bench/faults/clock_ahead.py: every time the agent reads (``agents.payload.utc_now``, which
the agent, the simulator and ``sent_at`` use) is shifted, as on a node whose clock is wrong.

    python bench/faults/skewed_agent.py --skew-s 900 -- --server URL --hostname H ...
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skew-s", type=float, required=True, help="seconds ahead (< 0: behind)")
    parser.add_argument("agent_args", nargs=argparse.REMAINDER, help="-- then the agent's flags")
    args = parser.parse_args()
    skew = timedelta(seconds=args.skew_s)

    def skewed_now() -> datetime:
        return datetime.now(UTC) + skew

    import agents.agent
    import agents.main
    import agents.payload
    import agents.simulated.collector

    for module in (agents.payload, agents.agent, agents.main, agents.simulated.collector):
        module.utc_now = skewed_now  # type: ignore[attr-defined]
    agent_main = agents.main.main

    rest = args.agent_args[1:] if args.agent_args[:1] == ["--"] else args.agent_args
    return agent_main(rest)


if __name__ == "__main__":
    sys.exit(main())
