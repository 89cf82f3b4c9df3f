"""Two MCP servers from npm that this project did not write, imported through the gateway and
driven with the official Python SDK: `@modelcontextprotocol/server-memory` and
`@modelcontextprotocol/server-everything`, at the exact versions of
crates/intentgate-mcp/tests/npm/package-lock.json, which `.ci/run` installs under
target/npm-mcp-servers. Without them (or without `node`) these tests are skipped, saying why;
with CI=true they fail instead.

What the pinned servers (2026.8.31, on Node 20) list, read with the official client over
stdio (both protocol eras negotiate 2025-11-25 with them):

server-memory (serverInfo "memory-server" 0.6.3), a knowledge graph kept as JSON lines in the
file MEMORY_FILE_PATH names. Every tool has all four hints set and an outputSchema.
- readOnlyHint true: read_graph, search_nodes, open_nodes.
- unmarked (readOnlyHint false): create_entities, create_relations, add_observations
  (idempotentHint false); delete_entities, delete_observations, delete_relations
  (destructiveHint true, idempotentHint true).
- create_entities skips names the graph already holds and answers only the entities it
  created, `{"entities": [...]}`: a repeat answers `{"entities": []}`. create_relations and
  add_observations skip what exists too, so repeating them with the same arguments changes
  nothing more: they are classified `idempotent` here, like the deletions.
- Every write loads the whole file, changes it and writes it back, with no lock: writes in
  flight at once lose all but the last. 20 concurrent create_entities of 20 distinct names
  leave one entity, each call having answered its entity as created. So the tests here keep
  one entity name in flight at a time (any number of calls for it): only one of them reaches
  the server.

server-everything (serverInfo "mcp-servers/everything" 2.0.0, title "Everything Reference
Server"), all hints set on every tool:
- readOnlyHint true: echo, get-annotated-message, get-env, get-resource-links,
  get-resource-reference, get-structured-content, get-sum, get-tiny-image,
  trigger-long-running-operation.
- unmarked: gzip-file-as-resource (idempotentHint true, openWorldHint true: fetches an http,
  https or data: URL and answers it gzipped), toggle-simulated-logging and
  toggle-subscriber-updates (switches of the calling session, idempotentHint false),
  simulate-research-query (a task tool, registered once the client has sent `initialized`).
- Clients declaring roots, sampling or elicitation get more tools: get-roots-list (read) and
  the unmarked trigger-elicitation-request, trigger-url-elicitation, trigger-sampling-request
  and their -async forms. The gateway's MCP client declares none of them.
- get-env answers the server's whole environment. A stdio server started by the gateway
  gets only its config's `env` and a few variables such as PATH and HOME, never the
  gateway's secrets: get-env is imported here, and a test checks that a secret in the
  gateway's environment does not reach the model through it.

Here gzip-file-as-resource is `idempotent` and the per-session toggles and the task tool
are excluded; memory's create_entities is an explicit side effect keyed by entity
name, found afterwards with open_nodes, and delete_entities is excluded.

Through the gateway a call's result is the upstream's structured content, else its first text
block (parsed when it is JSON), else its content blocks as the server sent them.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import time

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from support import BINARY, PROCESS_WAIT_SECONDS, REPOSITORY, Process, outcome_of

SERVERS = REPOSITORY / "target" / "npm-mcp-servers" / "node_modules" / "@modelcontextprotocol"
MEMORY_SERVER = SERVERS / "server-memory" / "dist" / "index.js"
EVERYTHING_SERVER = SERVERS / "server-everything" / "dist" / "index.js"

MEMORY_PREFIX = "memory_"
EVERYTHING_PREFIX = "everything_"
CREATE_ENTITY = "memory_create_entities"
# How each unmarked upstream tool is classified in the config, and what is left out.
MEMORY_EFFECTS = {
    "create_relations": "idempotent",
    "add_observations": "idempotent",
    "delete_observations": "idempotent",
    "delete_relations": "idempotent",
}
MEMORY_EXCLUDED = {"delete_entities"}
EVERYTHING_EFFECTS = {"gzip-file-as-resource": "idempotent"}
EVERYTHING_EXCLUDED = {"toggle-simulated-logging", "toggle-subscriber-updates", "simulate-research-query"}
# A secret in the gateway's environment, which no upstream server may see.
GATEWAY_SECRET = "gateway-secret-sentinel-8f3a"
# The input schema of the explicit tool: one entity, where the upstream takes a list.
CREATE_ENTITY_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "entity_type": {"type": "string", "minLength": 1, "maxLength": 100},
        "observations": {"type": "array", "items": {"type": "string", "maxLength": 500}, "maxItems": 20},
    },
    "required": ["name", "entity_type", "observations"],
    "additionalProperties": False,
}

# Calls of one entity name made at once in the storm.
STORM_CALLS = 16
# Entity names created one after another while the memory server is killed under them.
RESTART_NAMES = 8
CALLS_PER_NAME = 4
KILLS = 3
KILL_PAUSE_SECONDS = 0.4
# How often, and how far apart, a test asks again until an answer is final.
FOLLOW_UPS_MAX = 12
FOLLOW_UP_PAUSE_SECONDS = 0.25
# Longest a group of calls may take before the test fails instead of hanging.
CALLS_SECONDS_MAX = 60
# Statuses that say the entity was not created: wrong for an entity the graph holds.
NOT_CREATED = {"rejected", "not_executed"}


def require_servers() -> None:
    """Skips the test when the npm servers or `node` are missing, or fails it under CI=true."""
    missing = [str(path) for path in (MEMORY_SERVER, EVERYTHING_SERVER) if not path.exists()]
    if shutil.which("node") is None:
        missing.append("`node` on PATH")
    if not missing:
        return
    why = f"missing {', '.join(missing)}: run .ci/run, or `npm ci --prefix target/npm-mcp-servers` after copying crates/intentgate-mcp/tests/npm/package*.json there"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def quoted(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is one)."""
    return json.dumps(text)


