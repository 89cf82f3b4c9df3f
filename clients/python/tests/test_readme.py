"""The package README as written, against the repository's example config: its YAML is the
example's `refund_order_sdk` entry, and its Python code runs against `intentgate serve
--config examples/support-agent.yaml` with `intentgate mock-provider` behind it, answering
what its comments say. Written after the README's refund called the example's
gateway-executed `refund_order` through the intent API, which the gateway refuses: the
README had drifted from the config it names."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
import yaml
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from processes import EXAMPLE_CONFIG, REPOSITORY, Gateway, Mock

README = REPOSITORY / "clients" / "python" / "README.md"
#: Sections whose Python blocks show signatures, not code to run.
REFERENCE_SECTIONS = {"The client"}
HASH_KEY = "0123456789abcdef0123456789abcdef-python-readme"


def blocks(language: str) -> list[tuple[str, str]]:
    """The README's fenced blocks of `language`, in order, with the `##` section of each."""
    found = []
    section = ""
    fence: list[str] | None = None
    for line in README.read_text().splitlines():
        if fence is None and line.startswith("## "):
            section = line[3:].strip()
        elif fence is None and line == f"```{language}":
            fence = []
        elif fence is not None and line == "```":
            found.append((section, "\n".join(fence) + "\n"))
            fence = None
        elif fence is not None:
            fence.append(line)
    assert fence is None, f"an unclosed ```{language} block in {README}"
    return found


def example_tool(name: str) -> dict[str, Any]:
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    return next(tool for tool in config["tools"] if tool["name"] == name)


def test_the_readmes_tool_is_the_examples_as_configured() -> None:
    (section, text), = blocks("yaml")
    shown = yaml.safe_load(text)["tools"]
    assert len(shown) == 1, section
    assert shown[0] == example_tool(shown[0]["name"])
    assert shown[0]["executor"] == "client"


def test_the_readmes_code_runs_against_the_example(tmp_path: pathlib.Path, mock: Mock, monkeypatch: pytest.MonkeyPatch) -> None:
    code = [(section, text) for section, text in blocks("python") if section not in REFERENCE_SECTIONS]
    assert len(code) >= 4, "the refund tool and the frameworks' tools"
    folder = tmp_path / "example"
    folder.mkdir()
    env = {"INTENTGATE_MOCK_URL": mock.url, "INTENTGATE_HASH_KEY": HASH_KEY}
    gateway = Gateway(folder, config=EXAMPLE_CONFIG, env=env)
    # Where the README's code finds the gateway and the provider: its defaults are the
    # addresses the example listens on; here both run on free ports.
    monkeypatch.setenv("INTENTGATE_URL", gateway.url)
    monkeypatch.setenv("INTENTGATE_MOCK_URL", mock.url)
    monkeypatch.delenv("INTENTGATE_API_KEY", raising=False)
    namespace: dict[str, Any] = {"__name__": "readme"}
    try:
        for number, (section, text) in enumerate(code, 1):
            exec(compile(text, f"{README}: python block {number} ({section})", "exec"), namespace)
        namespace["gateway"].close()
        namespace["payments"].close()
    finally:
        gateway.stop()

    outcome, again = namespace["outcome"], namespace["again"]
    assert outcome["status"] == "done", outcome
    assert again["status"] == "already_done", again
    assert again["result"]["id"] == outcome["result"]["id"] == outcome["external_id"]
    # The README's comments quote the messages the model reads.
    readme = README.read_text()
    assert f'"message": "{outcome["message"]}"' in readme, outcome["message"]
    quoted = re.search(r'"status": "already_done", "message": "([^"]*?)\.\.\."', readme)
    assert quoted is not None and again["message"].startswith(quoted.group(1)), again["message"]
    # One refund, under the client-executed tool's provider key.
    assert len(mock.refunds("refund_order_sdk:refund:8812:49.00")) == 1
    assert mock.effects()["total"] == 1
    # The framework was shown the business arguments only.
    node = namespace["node"]
    (shown,) = node.tools_by_name.values()
    assert shown.name == "refund_order"
    assert set(shown.args) == {"order_id", "amount"}
    # So were the OpenAI Agents SDK and Pydantic AI, under the gateway's name of the tool.
    (function_tool,) = namespace["support_agent"].tools
    assert function_tool.name == "refund_order_sdk"
    assert set(function_tool.params_json_schema["properties"]) == {"order_id", "amount"}
    listed: list[Any] = []

    def model(history: list[Any], info: Any) -> ModelResponse:
        listed.extend(info.function_tools)
        return ModelResponse(parts=[TextPart("Nothing to do.")])

    namespace["refund_agent"].run_sync("Hello", model=FunctionModel(model))
    (pydantic_tool,) = listed
    assert pydantic_tool.name == "refund_order_sdk"
    assert set(pydantic_tool.parameters_json_schema["properties"]) == {"order_id", "amount"}
