"""The console for the person on call, at a phone's width: every page fits 375 CSS pixels with
its navigation in reach, an unknown intent's card says what resolving it needs (amount,
provider key, age, last error, what the sweeper is doing), the resolve button waits while the
sweeper holds the intent's lease, an intent's event log is newest first with repeats folded,
and the reconciliation page names who was affected."""

from __future__ import annotations

import re
import time

from selenium.webdriver.common.by import By

from harness import Gateway, Mock, emulate_phone, find, http, naive_refund, nav_usable, overflow, phone_screenshot, sign_in, storm, wait_for


def fits(driver, page: str) -> None:
    """Asserts that the page shown needs no sideways scrolling and that every navigation link
    can be seen and tapped."""
    measured = overflow(driver)
    assert measured["scroll"] <= measured["client"] and not measured["past"], f"{page} is cut off at 375 px: {measured}"
    assert not nav_usable(driver), f"{page}: {nav_usable(driver)}"


def test_every_page_fits_a_375_px_phone_and_an_unknown_card_says_what_resolving_needs(driver, gateway: Gateway, mock: Mock) -> None:
    # A storm (repeats to fold), an email (sensitive arguments), an unknown refund, and two
    # refunds made around the gateway for one order (a reconciliation that names someone).
    storm(gateway, [("8801", "49.00"), ("8802", "15.00")], calls_per_order=6)
    gateway.call("send_email", {"to": "ada@example.com", "template_id": "refund_confirmation", "reference": "8801", "subject": "Your refund", "body": "Dear Ada"})
    naive_refund(mock.url, "7001", "25.00")
    naive_refund(mock.url, "7001", "25.00")
    time.sleep(6)  # past the newest seconds a run leaves for the next one
    run = gateway.admin("POST", "/reconcile", {"since": "15m"})
    run_id = gateway.admin("GET", "/reconciliations?limit=1")["reconciliations"][0]["id"]
    assert run["mismatches"], run
    # Every lookup fails from here on, so the refund stays unknown while the pages are read.
    mock.faults(server_error=1000, commit_when_ambiguous=1000, lookup_failure=1000)
    assert gateway.refund("8899", "19.00")["status"] == "pending_unknown"
    stormed = gateway.admin("GET", "/intents?tool=refund_order&key=refund:8801:49.00")["intents"][0]
    unknown = gateway.admin("GET", "/intents?status=unknown")["intents"][0]

    sign_in(driver, gateway)
    emulate_phone(driver)
    assert driver.execute_script("return document.documentElement.clientWidth") == 375
    pages = [
        ("overview", "/console/", "#card-calls"),
        ("intents", "/console/intents", "tbody tr"),
        ("intent", f"/console/intents/{stormed['id']}", "#event-log tbody tr"),
        ("unknown", "/console/unknown", ".unknown-card"),
        ("kill-switch", "/console/flags", "tbody tr"),
        ("reconciliation", "/console/reconciliation", "#affected-latest tbody tr"),
        ("reconciliation-run", f"/console/reconciliation/{run_id}", "tr[data-subject]"),
        ("alerts", "/console/alerts", "main h1"),
    ]
    for name, path, ready in pages:
        driver.get(gateway.url + path)
        find(driver, ready)
        fits(driver, path)
        phone_screenshot(driver, f"phone-375-{name}")
        # The navigation takes a person to every other page from here.
        link = driver.find_element(By.CSS_SELECTOR, 'header.top nav a[data-page="alerts"]')
        assert link.is_displayed()

    # Tapping a link of the wrapped navigation opens its page.
    driver.get(gateway.url + "/console/")
    find(driver, "#card-calls")
    driver.find_element(By.CSS_SELECTOR, 'header.top nav a[data-page="reconciliation"]').click()
    wait_for("the reconciliation page", lambda: driver.current_url.endswith("/console/reconciliation"))

    # The unknown card: amount, provider key, age, last error, and what the sweeper does.
    driver.get(gateway.url + "/console/unknown")
    card = find(driver, f'.unknown-card[data-intent="{unknown["id"]}"]')
    shown = gateway.admin("GET", f"/intents/{unknown['id']}")
    slot = lambda name: card.find_element(By.CSS_SELECTOR, f'[data-slot="{name}"]').text  # noqa: E731
    assert slot("amount") == "19.00", slot("amount")
    assert slot("provider-key") == shown["provider_key"] and "refund:8899:19.00" in slot("provider-key")
    assert re.match(r"^\d+ (s|min)\b", slot("age")), slot("age")
    assert "500" in slot("last-error"), slot("last-error")
    assert "sweeper" in slot("sweeper").lower() and "Attempt 1 (the call's own)" in slot("sweeper"), slot("sweeper")
    assert card.find_element(By.CSS_SELECTOR, "form.resolve button[type=submit]").is_enabled()

    # The event log: newest first, the five repeat calls of the storm folded into one row.
    driver.get(gateway.url + f"/console/intents/{stormed['id']}")
    rows = wait_for("the event log", lambda: driver.find_elements(By.CSS_SELECTOR, "#event-log tbody tr"))
    times = [row.find_element(By.CSS_SELECTOR, "time").get_attribute("datetime") for row in rows]
    assert times == sorted(times, reverse=True), times
    folded = driver.find_element(By.CSS_SELECTOR, "#event-log tr[data-repeats]")
    assert "× " + folded.get_attribute("data-repeats") in folded.text, folded.text
    calls = [int(row.get_attribute("data-repeats") or 1) for row in rows if row.find_elements(By.XPATH, "./td[2][starts-with(normalize-space(.), 'call')]")]
    assert sum(calls) == 5, calls  # every repeat call is counted, none twice
    assert len(rows) < len(gateway.admin("GET", f"/intents/{stormed['id']}")["events"])
    assert rows[-1].find_elements(By.XPATH, ".//td[contains(., 'created')]"), "the oldest event is last"

    # The reconciliation page names who was affected, not only how many.
    driver.get(gateway.url + "/console/reconciliation")
    affected = find(driver, "#affected-latest")
    assert affected.find_elements(By.CSS_SELECTOR, 'tr[data-subject="7001"]'), affected.text
    assert "7001" in driver.find_element(By.CSS_SELECTOR, f'tr[data-run="{run_id}"] td.affected').text