def write_config(folder: pathlib.Path, memory_effects: dict[str, str] = MEMORY_EFFECTS) -> pathlib.Path:
    """The config importing both servers; `memory_effects` replaces the classification of
    memory's unmarked tools."""
    effects = "\n".join(f"      {name}: {effect}" for name, effect in memory_effects.items())
    everything_effects = "\n".join(f"      {quoted(name)}: {effect}" for name, effect in EVERYTHING_EFFECTS.items())
    text = f"""\
auth: none
gateway:
  tenant: default

upstreams:
  memory:
    kind: mcp
    command: node
    args: [{quoted(str(MEMORY_SERVER))}]
    env: {{MEMORY_FILE_PATH: {quoted(str(folder / "memory.jsonl"))}}}
    timeout_ms: 5000
  everything:
    kind: mcp
    command: node
    args: [{quoted(str(EVERYTHING_SERVER))}, stdio]
    timeout_ms: 5000

imports:
  - upstream: memory
    prefix: {quoted(MEMORY_PREFIX)}
    effects:
{effects}
    exclude: {json.dumps(sorted(MEMORY_EXCLUDED))}
  - upstream: everything
    prefix: {quoted(EVERYTHING_PREFIX)}
    effects:
{everything_effects}
    exclude: {json.dumps(sorted(EVERYTHING_EXCLUDED))}

tools:
  - name: {CREATE_ENTITY}
    description: >-
      Create an entity of the knowledge graph, with its type and observations.
    effect: side_effect
    once_per: entity name
    key: "entity:{{name}}"
    input_schema: {json.dumps(CREATE_ENTITY_SCHEMA)}
    timeout_ms: 5000
    retry_budget: 2
    call:
      upstream: memory
      tool: create_entities
      arguments:
        entities: [{{name: "{{name}}", entityType: "{{entity_type}}", observations: "{{observations}}"}}]
      result: {{external_id: /entities/0/name}}
    lookup:
      tool: open_nodes
      arguments: {{names: ["{{name}}"]}}
      found: /entities
      match: {{name: {{record: /name}}, entity_type: {{record: /entityType}}}}
      external_id: /name
"""
    path = folder / "npm-servers.yaml"
    path.write_text(text)
    return path


