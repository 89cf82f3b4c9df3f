"""tools/call over MCP: every outcome of docs/design.md section 6 is a tool result (structured
content plus the same JSON as text), with `isError` only where the model must act
differently; unknown tools and malformed calls are JSON-RPC errors."""

import pytest
from mcp import MCPError

from support import ERAS, outcome_of, refund

# JSON-RPC "invalid params": what an unknown tool or a malformed call gets.
INVALID_PARAMS = -32602


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_every_outcome_is_a_tool_result_and_is_error_only_asks_the_model_to_act(gateway, era):
    mock = gateway.mock
    async with gateway.connect(era) as client:

        async def call(tool: str, arguments: dict) -> tuple[dict, bool]:
            result = await client.call_tool(tool, arguments)
            return outcome_of(result), result.is_error

        done, is_error = await call("refund_order", refund("o1"))
        assert (done["status"], is_error) == ("done", False), done
        assert done["intent_key"] == "refund:o1:25.00"
        assert done["external_id"].startswith("re_")

        again, is_error = await call("refund_order", refund("o1", 25))
        assert (again["status"], is_error) == ("already_done", False), again
        assert (again["external_id"], again["result"]) == (done["external_id"], done["result"])

        changed = refund("o1")
        changed["reason"] = "damaged"
        conflict, is_error = await call("refund_order", changed)
        assert (conflict["status"], is_error) == ("conflict", True), conflict
        assert conflict["differing_fields"] == ["reason"]

        invalid, is_error = await call("refund_order", {"order_id": "o2"})
        assert (invalid["status"], is_error) == ("invalid_arguments", True), invalid
        assert len(invalid["errors"]) == 2, invalid

        read, is_error = await call("get_order", {"order_id": "8812"})
        assert (read["status"], is_error) == ("done", False), read
        assert read["result"]["id"] == "8812"

        mock.faults(reject=1000)
        rejected, is_error = await call("refund_order", refund("o3"))
        assert (rejected["status"], is_error) == ("rejected", True), rejected

        mock.faults(rate_limited=1000)
        not_executed, is_error = await call("refund_order", refund("o4"))
        assert (not_executed["status"], is_error) == ("not_executed", False), not_executed

        mock.faults(timeout=1000, commit_when_ambiguous=0, lookup_failure=1000)
        pending, is_error = await call("refund_order", refund("o5"))
        assert (pending["status"], is_error) == ("pending_unknown", False), pending

    assert mock.effects()["by_order"] == {"o1": 1}


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_unknown_tools_and_malformed_calls_are_json_rpc_errors(gateway, era):
    async with gateway.connect(era) as client:
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("refund_everything", {})
        assert unknown.value.code == INVALID_PARAMS
        assert "refund_everything" in unknown.value.message

        for bad_id in [42, "", "x" * 257]:
            with pytest.raises(MCPError) as malformed:
                await client.call_tool(
                    "charge_card",
                    {"customer_id": "c1", "amount": 5, "currency": "usd"},
                    meta={"intentgate/intent_id": bad_id},
                )
            assert malformed.value.code == INVALID_PARAMS, bad_id
            assert "intentgate/intent_id" in malformed.value.message

        # The connection still works after protocol errors.
        outcome = outcome_of(await client.call_tool("get_order", {"order_id": "1"}))
        assert outcome["status"] == "done"
    assert gateway.mock.effects()["total"] == 0, "nothing was executed"


@pytest.mark.anyio
async def test_the_application_intent_id_arrives_in_meta(gateway):
    charge = {"customer_id": "cus_1", "amount": 25, "currency": "usd"}
    async with gateway.connect() as client:

        async def call(intent_id: str | None) -> dict:
            meta = None if intent_id is None else {"intentgate/intent_id": intent_id}
            return outcome_of(await client.call_tool("charge_card", charge, meta=meta))

        first = await call("ci_1")
        assert (first["status"], first["intent_key"]) == ("done", "charge:cus_1:ci_1"), first
        assert (await call("ci_1"))["status"] == "already_done"
        # Another request of the application: the same amount may legitimately be charged twice.
        second = await call("ci_2")
        assert second["status"] == "done", second
        assert second["external_id"] != first["external_id"]
        # Without the id the model is told to tell the user, not to fix the arguments, and
        # every repeat gets the same answer: nothing was recorded.
        missing = await call(None)
        assert missing["status"] == "invalid_arguments", missing
        assert missing["reason"] == "missing_intent_id", missing
        assert "intentgate/intent_id" in missing["errors"][0]
        assert "Do not retry charge_card" in missing["message"], missing
        assert "tell the user" in missing["message"], missing
        assert "fix the arguments" not in missing["message"].lower(), missing
        assert list(missing)[:3] == ["status", "reason", "message"]
        assert [await call(None) for _ in range(2)] == [missing, missing]
    assert gateway.mock.effects()["by_intent_key"] == {
        "charge:cus_1:ci_1": 1,
        "charge:cus_1:ci_2": 1,
    }
