// The console's sign-in form: sends the credential as `Authorization: Bearer`, never in a URL.
"use strict";

// Set before reloading after a sign-in: a sign-in form shown again means the browser
// dropped the session cookie.
const SIGNED_IN_FLAG = "intentgate-console-signed-in";

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("sign-in");
  const input = document.getElementById("credential");
  const button = document.getElementById("sign-in-button");
  const message = document.getElementById("sign-in-message");
  if (sessionStorage.getItem(SIGNED_IN_FLAG) === "1") {
    sessionStorage.removeItem(SIGNED_IN_FLAG);
    message.textContent =
      "The gateway accepted the credential, but this browser did not keep the session cookie. " +
      "Browsers keep secure cookies only over HTTPS, or from localhost and 127.0.0.1: open the console that way.";
  }
  input.focus();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.textContent = "";
    const credential = input.value.trim();
    if (!credential) {
      message.textContent = "Enter the admin token or an API key with the admin scope.";
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      const response = await fetch("/console/session", {
        method: "POST",
        headers: {
          "Authorization": "Bearer " + credential,
          "Content-Type": "application/json",
          "Accept": "application/json",
        },
        body: "{}",
        credentials: "same-origin",
        cache: "no-store",
      });
      if (response.ok) {
        input.value = "";
        sessionStorage.setItem(SIGNED_IN_FLAG, "1");
        location.reload();
        return;
      }
      let detail = "The gateway refused the sign-in (HTTP " + response.status + ").";
      try {
        const problem = await response.json();
        if (problem && problem.detail) detail = problem.detail;
      } catch (_) { /* not JSON: keep the status */ }
      message.textContent = detail;
      input.select();
    } catch (error) {
      message.textContent = "The gateway could not be reached, or the credential holds characters a header can't carry: " + error.message;
    } finally {
      button.disabled = false;
    }
  });
});