def memory_lines(folder: pathlib.Path) -> list[dict]:
    """The lines of the memory server's file (the server writes it whole, by rename)."""
    path = folder / "memory.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def memory_entities(folder: pathlib.Path) -> list[dict]:
    return [line for line in memory_lines(folder) if line["type"] == "entity"]


def write_memory(folder: pathlib.Path, lines: list[dict]) -> None:
    """Writes the memory file as the server does: whole, then renamed over the old one."""
    path = folder / "memory.jsonl"
    temporary = folder / "memory.jsonl.writing"
    temporary.write_text("\n".join(json.dumps(line) for line in lines))
    temporary.rename(path)


def entity(name: str, entity_type: str = "customer", observations: list[str] | None = None) -> dict:
    return {"name": name, "entity_type": entity_type, "observations": observations or [f"{name} asked twice"]}


def processes() -> list[tuple[int, int, list[str]]]:
    """`(pid, parent pid, argv)` of every process, read from /proc (zombies have no argv)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = [part.decode(errors="replace") for part in (entry / "cmdline").read_bytes().split(b"\0") if part]
        except OSError:
            continue
        # "pid (command) state ppid ...": the command may hold spaces and parentheses.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        found.append((int(entry.name), parent, argv))
    return found


class NpmGateway:
    """intentgate with both npm servers imported, on one transport:

    - `stdio`: the SDK starts `intentgate mcp --config ...` per connection, which starts its
      own memory and everything servers;
    - `http`: `intentgate serve --config ...` runs here and the SDK connects to `/mcp`.
    """

    def __init__(self, transport: str, folder: pathlib.Path):
        self.transport = transport
        self.folder = folder
        self.config = write_config(folder)
        self.args = ["--config", str(self.config), "--ledger", str(folder / "ledger.db"), "--durability", "relaxed"]
        self.env = {"RUST_LOG": "warn", "GATEWAY_SECRET_SENTINEL": GATEWAY_SECRET}
        self.server: Process | None = None
        if transport == "http":
            self.server = Process(["serve", "--listen", "127.0.0.1:0", *self.args], self.env, folder / "serve.log")

    def connect(self) -> Client:
        if self.server is not None:
            return Client(f"{self.server.url}/mcp")
        parameters = StdioServerParameters(command=str(BINARY), args=["mcp", *self.args], env=self.env)
        return Client(stdio_client(parameters, errlog=(self.folder / "mcp.log").open("a")))

    def memory_server_pid(self) -> int | None:
        """The pid of the memory server this gateway runs now (None while it restarts):
        the `node` child of the gateway process whose argv names this test's config."""
        table = processes()
        gateways = {pid for pid, _, argv in table if str(self.config) in argv and argv[0] == str(BINARY)}
        assert len(gateways) <= 1, f"more than one gateway runs {self.config}"
        children = [pid for pid, parent, argv in table if parent in gateways and str(MEMORY_SERVER) in argv]
        assert len(children) <= 1, children
        return children[0] if children else None

    def wait_for_memory_server(self, other_than: int | None = None) -> int:
        """Waits until a memory server other than `other_than` runs; its pid."""
        deadline = time.monotonic() + PROCESS_WAIT_SECONDS
        while time.monotonic() < deadline:
            pid = self.memory_server_pid()
            if pid is not None and pid != other_than:
                return pid
            time.sleep(0.02)
        raise AssertionError(f"no memory server (other than {other_than}) within {PROCESS_WAIT_SECONDS} s")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture(params=["stdio", "http"])
def npm_gateway(request, tmp_path):
    require_servers()
    gateway = NpmGateway(request.param, tmp_path)
    yield gateway
    gateway.stop()


@pytest.fixture
def http_gateway(tmp_path):
    require_servers()
    gateway = NpmGateway("http", tmp_path)
    yield gateway
    gateway.stop()


async def upstream_tools(server: pathlib.Path, folder: pathlib.Path) -> dict:
    """The tools a server lists to the official client directly, without the gateway."""
    args = [str(server)] if server == MEMORY_SERVER else [str(server), "stdio"]
    env = {"MEMORY_FILE_PATH": str(folder / "direct.jsonl")}
    parameters = StdioServerParameters(command="node", args=args, env=env)
    async with Client(stdio_client(parameters, errlog=(folder / "direct.log").open("a"))) as client:
        return {tool.name: tool for tool in (await client.list_tools()).tools}


