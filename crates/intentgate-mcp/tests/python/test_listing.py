"""tools/list over MCP: the 14 tools of examples/support-agent.yaml that MCP lists (not its
client-executed refund_order_sdk), with their schemas, published descriptions and
annotations, in both protocol eras and on both transports."""

import pytest

from support import ERAS

READS = {
    "get_order",
    "check_refund_status",
    "get_customer",
    "list_customer_orders",
    "list_payment_methods",
    "get_product",
    "track_shipment",
    "get_ticket",
    "search_help_articles",
}
UPDATES = {"set_ticket_status", "update_address"}
SIDE_EFFECTS = {"refund_order", "charge_card", "send_email"}
STATUSES = {
    "done",
    "already_done",
    "pending_unknown",
    "rejected",
    "not_executed",
    "conflict",
    "disabled",
    "invalid_arguments",
    # A tool with an approval policy or budgets (docs/design.md section 13).
    "awaiting_approval",
    "over_budget",
}
ONCE_PER_SENTENCE_END = "Repeated calls return the original result."


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_the_fourteen_tools_are_listed_with_annotations_from_their_effect(gateway, era):
    async with gateway.connect(era) as client:
        assert client.protocol_version == era
        assert client.server_info.name == "intentgate"
        listed = (await client.list_tools()).tools
    tools = {tool.name: tool for tool in listed}
    assert len(listed) == 14
    assert set(tools) == READS | UPDATES | SIDE_EFFECTS
    # Executed by the application's own code through the intent API: not an MCP tool.
    assert "refund_order_sdk" not in tools

    for name in READS:
        annotations = tools[name].annotations
        assert annotations.read_only_hint is True, name
    for name in UPDATES:
        annotations = tools[name].annotations
        assert (annotations.read_only_hint, annotations.idempotent_hint) == (False, True), name
    for name in SIDE_EFFECTS:
        annotations = tools[name].annotations
        # A repeat behind the gateway has no additional effect: idempotent, though the
        # upstream call is not.
        assert (annotations.read_only_hint, annotations.idempotent_hint) == (False, True), name
        # As configured: every side effect of the example is destructive and open-world.
        assert (annotations.destructive_hint, annotations.open_world_hint) == (True, True), name


@pytest.mark.anyio
async def test_side_effecting_tools_publish_the_once_per_intent_sentence(gateway):
    async with gateway.connect() as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for name in SIDE_EFFECTS:
        description = tools[name].description
        assert description.endswith(ONCE_PER_SENTENCE_END), (name, description)
        assert "Safe to call once per " in description, (name, description)
    assert "Safe to call once per order and amount." in tools["refund_order"].description
    for name in READS | UPDATES:
        assert "Safe to call once per" not in tools[name].description, name


# Found by a new user: `charge_card` was listed to an MCP client that could not send the
# `_meta` intent id it needs, and nothing in its description said so.
@pytest.mark.anyio
async def test_a_tool_that_needs_the_intent_id_says_so_and_where_it_goes(gateway):
    async with gateway.connect() as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        instructions = client.instructions
    charge = tools["charge_card"].description
    assert 'MCP _meta "intentgate/intent_id"' in charge, charge
    assert "Only the application can start it" in charge, charge
    assert charge.endswith(ONCE_PER_SENTENCE_END), charge
    for name in set(tools) - {"charge_card"}:
        assert "intentgate/intent_id" not in tools[name].description, name
    # What the server tells every client at connection time.
    assert "intentgate/intent_id" in instructions and "missing_intent_id" in instructions, instructions


@pytest.mark.anyio
async def test_every_tool_has_its_input_schema_and_the_outcome_output_schema(gateway):
    async with gateway.connect() as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    refund = tools["refund_order"].input_schema
    assert refund["type"] == "object"
    assert set(refund["required"]) == {"order_id", "amount", "reason"}
    assert refund["additionalProperties"] is False
    for name, tool in tools.items():
        assert tool.input_schema["type"] == "object", name
        output = tool.output_schema
        assert output["type"] == "object", name
        assert set(output["properties"]["status"]["enum"]) == STATUSES, name
        assert set(output["required"]) == {"status", "message", "tool"}, name
        assert set(output["properties"]) == {
            "status",
            "message",
            "tool",
            "intent_key",
            "result",
            "external_id",
            "differing_fields",
            "errors",
            # Why a call ended so, when the status alone would mislead: `misconfigured`
            # (a not_executed), `missing_intent_id` (an invalid_arguments), `denied` (a
            # rejected a person decided).
            "reason",
        }, name
        assert set(output["properties"]["reason"]["enum"]) == {"misconfigured", "missing_intent_id", "denied"}, name
