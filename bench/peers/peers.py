"""What intentgate costs a Python tool beside its peers, measured in one run.

The same tool function (`write_note`: one POST of a tiny write to a local HTTP provider)
is called through each wrapper, with a fresh intent every call:

- naive: the function itself, no wrapper (the baseline);
- intentgate relaxed and intentgate strict: the `side_effect` decorator of the Python
  client (clients/python), against two `intentgate serve` processes this script starts,
  one per durability, each over a new SQLite ledger in a temporary folder;
- powertools: AWS Powertools' `idempotent_function` with its Redis persistence layer
  (Redis at --redis-url), which keeps its records in Redis's memory, so a crash of Redis
  forgets them: no more durable than intentgate relaxed.

The series take turns call by call (the first of each round rotates), so that noise on a
shared machine lands on all of them. A wrapper's overhead is, per round, its call's time
less the naive call's; the report gives each series' median and p99 and the median
overhead, and the ratio of intentgate relaxed's overhead to Powertools' (target: at most
1.0). Every answer is checked (intentgate's `done`, the provider's one write per intent);
anything else ends the run with an error.

Run from the repository's root, with an `intentgate` binary built (a release build for
figures worth reading): see README.md beside this file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import redis
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
# The Redis persistence layer (`RedisCachePersistenceLayer` until its rename).
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

REPOSITORY = Path(__file__).resolve().parents[2]
# The Python client is used from the repository, as it is: nothing to install.
sys.path.insert(0, str(REPOSITORY / "clients" / "python" / "src"))
import intentgate  # noqa: E402

#: Fresh intents per series by default, as the design's comparison was measured.
INTENTS_DEFAULT = 1_000
#: Most intents per series: bounds the run's time and the provider's memory.
INTENTS_MAX = 100_000
#: Unmeasured calls per series first: connections opened, caches filled.
WARM_UP_CALLS = 20
#: Longest wait for one answer; a stuck server ends the run instead of hanging it.
REQUEST_TIMEOUT_S = 30.0
#: Longest wait for `intentgate serve` to say where it listens.
START_TIMEOUT_S = 60.0
#: The target: intentgate relaxed's overhead over Powertools' on Redis, at most this.
TARGET_RELAXED_OVER_POWERTOOLS = 1.0
#: How long Powertools keeps an idempotency record (its default, an hour).
POWERTOOLS_EXPIRY_S = 3_600

TOOL = "write_note"
SERIES = ("naive", "intentgate_relaxed", "intentgate_strict", "powertools_redis")

CONFIG = """\
# The peers benchmark's gateway: one side-effecting tool the caller's code executes.
gateway:
  tenant: default
  durability: {durability}
auth: none
tools:
  - name: write_note
    description: Write a short note to the notes service. Safe to call once per note.
    effect: side_effect
    executor: client
    once_per: note
    input_schema:
      type: object
      properties:
        note_id: {{type: string, description: "The note's id.", minLength: 1, maxLength: 64}}
        text: {{type: string, description: "What the note says.", maxLength: 200}}
      required: [note_id, text]
      additionalProperties: false
    key: 'note:{{note_id}}'
    timeout_ms: 30000