def done_result(result) -> object:
    """The `result` of a `done` outcome."""
    outcome = outcome_of(result)
    assert outcome["status"] == "done" and not result.is_error, outcome
    return outcome["result"]


@pytest.mark.anyio
async def test_imported_tools_are_listed_with_upstream_descriptions_schemas_and_classified_hints(npm_gateway, tmp_path):
    memory = await upstream_tools(MEMORY_SERVER, tmp_path)
    everything = await upstream_tools(EVERYTHING_SERVER, tmp_path)
    # The facts of the docstring: what the config has to classify.
    assert {name for name, tool in memory.items() if not tool.annotations.read_only_hint} == (
        set(MEMORY_EFFECTS) | MEMORY_EXCLUDED | {"create_entities"}
    )
    assert {name for name, tool in everything.items() if not tool.annotations.read_only_hint} == (
        set(EVERYTHING_EFFECTS) | EVERYTHING_EXCLUDED
    )

    async with npm_gateway.connect() as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    imported = {}
    for prefix, upstream, effects, excluded in [
        (MEMORY_PREFIX, memory, MEMORY_EFFECTS, MEMORY_EXCLUDED | {"create_entities"}),
        (EVERYTHING_PREFIX, everything, EVERYTHING_EFFECTS, EVERYTHING_EXCLUDED),
    ]:
        for name, tool in upstream.items():
            if name not in excluded:
                imported[prefix + name] = (tool, effects.get(name, "read"))
    assert set(listed) == set(imported) | {CREATE_ENTITY}, sorted(set(listed) ^ (set(imported) | {CREATE_ENTITY}))

    for name, (upstream, effect) in imported.items():
        tool = listed[name]
        assert tool.description == upstream.description, name
        assert tool.input_schema == upstream.input_schema, name
        assert tool.title == upstream.title, name
        hints = tool.annotations
        if effect == "read":
            assert hints.read_only_hint is True, name
        else:
            assert (hints.read_only_hint, hints.idempotent_hint) == (False, True), name
        # Hints the classification says nothing about are the upstream's.
        assert hints.destructive_hint == upstream.annotations.destructive_hint, name
        assert hints.open_world_hint == upstream.annotations.open_world_hint, name
    # The deletions stay marked destructive; the classified gzip tool stays open-world.
    assert listed["memory_delete_relations"].annotations.destructive_hint is True
    assert listed["everything_gzip-file-as-resource"].annotations.open_world_hint is True

    create = listed[CREATE_ENTITY]
    assert create.input_schema == CREATE_ENTITY_SCHEMA
    assert create.description.startswith("Create an entity of the knowledge graph")
    assert "Safe to call once per entity name." in create.description
    assert (create.annotations.read_only_hint, create.annotations.idempotent_hint) == (False, True)


