"""The real parts of the console's browser tests: `intentgate mock-provider` and
`intentgate serve` (the example config, with an admin token) as child processes on loopback
ports, calls through the gateway and around it, and a headless Chromium driven by Selenium.

Run with `INTENTGATE_BIN` pointing at the binary, or after `cargo build -p intentgate` from the
repository root (the default is `target/debug/intentgate`). Screenshots of every page are
written under `target/console-screenshots/` as the tests run.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import secrets
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

REPOSITORY = pathlib.Path(__file__).resolve().parents[4]
BINARY = pathlib.Path(os.environ.get("INTENTGATE_BIN", REPOSITORY / "target" / "debug" / "intentgate"))
EXAMPLE_CONFIG = REPOSITORY / "examples" / "support-agent.yaml"
SCREENSHOTS = REPOSITORY / "target" / "console-screenshots"
#: Longest wait for a process to start or stop, a page to show something, an HTTP answer.
WAIT_SECONDS = 20
#: The flags that let Chromium run here: no sandbox (a container), no GPU, no network of its
#: own (no updates, sync or QUIC probes).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
#: A laptop's window and a phone's (an iPhone 14's CSS pixels).
LAPTOP = (1280, 900)
PHONE = (390, 844)


class Process:
    """A child `intentgate` process that prints `... listening on http://ADDR` first."""

    def __init__(self, args: list[str], log: pathlib.Path, env: dict[str, str] | None = None) -> None:
        assert BINARY.exists(), f"{BINARY} is missing: run `cargo build -p intentgate` first, or set INTENTGATE_BIN"
        self.process = subprocess.Popen(
            [str(BINARY), *args],
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            env={**os.environ, "RUST_LOG": "warn", **(env or {})},
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert " listening on http://" in line, f"unexpected first line {line!r}; see {log}"
        self.url = line.strip().rsplit(" ", 1)[-1]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = WAIT_SECONDS) -> tuple[int, Any]:
    """One JSON request (`body` as a value, or as JSON text already); returns the status and
    the decoded body (text when not JSON)."""
    data = None if body is None else body.encode() if isinstance(body, str) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


class Mock:
    """The mock payments provider, with its admin API."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.process = Process(["mock-provider", "--listen", "127.0.0.1:0", "--faults", "quiet"], folder / "mock.log")
        self.url = self.process.url

    def faults(self, **plan: Any) -> None:
        """Replaces the fault plan: no latency, a short timeout hold, then `plan`."""
        full = {"latency_p50_ms": 0, "latency_p95_ms": 0, "retry_after_ms": 10, "timeout_hold_ms": 500, "seed": 7}
        full.update(plan)
        status, body = http("PUT", self.url + "/admin/faults", full)
        assert status == 200, body

    def refunds(self, order_id: str) -> list[dict[str, Any]]:
        status, body = http("GET", self.url + "/v1/refunds?order_id=" + order_id)
        assert status == 200, body
        return body["data"]

    def stop(self) -> None:
        self.process.stop()


class Gateway:
    """`intentgate serve` with the example config against `mock`, a SQLite ledger in `folder`
    and an admin token."""

    def __init__(self, folder: pathlib.Path, mock: Mock) -> None:
        self.token = secrets.token_hex(32)
        self.process = Process(
            ["serve", "--listen", "127.0.0.1:0", "--config", str(EXAMPLE_CONFIG), "--ledger", str(folder / "ledger.db"), "--durability", "relaxed"],
            folder / "serve.log",
            {"INTENTGATE_MOCK_URL": mock.url, "INTENTGATE_HASH_KEY": secrets.token_hex(32), "INTENTGATE_ADMIN_TOKEN": self.token},
        )
        self.url = self.process.url

    def refund(self, order_id: str, amount: str) -> dict[str, Any]:
        """`refund_order` through the gateway, as an agent calls it: the amount (`"49.00"`) is
        written as a JSON number, as its text, never through a float."""
        assert amount.replace(".", "", 1).isdigit(), amount
        arguments = f'{{"order_id": {json.dumps(order_id)}, "amount": {amount}, "reason": "requested_by_customer"}}'
        status, body = http("POST", self.url + "/v1/tools/refund_order/call", f'{{"arguments": {arguments}}}')
        assert status == 200, body
        return body

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Any tool through the gateway (arguments without numbers)."""
        status, body = http("POST", self.url + f"/v1/tools/{tool}/call", {"arguments": arguments})
        assert status == 200, body
        return body

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = http(method, self.url + "/v1/admin" + path, body, {"Authorization": "Bearer " + self.token})
        assert 200 <= status < 300, answer
        return answer

    def stop(self) -> None:
        self.process.stop()


def storm(gateway: Gateway, orders: list[tuple[str, str]], calls_per_order: int) -> list[dict[str, Any]]:
    """The four retrying layers of one refund request each, all at once: `calls_per_order`
    concurrent calls of the same refund per order, through the gateway."""
    work = [order for order in orders for _ in range(calls_per_order)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(lambda order: gateway.refund(*order), work))


def naive_refund(mock_url: str, order_id: str, amount: str, attempts: int = 3, framework_attempts: int = 3) -> int:
    """The misconfigured client of the incident, straight at the provider: the idempotency
    key is the tool call id, so the HTTP client's retries share it, and every retry of the
    agent framework (after the HTTP client gave up) is a new key, hence a new refund when the
    provider had committed the failed one. Returns how many requests it sent."""
    sent = 0
    for _ in range(framework_attempts):
        tool_call_id = "call_" + secrets.token_hex(8)
        for _ in range(attempts):
            sent += 1
            status, _ = http(
                "POST",
                mock_url + "/v1/refunds",
                {"order_id": order_id, "amount": amount, "reason": "requested_by_customer", "metadata": {"tool_call_id": tool_call_id}},
                {"Idempotency-Key": tool_call_id},
                timeout=5,
            )
            if status == 200:
                return sent
            if status < 500 and status != 429:
                return sent
    return sent


def chromium(downloads: pathlib.Path) -> WebDriver:
    """A fresh headless Chromium (its own profile) that saves downloads into `downloads`."""
    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument("--user-data-dir=" + tempfile.mkdtemp(prefix="console-chromium-"))
    options.add_argument(f"--window-size={LAPTOP[0]},{LAPTOP[1]}")
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    # The page's console messages, for the message of a failed wait.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False})
    driver = webdriver.Chrome(options=options, service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    driver.implicitly_wait(0)
    return driver


def wait_for(what: str, check: Callable[[], Any], seconds: float = WAIT_SECONDS, every: float = 0.1) -> Any:
    """Polls `check` until it returns something truthy; fails naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as error:  # a page being redrawn: elements come and go
            last_error = error
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def find(driver: WebDriver, selector: str) -> WebElement:
    """The element `selector` names, once the page shows it; when it never does, the error
    says what the page showed and logged instead."""
    try:
        return wait_for(selector, lambda: driver.find_element(By.CSS_SELECTOR, selector))
    except AssertionError as error:
        shown = driver.find_element(By.TAG_NAME, "body").text[:2000]
        logged = "\n".join(entry["message"] for entry in driver.get_log("browser"))[:4000]
        raise AssertionError(f"{error}\nat {driver.current_url} the page shows:\n{shown}\nand logged:\n{logged}") from None


