"""The Approvals page in a real browser: an approver approves one held refund (the gateway
executes it, once) and denies another with a reason (the next call is answered with it), and
the decisions nobody may make are refused on the page: the approver's own request, a
credential without the `approve` scope, and another tenant's intent.

The gateway is `intentgate serve` with the example config changed in two places: every
`refund_order` call waits for an approver (`approval: {}`), and callers authenticate with API
keys whose scopes and tenants the cases need."""

from __future__ import annotations

import hashlib
import pathlib
import secrets
from typing import Any, Iterator

import pytest
from selenium.webdriver.common.by import By

from harness import EXAMPLE_CONFIG, NARROW, Mock, Process, emulate_phone, find, http, overflow, phone_screenshot, screenshot, stop_emulating, wait_for

#: The API keys of the gateway: name, tenant and scopes. Signing in to the console needs
#: `admin`; deciding needs `approve`, which `admin` does not include.
KEYS = {
    # The agent that asks for refunds; its key may also approve, so it can try its own.
    "agent-7": ("default", ["call", "admin", "approve"]),
    # An approver of tenant default.
    "approver-1": ("default", ["admin", "approve"]),
    # An operator: everything but approving.
    "ops-admin": ("default", ["admin"]),
    # An approver of tenant b.
    "approver-b": ("b", ["admin", "approve"]),
}


class ApprovalGateway:
    """`intentgate serve` whose refunds need approval, with the API keys of `KEYS`."""

    def __init__(self, folder: pathlib.Path, mock: Mock) -> None:
        self.keys = {name: "igk_" + secrets.token_hex(20) for name in KEYS}
        entries = "".join(
            f"    - name: {name}\n"
            f"      sha256: {hashlib.sha256(self.keys[name].encode()).hexdigest()}\n"
            f"      tenant: {tenant}\n"
            f"      scopes: [{', '.join(scopes)}]\n"
            for name, (tenant, scopes) in KEYS.items()
        )
        text = EXAMPLE_CONFIG.read_text()
        assert "\nauth: none\n" in text
        text = text.replace("\nauth: none\n", "\nauth:\n  api_keys:\n" + entries, 1)
        refund = "  - name: refund_order\n"
        assert refund in text
        head, tail = text.split(refund, 1)
        once = "    once_per: order and amount\n"
        assert once in tail
        tail = tail.replace(once, once + "    approval: {deadline: 1h}\n", 1)
        config = folder / "approvals.yaml"
        config.write_text(head + refund + tail)
        self.process = Process(
            ["serve", "--listen", "127.0.0.1:0", "--config", str(config), "--ledger", str(folder / "ledger.db"), "--durability", "relaxed"],
            folder / "serve.log",
            {"INTENTGATE_MOCK_URL": mock.url, "INTENTGATE_HASH_KEY": secrets.token_hex(32)},
        )
        self.url = self.process.url

    def refund(self, caller: str, order_id: str, amount: str) -> dict[str, Any]:
        """`refund_order` as `caller` calls it, the amount written as a JSON number's text."""
        arguments = f'{{"order_id": "{order_id}", "amount": {amount}, "reason": "requested_by_customer"}}'
        status, body = http("POST", self.url + "/v1/tools/refund_order/call", f'{{"arguments": {arguments}}}',
                            {"Authorization": "Bearer " + self.keys[caller]})
        assert status == 200, body
        return body

    def held(self, caller: str, order_id: str, amount: str) -> int:
        """A refund `caller` asked for, held for approval: its intent id."""
        answer = self.refund(caller, order_id, amount)
        assert answer["status"] == "awaiting_approval", answer
        status, page = http("GET", self.url + "/v1/admin/approvals", headers={"Authorization": "Bearer " + self.keys["ops-admin"]})
        assert status == 200, page
        return next(held["intent_id"] for held in page["approvals"] if held["key"] == answer["intent_key"])

    def stop(self) -> None:
        self.process.stop()


@pytest.fixture
def approvals_gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[ApprovalGateway]:
    server = ApprovalGateway(tmp_path, mock)
    yield server
    server.stop()


def sign_in_as(driver: Any, gateway: ApprovalGateway, name: str) -> None:
    """Signs in to the console with `name`'s key, then opens the Approvals page."""
    driver.delete_all_cookies()
    driver.get(gateway.url + "/console/approvals")
    find(driver, "#credential").send_keys(gateway.keys[name])
    find(driver, "#sign-in-button").click()
    find(driver, "header.top nav")
    driver.get(gateway.url + "/console/approvals")
    find(driver, "#approver")


def card(driver: Any, intent_id: int) -> Any:
    return find(driver, f'article.approval[data-intent="{intent_id}"]')