@pytest.mark.anyio
async def test_read_and_idempotent_tools_pass_through_with_the_upstreams_data(npm_gateway, tmp_path):
    write_memory(
        tmp_path,
        [
            {"type": "entity", "name": "Ada", "entityType": "customer", "observations": ["prefers email"]},
            {"type": "entity", "name": "order 8812", "entityType": "order", "observations": ["paid 49.00"]},
            {"type": "relation", "from": "Ada", "to": "order 8812", "relationType": "placed"},
        ],
    )
    async with npm_gateway.connect() as client:
        graph = done_result(await client.call_tool("memory_read_graph", {}))
        assert sorted(entity["name"] for entity in graph["entities"]) == ["Ada", "order 8812"]
        assert graph["relations"] == [{"from": "Ada", "to": "order 8812", "relationType": "placed"}]

        found = done_result(await client.call_tool("memory_search_nodes", {"query": "email"}))
        assert [entity["name"] for entity in found["entities"]] == ["Ada"]
        assert found["entities"][0]["observations"] == ["prefers email"]

        opened = done_result(await client.call_tool("memory_open_nodes", {"names": ["nobody"]}))
        assert opened == {"entities": [], "relations": []}

        # everything's reads answer text only: the value is that text.
        assert done_result(await client.call_tool("everything_echo", {"message": "héllo, 8812"})) == "Echo: héllo, 8812"
        assert "5" in done_result(await client.call_tool("everything_get-sum", {"a": 2, "b": 3}))
        weather = done_result(await client.call_tool("everything_get-structured-content", {"location": "Chicago"}))
        assert set(weather) == {"temperature", "conditions", "humidity"}, weather

        # The reads changed nothing.
        assert [entity["name"] for entity in memory_entities(tmp_path)] == ["Ada", "order 8812"]

        # An idempotent tool is sent again as it is: the server adds the observation once and
        # answers the repeat with nothing added.
        observation = {"observations": [{"entityName": "Ada", "contents": ["called on Tuesday"]}]}
        added = done_result(await client.call_tool("memory_add_observations", observation))
        assert added == {"results": [{"entityName": "Ada", "addedObservations": ["called on Tuesday"]}]}
        again = done_result(await client.call_tool("memory_add_observations", observation))
        assert again == {"results": [{"entityName": "Ada", "addedObservations": []}]}
        # The server's refusal (isError) is a refusal, with its text.
        missing = {"observations": [{"entityName": "Nobody", "contents": ["x"]}]}
        refused = await client.call_tool("memory_add_observations", missing)
        outcome = outcome_of(refused)
        assert (outcome["status"], refused.is_error) == ("rejected", True), outcome
        assert "Entity with name Nobody not found" in outcome["message"], outcome

    ada = [entity for entity in memory_entities(tmp_path) if entity["name"] == "Ada"]
    assert ada[0]["observations"] == ["prefers email", "called on Tuesday"]


@pytest.mark.anyio
async def test_a_server_never_sees_the_gateways_secrets(npm_gateway):
    # get-env answers the everything server's whole environment: it has PATH, which a server
    # needs to run, and its config's env, but nothing else of the gateway's environment.
    async with npm_gateway.connect() as client:
        result = await client.call_tool(f"{EVERYTHING_PREFIX}get-env", {})
    text = json.dumps(done_result(result))
    assert "PATH" in text, text
    assert GATEWAY_SECRET not in text, text
    assert "GATEWAY_SECRET_SENTINEL" not in text, text


@pytest.mark.anyio
async def test_a_storm_of_create_entities_for_one_name_creates_it_once(npm_gateway, tmp_path):
    statuses = []

    async with npm_gateway.connect() as client:

        async def one(name: str, call: int) -> None:
            await anyio.sleep((call % 4) * 0.02)
            outcome = outcome_of(await client.call_tool(CREATE_ENTITY, entity(name)))
            statuses.append((name, outcome))

        for name in ["Grace", "Linus"]:
            with anyio.fail_after(CALLS_SECONDS_MAX):
                async with anyio.create_task_group() as group:
                    for call in range(STORM_CALLS):
                        group.start_soon(one, name, call)

        # The same intent asked again afterwards: the stored answer.
        for name in ["Grace", "Linus"]:
            for _ in range(3):
                again = outcome_of(await client.call_tool(CREATE_ENTITY, entity(name)))
                assert again["status"] == "already_done", again
                assert again["external_id"] == name, again
                statuses.append((name, again))

        # Another entity type under a created name is another intent's arguments: refused,
        # nothing sent.
        other = outcome_of(await client.call_tool(CREATE_ENTITY, entity("Grace", entity_type="supplier")))
        assert other["status"] == "conflict", other

    for name in ["Grace", "Linus"]:
        outcomes = [outcome for called, outcome in statuses if called == name]
        assert len(outcomes) == STORM_CALLS + 3
        done = [outcome for outcome in outcomes if outcome["status"] == "done"]
        # One call executed it, with the entity the server answered as created.
        assert len(done) == 1, [outcome["status"] for outcome in outcomes]
        assert done[0]["external_id"] == name
        assert done[0]["result"]["entities"] == [{"name": name, "entityType": "customer", "observations": [f"{name} asked twice"]}]
        assert {outcome["status"] for outcome in outcomes} <= {"done", "already_done", "pending_unknown"}, outcomes
    assert sorted(entity["name"] for entity in memory_entities(tmp_path)) == ["Grace", "Linus"]
    assert [entity["entityType"] for entity in memory_entities(tmp_path)] == ["customer", "customer"]


