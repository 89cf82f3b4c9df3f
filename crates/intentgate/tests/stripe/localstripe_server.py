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
import os

from aiohttp import web
from localstripe import resources
from localstripe.server import app


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()

    # The store stays in this process.
    resources.Store.dump_to_disk = lambda self: None
    resources.store.clear()

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    partial = args.port_file + ".partial"
    with open(partial, "w") as f:
        f.write(f"{port}\n")
    os.replace(partial, args.port_file)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
