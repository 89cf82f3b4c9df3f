"""The console in a real browser: sign-in, the overview during a retry storm, the kill switch,
an unknown intent resolved by hand, a reconciliation run and its CSV, the alerts, and what a
page of another site or a browser without a session gets."""

from __future__ import annotations

import csv
import datetime
import http.server as web
import pathlib
import threading
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from harness import PHONE, Gateway, Mock, find, fits_a_phone, http, naive_refund, screenshot, sign_in, storm, wait_for


def test_a_page_without_a_session_gets_the_sign_in_form_and_a_wrong_token_a_message(driver, gateway: Gateway) -> None:
    driver.get(gateway.url + "/console/intents")
    field = find(driver, "#credential")
    label = driver.find_element(By.CSS_SELECTOR, "label[for=credential]")
    assert "Admin token" in label.text
    assert field.get_attribute("type") == "password"
    # Nothing of the console's data without a session.
    assert not driver.find_elements(By.CSS_SELECTOR, "header.top nav")
    screenshot(driver, "01-sign-in")
    # By keyboard: the field has the focus, Enter submits.
    assert driver.switch_to.active_element == field
    field.send_keys("not-the-token-" + "0" * 40 + Keys.ENTER)
    message = wait_for("the refusal", lambda: find(driver, "#sign-in-message").text)
    assert "not this gateway's admin token" in message
    # The credential went in a header, never into the URL.
    assert "token" not in driver.current_url and "?" not in driver.current_url
    screenshot(driver, "02-sign-in-refused")
    assert not driver.get_cookies()


