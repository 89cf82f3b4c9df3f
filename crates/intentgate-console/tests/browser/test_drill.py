"""The incident drill, as one test: the article's retry storm against the mock provider, most
of it through the gateway and one misconfigured client refunding straight at the provider
with a key per tool call; the operator, in the console, runs reconciliation until it names
every customer that client refunded twice, then switches the refund tool off from the page.

Printed: the time from the first duplicate refund (the provider's own record of it) to the
console naming every customer refunded twice, and to the tool being switched off from the
page. The goal for the first is under 60 s; the test fails past 120 s (shared machines).
"""

from __future__ import annotations

import concurrent.futures
import csv
import pathlib
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from harness import Gateway, Mock, find, naive_refund, screenshot, sign_in, storm, wait_for

#: Customers whose refunds go through the gateway, each asked for by all four retrying
#: layers at once.
GATEWAY_ORDERS = [(f"5{n:03d}", "49.00") for n in range(30)]
#: Customers the misconfigured client refunds around the gateway.
BYPASS_ORDERS = [(f"9{n:03d}", "19.99") for n in range(16)]
#: Calls per gateway refund: model, framework, HTTP client and user retries stacked.
CALLS_PER_REFUND = 6
#: The provider answers 500 to 40% of refunds, after committing them (Stripe replays a
#: stored 500 for the key): retries under the same key get the 500 again, and the framework's
#: retry under a new key refunds again.
FAULTS = {"server_error": 400, "commit_when_ambiguous": 1000, "seed": 1812}
#: Longest the drill may take from the first duplicate to the console naming every customer.
NAMED_WITHIN_SECONDS = 120


def test_the_incident_drill(driver, gateway: Gateway, mock: Mock, downloads: pathlib.Path) -> None:
    sign_in(driver, gateway)
    find(driver, "#card-calls")
    mock.faults(**FAULTS)

    # The storm: the gateway's customers and the bypassing client at the same time.
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        through = pool.submit(storm, gateway, GATEWAY_ORDERS, CALLS_PER_REFUND)
        around = [pool.submit(naive_refund, mock.url, order, amount) for order, amount in BYPASS_ORDERS]
        outcomes = through.result()
        for sent in around:
            sent.result()
    assert {outcome["status"] for outcome in outcomes} <= {"done", "already_done", "pending_unknown"}

    # Ground truth: the provider's records. Every gateway customer has one refund; the
    # bypassing client's customers have one or more.
    mock.faults(seed=1812)
    for order, _ in GATEWAY_ORDERS:
        assert len(mock.refunds(order)) == 1, order
    refunded = {order: mock.refunds(order) for order, _ in BYPASS_ORDERS}
    twice = sorted(order for order, refunds in refunded.items() if len(refunds) > 1)
    assert twice, "the faults refunded nobody twice: change the seed"
    first_duplicate_ms = min(sorted(refund["created_ms"] for refund in refunded[order])[1] for order in twice)

    # The operator sees the storm on the overview...
    wait_for("the storm on the overview", lambda: int(find(driver, "#card-repeats .value").text) >= len(GATEWAY_ORDERS) * (CALLS_PER_REFUND - 1))
    screenshot(driver, "drill-1-overview")

    # ...runs reconciliation from the page until it names every customer refunded twice
    # (a run leaves the newest seconds to the next one).
    named: list[str] = []
    while set(named) != set(twice):
        driver.get(gateway.url + "/console/reconciliation")
        Select(find(driver, "#window")).select_by_value("15m")
        find(driver, "#run-reconciliation").click()
        find(driver, "h1")
        wait_for("the run's page", lambda: "/console/reconciliation/" in driver.current_url)
        find(driver, "tbody, .callout")
        named = [item.get_attribute("data-subject") for item in driver.find_elements(By.CSS_SELECTOR, "#affected-twice li")]
        assert set(named) <= set(twice), f"named {named}, but only {twice} were refunded twice"
        assert time.time() * 1000 - first_duplicate_ms < NAMED_WITHIN_SECONDS * 1000, f"named {named} of {twice}"
        if set(named) != set(twice):
            time.sleep(1)
    named_ms = time.time() * 1000
    screenshot(driver, "drill-2-reconciliation")
    # The list of customers to contact, as a file.
    driver.find_element(By.XPATH, "//a[contains(., 'Download affected subjects')]").click()
    exported = wait_for("the affected customers' CSV", lambda: list(downloads.glob("*-subjects.csv")))
    with exported[0].open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert sorted(row["subject"] for row in rows if int(row["provider_records"]) > 1) == twice

    # ...and switches the refund tool off from the page.
    driver.get(gateway.url + "/console/flags")
    find(driver, 'button[data-tool="refund_order"][data-action="off"]').click()
    find(driver, "dialog#confirm[open]")
    find(driver, "#confirm-reason").send_keys("INC-2291: customers refunded twice by a client that bypasses the gateway")
    find(driver, "#confirm-ok").click()
    find(driver, 'button[data-tool="refund_order"][data-action="on"]')
    off_ms = time.time() * 1000
    screenshot(driver, "drill-3-switched-off")
    wait_for("the disabled answer", lambda: gateway.refund("5999", "10.00")["status"] == "disabled", every=0.2)

    named_after = (named_ms - first_duplicate_ms) / 1000
    off_after = (off_ms - first_duplicate_ms) / 1000
    print(
        f"\nincident drill: {len(twice)} of {len(BYPASS_ORDERS)} bypassing customers refunded twice; "
        f"{len(GATEWAY_ORDERS)} gateway customers x {CALLS_PER_REFUND} calls, one refund each\n"
        f"first duplicate refund -> console names every customer refunded twice: {named_after:.1f} s (goal < 60 s)\n"
        f"first duplicate refund -> refund_order switched off from the page: {off_after:.1f} s"
    )
    assert named_after < NAMED_WITHIN_SECONDS