def screenshot(driver: WebDriver, name: str, size: tuple[int, int] = LAPTOP) -> pathlib.Path:
    """The whole page at `size`'s width, as `target/console-screenshots/NAME.png`."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.set_window_size(*size)
    height = driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    driver.set_window_size(size[0], max(size[1], min(int(height) + 120, 6000)))
    driver.execute_script("window.scrollTo(0, 0)")
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(*size)
    return path


def fits_a_phone(driver: WebDriver) -> bool:
    """Whether the page, at a phone's width, needs no sideways scrolling (wide tables scroll
    inside their own panel)."""
    driver.set_window_size(*PHONE)
    fits = driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    driver.set_window_size(*LAPTOP)
    return bool(fits)


#: The narrowest phone the console is made for: an iPhone SE's or mini's CSS pixels.
NARROW = (375, 812)


def emulate_phone(driver: WebDriver, size: tuple[int, int] = NARROW) -> None:
    """Makes the page's viewport exactly `size`, as a phone's (a desktop window may not
    shrink that far), until `stop_emulating`."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": True})


def phone_screenshot(driver: WebDriver, name: str, size: tuple[int, int] = NARROW) -> pathlib.Path:
    """The whole page at a phone's width, as `target/console-screenshots/NAME.png`."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    emulate_phone(driver, (size[0], max(size[1], min(int(height), 6000))))
    driver.execute_script("window.scrollTo(0, 0)")
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    emulate_phone(driver, size)
    return path


def stop_emulating(driver: WebDriver) -> None:
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def overflow(driver: WebDriver) -> dict[str, Any]:
    """How the page fits its viewport: the page's scroll width and client width, and the
    elements (tag, class, text) that reach past its right edge, outside any panel that scrolls
    on its own. Empty `past` and `scroll <= client` mean nothing is cut off."""
    return driver.execute_script(
        """
        const root = document.documentElement;
        const width = root.clientWidth;
        const past = [];
        for (const node of document.querySelectorAll("body *")) {
          // Wide tables scroll inside their panel; the skip link waits off-screen for focus.
          if (node.closest(".table-wrap, dialog:not([open])") || (node.matches(".skip") && node !== document.activeElement)) continue;
          const box = node.getBoundingClientRect();
          if (box.width === 0 || box.height === 0) continue;
          if (box.right > width + 1 || box.left < -1) {
            past.push(node.tagName.toLowerCase() + "." + node.className + " " + (node.textContent || "").trim().slice(0, 40));
          }
        }
        return { scroll: root.scrollWidth, client: width, past: past.slice(0, 10) };
        """
    )


def nav_usable(driver: WebDriver) -> list[str]:
    """The navigation's links that a person could not see and tap: each must be displayed,
    inside the viewport, and the topmost element at its centre."""
    problems = driver.execute_script(
        """
        const width = document.documentElement.clientWidth;
        const problems = [];
        for (const link of document.querySelectorAll("header.top nav a")) {
          const box = link.getBoundingClientRect();
          const x = box.left + box.width / 2, y = box.top + box.height / 2;
          if (box.width === 0 || box.height === 0) problems.push(link.textContent + ": not displayed");
          else if (box.left < 0 || box.right > width + 1) problems.push(link.textContent + ": outside the viewport (" + box.left + ".." + box.right + " of " + width + ")");
          else if (!link.contains(document.elementFromPoint(x, y))) problems.push(link.textContent + ": covered");
        }
        return problems;
        """
    )
    return list(problems)


def sign_in(driver: WebDriver, gateway: Gateway, path: str = "/console/") -> None:
    driver.get(gateway.url + path)
    find(driver, "#credential").send_keys(gateway.token)
    find(driver, "#sign-in-button").click()
    find(driver, "header.top nav")