"""


class Provider:
    """The notes service: `POST /v1/notes` keeps one note per `Idempotency-Key` in memory
    (a second request with the same key gets the first answer, as payment APIs do)."""

    def __init__(self) -> None:
        self.notes: dict[str, dict[str, Any]] = {}
        self.writes = 0
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as every HTTP client here uses it; and each answer sent at once
            # (its headers and body are two writes, which Nagle's algorithm would hold
            # back for the client's delayed acknowledgement: tens of milliseconds).
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                key = self.headers.get("idempotency-key", "")
                if self.path != "/v1/notes" or not key:
                    self.answer(400, {"error": "POST /v1/notes with an Idempotency-Key"})
                    return
                with provider.lock:
                    note = provider.notes.get(key)
                    if note is None:
                        provider.writes += 1
                        note = {"id": f"note_{provider.writes}", **json.loads(body)}
                        provider.notes[key] = note
                self.answer(200, note)

            def answer(self, status: int, body: dict[str, Any]) -> None:
                encoded = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(encoded)))
                self.end_headers()
                self.wfile.write(encoded)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def gateway(binary: str, folder: Path, durability: str) -> Iterator[str]:
    """`intentgate serve` of the benchmark's config under `durability`, over a new ledger in
    `folder`, on a free loopback port; yields its URL and stops it afterwards."""
    config = folder / f"{durability}.yaml"
    config.write_text(CONFIG.format(durability=durability))
    ledger = folder / f"{durability}.db"
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("INTENTGATE_")
    }
    # A new ledger thrown away afterwards: a random hash key will do.
    environment["INTENTGATE_HASH_KEY"] = os.urandom(32).hex()
    environment.setdefault("RUST_LOG", "warn")
    process = subprocess.Popen(
        [binary, "serve", "--config", str(config), "--listen", "127.0.0.1:0", "--ledger", str(ledger)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=environment,
        text=True,
    )
    try:
        url = listening_url(process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def listening_url(process: subprocess.Popen[str]) -> str:
    """The URL in the first line `intentgate serve` prints (`... listening on http://...`)."""
    assert process.stdout is not None
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    line = found[0].strip() if found else ""
    url = line.rsplit(" ", 1)[-1]
    if not url.startswith("http://127.0.0.1:"):
        process.kill()
        raise SystemExit(
            f"intentgate serve printed {line!r} instead of where it listens "
            f"(exit status {process.poll()}); run `intentgate config check` on its config"
        )
    return url


def write_note(
    client: httpx.Client, provider_url: str, note_id: str, text: str, *, idempotency_key: str
) -> dict[str, Any]:
    """The tool: one tiny write to the notes service, under the key it is given."""
    response = client.post(
        f"{provider_url}/v1/notes",
        json={"note_id": note_id, "text": text},
        headers={"idempotency-key": idempotency_key},
    )
    response.raise_for_status()
    return dict(response.json())


def wrappers(
    provider_url: str, relaxed_url: str, strict_url: str, redis_url: str
) -> dict[str, Callable[[str], Any]]:
    """One call of the tool per series, each taking a fresh note id; each checks its answer."""
    http = httpx.Client(timeout=REQUEST_TIMEOUT_S)

    def tool(note_id: str, text: str, *, idempotency_key: str) -> dict[str, Any]:
        return write_note(http, provider_url, note_id, text, idempotency_key=idempotency_key)

    def naive(note_id: str) -> Any:
        return tool(note_id, "hello", idempotency_key=f"naive:{note_id}")

    def through_intentgate(url: str) -> Callable[[str], Any]:
        gate = intentgate.Client(url, timeout=REQUEST_TIMEOUT_S)
        decorated = gate.side_effect(TOOL)(tool)

        def call(note_id: str) -> Any:
            outcome = decorated(note_id, "hello")
            if outcome.get("status") != "done":
                raise SystemExit(f"intentgate at {url} answered {outcome} for note {note_id}")
            return outcome

        return call

    persistence = CachePersistenceLayer(client=redis.Redis.from_url(redis_url))
    config = IdempotencyConfig(event_key_jmespath="note_id", expires_after_seconds=POWERTOOLS_EXPIRY_S)

    @idempotent_function(data_keyword_argument="note", persistence_store=persistence, config=config)
    def powertools_write(note: dict[str, str]) -> dict[str, Any]:
        return tool(note["note_id"], note["text"], idempotency_key=f"powertools:{note['note_id']}")

    def powertools(note_id: str) -> Any:
        return powertools_write(note={"note_id": note_id, "text": "hello"})

    return {
        "naive": naive,
        "intentgate_relaxed": through_intentgate(relaxed_url),
        "intentgate_strict": through_intentgate(strict_url),
        "powertools_redis": powertools,
    }


def measure(calls: dict[str, Callable[[str], Any]], rounds: int, run_id: str, label: str) -> dict[str, list[float]]:
    """`rounds` rounds of one fresh call per series, the first of each round rotating;
    each call's time in microseconds, by series, in round order."""
    times: dict[str, list[float]] = {name: [] for name in SERIES}
    for index in range(rounds):
        for turn in range(len(SERIES)):
            name = SERIES[(index + turn) % len(SERIES)]
            note_id = f"{run_id}-{label}-{name}-{index}"
            started = time.perf_counter_ns()
            calls[name](note_id)
            times[name].append((time.perf_counter_ns() - started) / 1_000)
    return times


def percentile(values: list[float], fraction: float) -> float:
    """The value at `fraction` of the sorted values, by nearest rank."""
    ordered = sorted(values)
    rank = min(max(math.ceil(fraction * len(ordered)), 1), len(ordered))
    return ordered[rank - 1]