def test_the_operator_walks_through_an_incident(driver, gateway: Gateway, mock: Mock, downloads: pathlib.Path) -> None:
    # An operator in Tokyo: times are shown in the browser's time zone.
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Tokyo"})
    sign_in(driver, gateway)
    assert "Asia/Tokyo" in find(driver, "#time-zone").text
    # Chromium keeps the Secure, HttpOnly, SameSite=Strict cookie over http://127.0.0.1.
    cookies = {cookie["name"]: cookie for cookie in driver.get_cookies()}
    session = cookies["__Host-intentgate-console"]
    assert session["secure"] and session["httpOnly"] and session["sameSite"] == "Strict"
    assert driver.execute_script("return document.cookie") == ""
    find(driver, "#card-calls")
    screenshot(driver, "03-overview-quiet")

    # A storm of duplicate calls appears on the overview as it happens.
    orders = [(f"88{n:02d}", "49.00") for n in range(12)]
    outcomes = storm(gateway, orders, calls_per_order=6)
    assert {outcome["status"] for outcome in outcomes} <= {"done", "already_done"}
    repeats = wait_for("the repeats on the overview", lambda: int(find(driver, "#card-repeats .value").text) >= 60 and find(driver, "#card-repeats .value").text)
    assert int(repeats) == 12 * 5
    row = find(driver, 'tr[data-tool="refund_order"]')
    assert row.find_element(By.CSS_SELECTOR, "td.repeats").text == "60"
    assert row.find_elements(By.CSS_SELECTOR, "svg.spark rect.repeats")
    wait_for("the duplicate-call alert", lambda: int(find(driver, "#card-alerts .value").text) >= 1)
    screenshot(driver, "04-overview-storm")
    screenshot(driver, "05-overview-phone", PHONE)
    assert fits_a_phone(driver), "the overview scrolls sideways on a phone"

    # The intents list, filtered, and one intent's page.
    driver.get(gateway.url + "/console/intents")
    Select(find(driver, "#tool")).select_by_value("refund_order")
    find(driver, "#q").send_keys("8805")
    find(driver, "form[role=search] button").click()
    # The unfiltered list already showed the row: wait for the filtered page, whose rows are
    # drawn after it loads, before reading them.
    wait_for("the filtered list", lambda: "q=8805" in driver.current_url)
    row = "//td[contains(., 'refund:8805:49.00')]/preceding-sibling::td//a"
    wait_for("the intent of order 8805", lambda: driver.find_element(By.XPATH, row))
    screenshot(driver, "06-intents")
    # A row redrawn between finding and clicking it is found again.
    wait_for("the intent's page to open", lambda: driver.find_element(By.XPATH, row).click() or True)
    find(driver, "dl.facts")
    page = driver.find_element(By.ID, "main").text
    assert "refund:8805:49.00" in page and "re_" in page and "refund_order:refund:8805:49.00" in page
    # Newest first, the five repeat calls of the storm in one row.
    events = driver.find_elements(By.CSS_SELECTOR, "#event-log tbody tr")
    times = [row.find_element(By.CSS_SELECTOR, "time").get_attribute("datetime") for row in events]
    assert times == sorted(times, reverse=True) and "created" in events[-1].text, [row.text for row in events]
    calls = [int(row.get_attribute("data-repeats") or 1) for row in events if row.find_elements(By.XPATH, "./td[2][starts-with(normalize-space(.), 'call')]")]
    assert sum(calls) == 5 and max(calls) > 1, calls
    first_seen = driver.find_element(By.XPATH, "//dt[.='First seen']/following-sibling::dd[1]/time")
    utc = datetime.datetime.fromisoformat(first_seen.get_attribute("datetime").replace("Z", "+00:00"))
    tokyo = utc.astimezone(datetime.timezone(datetime.timedelta(hours=9)))
    assert first_seen.text.startswith(tokyo.strftime("%-I:%M:%S")), (first_seen.text, tokyo)
    # No tracing yet: the trace slot shows nothing.
    assert not driver.find_elements(By.CSS_SELECTOR, "[data-slot=trace-id]")
    screenshot(driver, "07-intent")

    # An email's address, subject and body are sensitive: its page shows them redacted.
    email = {"to": "ada@example.com", "template_id": "refund_confirmation", "reference": "8805", "subject": "Your refund of 49.00", "body": "Dear Ada, your refund went through."}
    assert gateway.call("send_email", email)["status"] == "done"
    driver.get(gateway.url + "/console/intents?tool=send_email")
    wait_for("the email's intent page to open", lambda: driver.find_element(By.CSS_SELECTOR, "tbody a").click() or True)
    find(driver, "dl.facts")
    page = driver.find_element(By.ID, "main").text
    assert page.count("redacted") >= 3, page
    for secret in ("ada@example.com", "Your refund of 49.00", "Dear Ada"):
        assert secret not in driver.page_source, secret
    assert "refund_confirmation" in page and "8805" in page
    screenshot(driver, "07-intent-sensitive")

    # An ambiguous failure the gateway can't settle: the provider answers 500 after
    # committing and every lookup fails.
    mock.faults(server_error=1000, commit_when_ambiguous=1000, lookup_failure=1000)
    assert gateway.refund("8899", "19.00")["status"] == "pending_unknown"
    driver.get(gateway.url + "/console/unknown")
    form = find(driver, "form.resolve")
    intent_id = form.get_attribute("data-intent")
    external_id = mock_refund_id(mock)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert "Choose done or not executed" in wait_for("the missing choice", lambda: form.find_element(By.CSS_SELECTOR, ".message").text)
    form.find_element(By.CSS_SELECTOR, "input[value=done]").click()
    form.find_element(By.CSS_SELECTOR, "input[type=text]").send_keys(external_id)
    form.find_element(By.CSS_SELECTOR, "textarea").send_keys("Found in the provider's dashboard: refund succeeded")
    screenshot(driver, "08-unknown")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    find(driver, ".callout.calm")
    resolved = gateway.admin("GET", f"/intents/{intent_id}")
    assert resolved["intent"]["status"] == "done" and resolved["intent"]["external_id"] == external_id
    resolve_event = [event for event in resolved["events"] if event["kind"] == "resolve"][-1]
    assert resolve_event["actor"] == "console:admin-token"

    # A refusal stored as rejected, reopened from its page: the next call executes it.
    mock.faults(reject=1000)
    assert gateway.refund("8898", "21.00")["status"] == "rejected"
    mock.faults()
    rejected = gateway.admin("GET", "/intents?tool=refund_order&key=refund:8898:21.00")["intents"][0]
    assert rejected["status"] == "rejected", rejected
    driver.get(gateway.url + f"/console/intents/{rejected['id']}")
    form = find(driver, "form.reopen")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert "Give a reason" in wait_for("the missing reason", lambda: form.find_element(By.CSS_SELECTOR, ".message").text)
    form.find_element(By.CSS_SELECTOR, "textarea").send_keys("The refusal was our wrong API key; rotated")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for("the reopened intent", lambda: gateway.admin("GET", f"/intents/{rejected['id']}")["intent"]["status"] == "not_executed")
    reopen_event = [event for event in gateway.admin("GET", f"/intents/{rejected['id']}")["events"] if event["kind"] == "reopen"][-1]
    assert reopen_event["actor"] == "console:admin-token"
    assert gateway.refund("8898", "21.00")["status"] == "done"
    mock.faults()

    # Reconciliation, with two refunds made around the gateway for one order.
    naive_refund(mock.url, "7001", "25.00")
    naive_refund(mock.url, "7001", "25.00")
    naive_refund(mock.url, "7002", "12.50")
    time.sleep(6)  # past the newest seconds a run leaves for the next one
    driver.get(gateway.url + "/console/reconciliation")
    Select(find(driver, "#window")).select_by_value("15m")
    find(driver, "#run-reconciliation").click()
    callout = find(driver, "#affected-twice")
    assert [item.get_attribute("data-subject") for item in callout.find_elements(By.CSS_SELECTOR, "li")] == ["7001"]
    subjects = [row.get_attribute("data-subject") for row in driver.find_elements(By.CSS_SELECTOR, "tr[data-subject]")]
    assert subjects[:2] == ["7001", "7002"]
    screenshot(driver, "09-reconciliation-run")
    assert fits_a_phone(driver), "a reconciliation run scrolls sideways on a phone"
    driver.find_element(By.XPATH, "//a[contains(., 'Download affected subjects')]").click()
    exported = wait_for("the subjects' CSV", lambda: list(downloads.glob("*-subjects.csv")))
    with exported[0].open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(row["subject"], row["provider_records"]) for row in rows] == [("7001", "2"), ("7002", "1")]
    driver.find_element(By.XPATH, "//a[contains(., 'All mismatches as CSV')]").click()
    exported = wait_for("the mismatches' CSV", lambda: list(downloads.glob("*-mismatches.csv")))
    with exported[0].open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert sorted(row["subject"] for row in rows) == ["7001", "7001", "7002"]
    assert {row["kind"] for row in rows} == {"no_intent"}
    driver.get(gateway.url + "/console/reconciliation")
    find(driver, "tbody tr")
    screenshot(driver, "10-reconciliation")

    # The alerts name the tool and the intents they concern.
    driver.get(gateway.url + "/console/alerts")
    find(driver, "tbody tr")
    alerts = driver.find_element(By.ID, "main").text
    assert "refund_order" in alerts and "duplicate-call alert" in alerts
    assert driver.find_elements(By.CSS_SELECTOR, "tbody a[href^='/console/intents/']")
    screenshot(driver, "11-alerts")

    # The kill switch: confirmation first, then the next call is answered disabled.
    driver.get(gateway.url + "/console/flags")
    find(driver, 'button[data-tool="refund_order"][data-action="off"]').click()
    find(driver, "dialog#confirm[open]")
    # Escape cancels: nothing is switched.
    driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait_for("the dialog to close", lambda: not driver.find_elements(By.CSS_SELECTOR, "dialog#confirm[open]"))
    assert all(flag["enabled"] for flag in gateway.admin("GET", "/flags")["flags"])
    find(driver, 'button[data-tool="refund_order"][data-action="off"]').click()
    dialog = find(driver, "dialog#confirm[open]")
    screenshot(driver, "12-kill-switch-confirm")
    find(driver, "#confirm-ok").click()
    assert "reason" in wait_for("the missing reason", lambda: find(driver, "#confirm-message").text)
    find(driver, "#confirm-reason").send_keys("INC-4411: duplicate refunds")
    find(driver, "#confirm-ok").click()
    find(driver, 'button[data-tool="refund_order"][data-action="on"]')
    assert not dialog.get_attribute("open")
    wait_for("the disabled answer", lambda: gateway.refund("8900", "10.00")["status"] == "disabled", every=0.2)
    flag = [flag for flag in gateway.admin("GET", "/flags")["flags"] if flag["tool"] == "refund_order"][0]
    assert flag["actor"] == "console:admin-token" and flag["reason"] == "INC-4411: duplicate refunds"
    screenshot(driver, "13-kill-switch")
    screenshot(driver, "14-kill-switch-phone", PHONE)
    assert fits_a_phone(driver), "the kill switch scrolls sideways on a phone"

    # Signing out ends the session: the next page is the sign-in form again.
    driver.set_window_size(1280, 900)
    find(driver, "#sign-out").click()
    find(driver, "#credential")
    driver.get(gateway.url + "/console/flags")
    find(driver, "#credential")