def test_an_approver_approves_one_held_refund_and_denies_another(driver, approvals_gateway: ApprovalGateway, mock: Mock) -> None:
    gateway = approvals_gateway
    approve_id = gateway.held("agent-7", "8812", "150.00")
    deny_id = gateway.held("agent-7", "8813", "75.10")
    assert mock.refunds("8812") == [] and mock.refunds("8813") == []

    sign_in_as(driver, gateway, "approver-1")
    assert "tenant default" in find(driver, "#approver").text
    held = card(driver, approve_id)
    text = held.text
    assert "refund_order" in text and "agent-7" in text and "approval policy" in text
    # The exact arguments, the amount as the agent wrote it (not 150).
    arguments = held.find_element(By.CSS_SELECTOR, '[data-slot="arguments"]').text
    assert "150.00" in arguments and "8812" in arguments, arguments
    assert "75.10" in card(driver, deny_id).find_element(By.CSS_SELECTOR, '[data-slot="arguments"]').text
    # Its history, as the intent's page shows it.
    held.find_element(By.CSS_SELECTOR, "details.history summary").click()
    assert held.find_elements(By.CSS_SELECTOR, "details.history tbody tr")
    screenshot(driver, "30-approvals-open")

    held.find_element(By.CSS_SELECTOR, 'textarea').send_keys("checked the order: damaged on arrival")
    held.find_element(By.CSS_SELECTOR, 'button[data-action="approve"]').click()
    outcome = wait_for("the approval's outcome", lambda: card(driver, approve_id).find_element(By.CSS_SELECTOR, '[data-slot="outcome"]'))
    assert outcome.get_attribute("data-decision") == "approved"
    assert "executed" in outcome.text and "done" in outcome.text, outcome.text
    refunds = mock.refunds("8812")
    assert len(refunds) == 1 and refunds[0]["amount"] == "150.00", refunds

    denied = card(driver, deny_id)
    denied.find_element(By.CSS_SELECTOR, 'button[data-action="deny"]').click()
    message = wait_for("the missing reason", lambda: denied.find_element(By.CSS_SELECTOR, '[data-slot="refusal"]').text)
    assert "reason" in message
    reason = "the customer already got a voucher"
    denied.find_element(By.CSS_SELECTOR, "textarea").send_keys(reason)
    denied.find_element(By.CSS_SELECTOR, 'button[data-action="deny"]').click()
    outcome = wait_for("the denial's outcome", lambda: card(driver, deny_id).find_element(By.CSS_SELECTOR, '[data-slot="outcome"]'))
    assert outcome.get_attribute("data-decision") == "denied"
    screenshot(driver, "31-approvals-decided")

    # The agent's next calls: the approved refund is answered from the ledger, the denied one
    # with the approver's reason; nothing more reached the provider.
    assert gateway.refund("agent-7", "8812", "150.00")["status"] == "already_done"
    again = gateway.refund("agent-7", "8813", "75.10")
    assert again["status"] == "rejected" and reason in str(again), again
    assert len(mock.refunds("8812")) == 1 and mock.refunds("8813") == []

    # Decided requests are listed under their own tab, with who decided.
    driver.get(gateway.url + "/console/approvals?state=closed")
    closed = card(driver, deny_id).text
    assert "denied" in closed and "approver-1" in closed and reason in closed


def test_the_page_refuses_the_approvers_own_request_a_missing_scope_and_another_tenant(driver, approvals_gateway: ApprovalGateway) -> None:
    gateway = approvals_gateway
    intent_id = gateway.held("agent-7", "8820", "120.00")

    # The agent's key also has the approve scope: it may not approve its own request.
    sign_in_as(driver, gateway, "agent-7")
    refusal = card(driver, intent_id).find_element(By.CSS_SELECTOR, '[data-slot="not-decidable"]').text
    assert "`agent-7` asked for intent" in refusal, refusal
    assert not card(driver, intent_id).find_elements(By.CSS_SELECTOR, "button[data-action]")
    # And the admin API refuses it too, should a page send it anyway.
    answer = driver.execute_async_script(FORCE_DECISION, intent_id)
    assert answer["status"] == 403 and answer["body"]["type"].endswith(":own-request"), answer
    screenshot(driver, "32-approvals-own-request")

    # An operator without the approve scope reads the request but may not decide.
    sign_in_as(driver, gateway, "ops-admin")
    assert "not decide" in find(driver, "#approver").text
    refusal = card(driver, intent_id).find_element(By.CSS_SELECTOR, '[data-slot="not-decidable"]').text
    assert "`approve` scope" in refusal and "separate from `admin`" in refusal, refusal
    answer = driver.execute_async_script(FORCE_DECISION, intent_id)
    assert answer["status"] == 403 and answer["body"]["type"].endswith(":approve-scope-required"), answer

    # An approver of tenant b sees tenant default's request (it is an admin too) but may not
    # decide on it.
    sign_in_as(driver, gateway, "approver-b")
    refusal = card(driver, intent_id).find_element(By.CSS_SELECTOR, '[data-slot="not-decidable"]').text
    assert "tenant `default`" in refusal and "tenant `b` only" in refusal, refusal
    answer = driver.execute_async_script(FORCE_DECISION, intent_id)
    assert answer["status"] == 403 and answer["body"]["type"].endswith(":other-tenant"), answer

    # Still waiting, and nothing was sent.
    status, page = http("GET", gateway.url + "/v1/admin/approvals", headers={"Authorization": "Bearer " + gateway.keys["approver-1"]})
    assert status == 200 and [held["intent_id"] for held in page["approvals"]] == [intent_id], page

    # The page at a narrow phone's width: nothing reaches past the screen's edge.
    emulate_phone(driver, NARROW)
    driver.get(gateway.url + "/console/approvals")
    card(driver, intent_id)
    fits = overflow(driver)
    assert fits["scroll"] <= fits["client"] and not fits["past"], fits
    phone_screenshot(driver, "33-approvals-phone")
    stop_emulating(driver)


#: An approval sent from the page with the session's CSRF token, as the page's own script
#: would send it: the admin API's answer (status and body).
FORCE_DECISION = """
const [id, done] = arguments;
const csrf = document.querySelector('meta[name="intentgate-csrf"]').content;
fetch("/v1/admin/approvals/" + id + "/approve", {method: "POST", credentials: "same-origin",
  headers: {"Content-Type": "application/json", "X-Intentgate-Csrf": csrf}, body: "{}"})
  .then(async (response) => done({status: response.status, body: await response.json()}));
"""
