"""localstripe on a free loopback port, its store in memory only.

    python localstripe_server.py --port-file F

`localstripe --port N` binds a port chosen by the caller, loads its store from
/tmp/localstripe.pickle (unless --from-scratch) and writes it back there after every change,
a path fixed in its code: two test runs at once would share it. This starts localstripe's own
application with a fresh store that is never read from nor written to disk, on 127.0.0.1 on
a free port, and writes that port to F (atomically) once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio

from localstripe import resources
from localstripe.server import app

# This script's folder is on the path when it runs: the proxy's way of serving is shared.
from fault_proxy import serve_on_a_free_port


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()

    # The store stays in this process.
    resources.Store.dump_to_disk = lambda self: None
    resources.store.clear()

    await serve_on_a_free_port(app, args.port_file)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