def report(times: dict[str, list[float]], intents: int, provider_writes: int) -> dict[str, Any]:
    naive = times["naive"]
    series: dict[str, Any] = {}
    for name in SERIES:
        overheads = [call - base for call, base in zip(times[name], naive)]
        series[name] = {
            "p50_us": round(statistics.median(times[name]), 1),
            "p99_us": round(percentile(times[name], 0.99), 1),
            "overhead_median_us": round(statistics.median(overheads), 1),
        }
    relaxed = series["intentgate_relaxed"]["overhead_median_us"]
    strict = series["intentgate_strict"]["overhead_median_us"]
    powertools = series["powertools_redis"]["overhead_median_us"]
    ratio = relaxed / powertools if powertools > 0 else float("inf")
    return {
        "intents_per_series": intents,
        "warm_up_calls_per_series": WARM_UP_CALLS,
        "cores": os.cpu_count(),
        "provider_writes": provider_writes,
        "series": series,
        "ratio_relaxed_to_powertools": round(ratio, 3),
        "ratio_strict_to_powertools": round(strict / powertools, 3) if powertools > 0 else None,
        "targets": [
            {
                "field": "ratio_relaxed_to_powertools",
                "target": f"at most {TARGET_RELAXED_OVER_POWERTOOLS}",
                "met": ratio <= TARGET_RELAXED_OVER_POWERTOOLS,
            }
        ],
    }


def table(summary: dict[str, Any]) -> str:
    lines = [
        f"peers: one Python tool through each wrapper, {summary['intents_per_series']} fresh "
        f"intents each after {summary['warm_up_calls_per_series']} warm-up calls, taking "
        f"turns ({summary['cores']} cores); the provider made {summary['provider_writes']} "
        "writes, one per intent.",
        "",
        f"{'series':<22}{'p50':>12}{'p99':>12}{'overhead median':>18}",
    ]
    for name, figures in summary["series"].items():
        lines.append(
            f"{name:<22}{figures['p50_us']:>9.1f} us{figures['p99_us']:>9.1f} us"
            f"{figures['overhead_median_us']:>15.1f} us"
        )
    target = summary["targets"][0]
    lines += [
        "",
        f"intentgate relaxed / powertools (overhead): {summary['ratio_relaxed_to_powertools']:.2f}"
        f"   target {target['target']}: {'met' if target['met'] else 'NOT met'}",
        f"intentgate strict / powertools (overhead):  {summary['ratio_strict_to_powertools']:.2f}",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    # Outside Lambda there is no remaining time to read: Powertools says so on every call.
    warnings.filterwarnings("ignore", message="Couldn't determine the remaining time left")
    # The layer is the same class under its new name, which still warns of the old one.
    warnings.filterwarnings("ignore", message="RedisCachePersistenceLayer will be removed")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--intents", type=int, default=INTENTS_DEFAULT,
        help=f"fresh intents per series, 1 to {INTENTS_MAX} (default {INTENTS_DEFAULT})",
    )
    parser.add_argument(
        "--intentgate", default=os.environ.get("INTENTGATE_BIN"),
        help="the intentgate binary (default: $INTENTGATE_BIN, else target/release/intentgate, "
        "else intentgate on the PATH)",
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="the Redis Powertools keeps its records in (default: $REDIS_URL, else "
        "redis://127.0.0.1:6379/0)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    arguments = parser.parse_args()
    if not 1 <= arguments.intents <= INTENTS_MAX:
        parser.error(f"--intents must be between 1 and {INTENTS_MAX}, not {arguments.intents}")
    binary = arguments.intentgate or next(
        (
            str(path)
            for path in [REPOSITORY / "target" / "release" / "intentgate"]
            if path.is_file()
        ),
        shutil.which("intentgate"),
    )
    if binary is None:
        parser.error(
            "no intentgate binary: build one (cargo build --release -p intentgate) or pass "
            "--intentgate PATH"
        )
    try:
        redis.Redis.from_url(arguments.redis_url).ping()
    except redis.RedisError as error:
        parser.error(f"Redis at {arguments.redis_url} does not answer ({error}); start it or pass --redis-url")

    def progress(message: str) -> None:
        if not arguments.json:
            print(message, file=sys.stderr)

    run_id = uuid.uuid4().hex[:12]
    provider = Provider()
    try:
        with tempfile.TemporaryDirectory(prefix="intentgate-peers-") as scratch:
            folder = Path(scratch)
            with gateway(binary, folder, "relaxed") as relaxed_url, gateway(
                binary, folder, "strict"
            ) as strict_url:
                calls = wrappers(provider.url, relaxed_url, strict_url, arguments.redis_url)
                progress(f"warming up with {WARM_UP_CALLS} calls per series ...")
                measure(calls, WARM_UP_CALLS, run_id, "warm-up")
                progress(f"measuring {arguments.intents} fresh intents per series, taking turns ...")
                times = measure(calls, arguments.intents, run_id, "measured")
    finally:
        provider.stop()
    expected = len(SERIES) * (WARM_UP_CALLS + arguments.intents)
    if provider.writes != expected:
        raise SystemExit(
            f"the provider made {provider.writes} writes for {expected} intents; expected one each"
        )
    summary = report(times, arguments.intents, provider.writes)
    if arguments.json:
        print(json.dumps(summary, indent=2))
    else:
        print(table(summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
