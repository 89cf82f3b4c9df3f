"""WAL frames per new intent in a SQLite ledger, by b-tree.

A model of the SQLite ledger's writer: the ledger's own schema (its migrations, read from
crates/intentgate-ledger/src/sqlite/schema.rs, up to --version), 2 KiB pages and WAL, and
the statements the writer runs for a new intent's `begin` (its row in `intents_begun`, the
events of its creation as JSON) and its finish (the events logged, the wide row inserted
from the begun one, the begun row deleted, the finish's event). After 2,000 intents made
one at a time, --intents more are made --batch at a time: each commit finishes the previous
commit's new intents and begins as many new ones, with keys as `bench ledger`'s 64 callers
make them. Every commit's frames are read back from the WAL and each page attributed to its
b-tree (`dbstat`). Standard library only:

    python3 bench/frames/frames.py [--batch 17] [--intents 20000] [--version N]
"""

import argparse
import collections
import json
import os
import re
import sqlite3
import struct
import tempfile

SCHEMA = os.path.join(os.path.dirname(__file__), "../../crates/intentgate-ledger/src/sqlite/schema.rs")
PAGE_SIZE = 2048
FRAME = 24 + PAGE_SIZE
CALLERS = 64
EVENT = (
    "INSERT INTO events (intent_id, tenant, tool, at_ms, kind, from_status, to_status, attempt, "
    "actor, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def migrations():
    source = open(SCHEMA).read()
    start = source.index("const MIGRATIONS")
    return re.findall(r'r#"(.*?)"#', source[start : source.index("];", start)], re.S)


class Writer:
    def __init__(self, path, version):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        for pragma in ("page_size = 2048", "journal_mode = wal", "wal_autocheckpoint = 0", "secure_delete = on"):
            self.db.execute(f"PRAGMA {pragma}")
        for sql in migrations()[:version]:
            self.db.executescript(sql)
        self.now = 1_700_000_000_000

    def begin(self, order):
        self.now += 1
        events = [
            {"at_ms": self.now, "kind": "created", "from_status": None, "to_status": "in_flight",
             "attempt": 1, "actor": "gateway-a/1", "detail": None},
            {"at_ms": self.now, "kind": "attempt", "from_status": None, "to_status": None,
             "attempt": 1, "actor": "gateway-a/1", "detail": None},
        ]
        self.db.execute(
            "INSERT INTO intents_begun (id, tenant, tool, intent_key, fingerprint, arguments, "
            "status, attempt, epoch, lease_owner, lease_expires_ms, call_count, first_seen_ms, "
            "last_seen_ms, updated_ms, events) VALUES (max(coalesce((SELECT max(id) FROM intents), 0), "
            "coalesce((SELECT max(id) FROM intents_begun), 0)) + 1, 'default', 'refund_order', ?, ?, ?, "
            "'in_flight', 1, 1, 'gateway-a/1', ?, 1, ?, ?, ?, ?)",
            (f"refund:{order}:49.00", "a" * 64, json.dumps({"order_id": order, "amount": 49}),
             self.now + 30_000, self.now, self.now, self.now, json.dumps(events)),
        )
        return self.db.execute("SELECT last_insert_rowid()").fetchone()[0]

    def finish(self, id):
        self.now += 1
        tenant, tool, events = self.db.execute(
            "SELECT tenant, tool, events FROM intents_begun WHERE id = ?", (id,)).fetchone()
        for event in json.loads(events):
            self.db.execute(EVENT, (id, tenant, tool, event["at_ms"], event["kind"], event["from_status"],
                                    event["to_status"], event["attempt"], event["actor"], event["detail"]))
        self.db.execute(
            "INSERT INTO intents (id, status, attempt, epoch, lease_owner, lease_expires_ms, result, "
            "external_id, resolved_by, call_count, last_seen_ms, updated_ms, last_lookup_ms, resend_stopped, "
            "tenant, tool, intent_key, fingerprint, arguments, first_seen_ms) "
            "SELECT ?1, 'done', 1, 1, NULL, NULL, ?2, ?3, NULL, 1, ?4, ?4, NULL, NULL, tenant, tool, "
            "intent_key, fingerprint, arguments, first_seen_ms FROM intents_begun WHERE id = ?1",
            (id, json.dumps({"id": f"re_{id}"}), f"re_{id}", self.now),
        )
        self.db.execute("DELETE FROM intents_begun WHERE id = ?", (id,))
        self.db.execute(EVENT, (id, tenant, tool, self.now, "finished", "in_flight", "done", 1, "gateway-a/1", None))

    def commit(self, work):
        """Runs `work` in one transaction; answers the page numbers of the frames it wrote."""
        wal = self.path + "-wal"
        start = max(os.path.getsize(wal) if os.path.exists(wal) else 0, 32)
        self.db.execute("BEGIN IMMEDIATE")
        result = work()
        self.db.execute("COMMIT")
        with open(wal, "rb") as file:
            file.seek(start)
            frames = file.read()
        return result, [struct.unpack(">I", frames[at : at + 4])[0] for at in range(0, len(frames), FRAME)]


def main():
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--batch", type=int, default=17, help="new intents (and finishes) per commit")
    arguments.add_argument("--intents", type=int, default=20_000)
    arguments.add_argument("--version", type=int, default=len(migrations()), help="the schema version to model")
    options = arguments.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        writer = Writer(os.path.join(folder, "ledger.db"), options.version)
        for order in range(2_000):
            id, _ = writer.commit(lambda: writer.begin(f"sequential-{order}"))
            writer.commit(lambda: writer.finish(id))
        writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        made, begun, pages = [0] * CALLERS, [], []
        caller = made_total = 0
        while made_total < options.intents:
            def batch():
                nonlocal caller, made_total
                for id in begun[: options.batch]:
                    writer.finish(id)
                    made_total += 1
                new = []
                for _ in range(options.batch):
                    new.append(writer.begin(f"concurrent-{caller}-{made[caller]}"))
                    made[caller] += 1
                    caller = (caller + 1) % CALLERS
                return new
            new, frames = writer.commit(batch)
            del begun[: options.batch]
            begun += new
            pages += frames
        trees = dict((page, name) for name, page in writer.db.execute("SELECT name, pageno FROM dbstat"))
        by_tree = collections.Counter(trees.get(page, "(freed)") for page in pages)
        print(f"schema version {options.version}, {options.batch} new intents and finishes per commit, "
              f"{made_total} intents: {len(pages) / made_total:.2f} WAL frames per new intent")
        for tree, frames in by_tree.most_common():
            print(f"  {tree:<40} {frames / made_total:.2f}")


if __name__ == "__main__":
    main()