def mock_refund_id(mock: Mock) -> str:
    """The id of the one refund the provider committed for order 8899, the newest: ids are
    numbered in order, and the provider's lists fail under the faults (as its dashboard
    would not, for the operator)."""
    status, effects = http("GET", mock.url + "/admin/effects")
    assert status == 200 and effects["by_order"]["8899"] == 1, effects
    return f"re_{effects['total']:06d}"


class AttackerPage(web.BaseHTTPRequestHandler):
    """A page of another site that posts a form to the gateway as soon as it loads."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802 (the handler's name)
        page = f"""<!doctype html><title>win a prize</title>
<form id=f method=post action="{self.target}/v1/admin/reconcile" enctype="text/plain">
<input name='{{"since":"1h","x":"' value='"}}'></form>
<script>document.getElementById("f").submit()</script>"""
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_cross_site_form_post_is_refused(driver, gateway: Gateway) -> None:
    sign_in(driver, gateway)
    runs_before = gateway.admin("GET", "/reconciliations")["reconciliations"]
    AttackerPage.target = gateway.url
    server = web.ThreadingHTTPServer(("127.0.0.1", 0), AttackerPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # `localhost` is another site than `127.0.0.1`, as a real attacker's domain would be.
        driver.get(f"http://localhost:{server.server_address[1]}/")
        refusal = wait_for("the refusal", lambda: "Origin not allowed" in driver.find_element(By.TAG_NAME, "body").text and driver.find_element(By.TAG_NAME, "body").text)
        assert "403" in refusal or "origin-not-allowed" in refusal
        screenshot(driver, "15-cross-site-refused")
    finally:
        server.shutdown()
    assert gateway.admin("GET", "/reconciliations")["reconciliations"] == runs_before
    # The session itself still works from the console's own page.
    driver.get(gateway.url + "/console/flags")
    find(driver, 'button[data-tool="refund_order"]')


def test_an_intents_amount_is_shown_as_it_was_sent(driver, gateway: Gateway) -> None:
    """Regression: the console read the admin API's answers through JSON.parse, so an amount
    sent as the JSON number 49.10 was shown as 49.1 (and any amount with more digits than a
    float holds was shown rounded). Money is shown as it was sent."""
    answer = gateway.refund("8870", "49.10")
    assert answer["status"] == "done", answer
    intent = gateway.admin("GET", "/intents?tool=refund_order&key=refund:8870:49.10")["intents"][0]
    sign_in(driver, gateway, f"/console/intents/{intent['id']}")

    def amount_row() -> str:
        for row in driver.find_elements(By.CSS_SELECTOR, "table.fields tr"):
            if row.find_element(By.CSS_SELECTOR, "th").text == "amount":
                return row.find_element(By.CSS_SELECTOR, "td").text
        return ""

    assert wait_for("the amount argument", amount_row) == "49.10"
    # Counts and times are still numbers the page can compute with.
    assert "NaN" not in find(driver, "main").text