async def settle(client, name: str) -> dict:
    """Asks for `name` until the answer is final (anything but pending_unknown), or gives
    the last answer after FOLLOW_UPS_MAX tries."""
    for _ in range(FOLLOW_UPS_MAX):
        outcome = outcome_of(await client.call_tool(CREATE_ENTITY, entity(name)))
        if outcome["status"] != "pending_unknown":
            return outcome
        await anyio.sleep(FOLLOW_UP_PAUSE_SECONDS)
    return outcome


@pytest.mark.anyio
async def test_a_memory_server_killed_with_calls_in_flight_gives_no_wrong_answer(http_gateway, tmp_path):
    gateway = http_gateway
    answers: dict[str, list[dict]] = {}

    async with gateway.connect() as client:

        async def ask(name: str, calls: int) -> None:
            async def one() -> None:
                outcome = outcome_of(await client.call_tool(CREATE_ENTITY, entity(name)))
                answers.setdefault(name, []).append(outcome)

            with anyio.fail_after(CALLS_SECONDS_MAX):
                async with anyio.create_task_group() as group:
                    for _ in range(calls):
                        group.start_soon(one)

        # 1. The server dies before acting on a call it was sent: stopped, sent the calls,
        # killed. Nothing was created, so nothing may say it was.
        stopped = gateway.wait_for_memory_server()
        os.kill(stopped, signal.SIGSTOP)
        async with anyio.create_task_group() as group:
            group.start_soon(ask, "lost-before", CALLS_PER_NAME)
            await anyio.sleep(0.5)
            os.kill(stopped, signal.SIGKILL)
        restarted = gateway.wait_for_memory_server(other_than=stopped)
        assert {outcome["status"] for outcome in answers["lost-before"]} <= {"pending_unknown", "not_executed"}, answers
        assert "lost-before" not in [entity["name"] for entity in memory_entities(tmp_path)]

        # 2. The server dies after acting, before answering: stopped, sent the calls, the
        # entity written into its file as the server writes it, killed. The lookup finds it:
        # no call may say it was not created, and it is not created twice.
        os.kill(restarted, signal.SIGSTOP)
        async with anyio.create_task_group() as group:
            group.start_soon(ask, "lost-after", CALLS_PER_NAME)
            await anyio.sleep(0.5)
            created = {"type": "entity", "name": "lost-after", "entityType": "customer", "observations": ["lost-after asked twice"]}
            write_memory(tmp_path, memory_lines(tmp_path) + [created])
            os.kill(restarted, signal.SIGKILL)
        gateway.wait_for_memory_server(other_than=restarted)
        statuses = [outcome["status"] for outcome in answers["lost-after"]]
        assert not set(statuses) & NOT_CREATED, statuses
        assert statuses.count("done") <= 1, statuses
        final = await settle(client, "lost-after")
        assert final["status"] in ("done", "already_done"), final
        assert final["external_id"] == "lost-after", final

        # 3. Names created one after another while the server is killed at random moments.
        names = [f"during-{n}" for n in range(RESTART_NAMES)]

        async def kill_repeatedly() -> None:
            for _ in range(KILLS):
                await anyio.sleep(KILL_PAUSE_SECONDS)
                pid = gateway.memory_server_pid()
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)

        async with anyio.create_task_group() as group:
            group.start_soon(kill_repeatedly)
            for name in names:
                await ask(name, CALLS_PER_NAME)
        gateway.wait_for_memory_server()

        # After the restarts every name settles: a `not_executed` name is created by the
        # next call, and a pending one is settled by its lookup.
        finals = {name: await settle(client, name) for name in names + ["lost-before"]}
        # A name never asked before the kills is created at once.
        fresh = outcome_of(await client.call_tool(CREATE_ENTITY, entity("after-restarts")))
        assert fresh["status"] == "done", fresh

    held = [entity["name"] for entity in memory_entities(tmp_path)]
    assert len(held) == len(set(held)), held
    for name in names + ["lost-before", "lost-after"]:
        outcomes = answers[name] + ([finals[name]] if name in finals else [])
        statuses = [outcome["status"] for outcome in outcomes]
        assert "rejected" not in statuses, (name, statuses)
        assert statuses.count("done") <= 1, (name, statuses)
        # The server answers a create of a name it holds with no entity: a `done` or
        # `already_done` without this name as its external id would be a second create,
        # after an answer that wrongly said the first had not happened.
        for outcome in outcomes:
            if outcome["status"] in ("done", "already_done"):
                assert outcome["external_id"] == name, (name, outcome)
        # The last answer agrees with the graph.
        final = outcomes[-1]["status"]
        if name in held:
            assert final in ("done", "already_done"), (name, statuses)
        else:
            assert final in ("pending_unknown", "not_executed"), (name, statuses)
    assert "after-restarts" in held
    assert "lost-after" in held
    for name in names + ["lost-before", "lost-after"]:
        statuses = [outcome["status"] for outcome in answers[name]]
        print(f"{name}: {statuses} then {finals.get(name, {}).get('status')}, in the graph: {name in held}")


