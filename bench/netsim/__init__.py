"""Ferry's own emulated cross-region link: SeaweedFS in a network namespace behind a shaped path.

    sudo .venv/bin/python -m bench.netsim up --profile regional     # or --rtt-ms 40 --rate-mbit 100
    eval "$(sudo .venv/bin/python -m bench.netsim env)"
    sudo .venv/bin/python -m bench.netsim status
    sudo .venv/bin/python -m bench.netsim down                       # leaves nothing behind

See link.py for the topology and how delay and rate are made.
"""

from bench.netsim.link import PROFILES, Shape, State, down, guard, load_state, status, up, vacuum
from bench.netsim.system import NetsimError, netns_available

__all__ = ["PROFILES", "NetsimError", "Shape", "State", "down", "guard", "load_state", "netns_available", "status", "up",
           "vacuum"]