def test_the_resolve_button_waits_while_the_sweeper_re_sends_the_intent(driver, gateway: Gateway, mock: Mock) -> None:
    # The first attempt answers 500 and the lookup finds nothing: unknown, and inside the
    # provider's key window, so the sweeper re-sends it with the same key a second later.
    # That re-send hangs at the provider until the tool's timeout: the sweeper holds the lease.
    mock.faults(server_error=1000, commit_when_ambiguous=0)
    assert gateway.refund("8852", "49.00")["status"] == "pending_unknown"
    mock.faults(timeout=1000, timeout_hold_ms=60_000)
    intent_id = gateway.admin("GET", "/intents?status=unknown")["intents"][0]["id"]
    wait_for("the sweeper's re-send", lambda: (gateway.admin("GET", f"/intents/{intent_id}")["lease"] or {}).get("holder") == "sweeper", seconds=30, every=0.2)

    sign_in(driver, gateway, "/console/unknown")
    emulate_phone(driver)
    card = find(driver, f'.unknown-card[data-intent="{intent_id}"]')
    sweeper = card.find_element(By.CSS_SELECTOR, '[data-slot="sweeper"]').text
    assert "sweeper holds the lease" in sweeper and "re-sending it (automatic attempt 2)" in sweeper, sweeper
    button = card.find_element(By.CSS_SELECTOR, "form.resolve button[type=submit]")
    assert not button.is_enabled()
    refusal = card.find_element(By.CSS_SELECTOR, '[data-slot="resolve-refused"]').text
    assert "the sweeper holds its lease until" in refusal and "Try again after" in refusal, refusal
    fits(driver, "/console/unknown with a leased intent")
    phone_screenshot(driver, "phone-375-unknown-leased")

    # The API refuses the same resolution, whatever sends it.
    status, body = http("POST", gateway.url + f"/v1/admin/intents/{intent_id}/resolve", {"status": "not_executed", "reason": "not in the dashboard"}, {"Authorization": "Bearer " + gateway.token})
    assert status == 409 and body["type"] == "urn:intentgate:problem:lease-held", body
    assert gateway.admin("GET", f"/intents/{intent_id}")["intent"]["status"] == "in_flight"