def test_an_unmarked_tool_left_unclassified_is_refused_at_start_with_a_fix(tmp_path):
    require_servers()
    effects = {name: effect for name, effect in MEMORY_EFFECTS.items() if name != "add_observations"}
    config = write_config(tmp_path, effects)
    for command in (["serve", "--listen", "127.0.0.1:0"], ["mcp"]):
        run = subprocess.run(
            [str(BINARY), *command, "--config", str(config), "--ledger", str(tmp_path / "ledger.db")],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROCESS_WAIT_SECONDS * 2,
        )
        assert run.returncode != 0, (command, run.stdout, run.stderr)
        assert "listening" not in run.stdout, (command, run.stdout)
        named = [line for line in run.stderr.splitlines() if "add_observations" in line]
        assert named, (command, run.stderr)
        # The fix: where the tool goes in the config.
        assert any("effects" in line or "exclude" in line for line in run.stderr.splitlines()), (command, run.stderr)
        # Only the unclassified tool is named.
        for classified in ["create_relations", "delete_relations", "read_graph", "create_entities"]:
            assert classified not in run.stderr, (command, classified, run.stderr)


@pytest.mark.anyio
async def test_audit_reports_the_classification_of_every_imported_tool(tmp_path):
    require_servers()
    config = write_config(tmp_path)
    expected = {CREATE_ENTITY: "side_effect"}
    for prefix, server, effects, excluded in [
        (MEMORY_PREFIX, MEMORY_SERVER, MEMORY_EFFECTS, MEMORY_EXCLUDED | {"create_entities"}),
        (EVERYTHING_PREFIX, EVERYTHING_SERVER, EVERYTHING_EFFECTS, EVERYTHING_EXCLUDED),
    ]:
        for name in await upstream_tools(server, tmp_path):
            if name not in excluded:
                expected[prefix + name] = effects.get(name, "read")
    run = subprocess.run(
        [str(BINARY), "audit", "--config", str(config)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT_SECONDS * 2,
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    lines = run.stdout.splitlines()
    for name, effect in expected.items():
        about = [line for line in lines if f"`{name}`" in line]
        assert any(effect in line or effect.replace("_", " ") in line for line in about), (name, effect, about)
    # The memory side effect has no `list`: the audit says reconciliation can't see the
    # server's records, and how to list them with a tool of the same server.
    no_list = [index for index, line in enumerate(lines) if "[no-list]" in line and f"`{CREATE_ENTITY}`" in line]
    assert len(no_list) == 1, lines
    assert "records of MCP upstream `memory`" in lines[no_list[0]], lines
    assert "read-only tool of the same server" in lines[no_list[0] + 1], lines
    # Excluded tools are not behind the gateway, so not classified.
    for name in EVERYTHING_EXCLUDED:
        assert not any(f"`{EVERYTHING_PREFIX}{name}`" in line and "tool-classified" in line for line in lines), name
