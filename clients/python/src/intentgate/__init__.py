"""Python client of intentgate, the retry-safe tool gateway for AI agents.

`Client` (blocking) and `AsyncClient` (asyncio) speak the gateway's HTTP API: `tools`,
`call`, and the intent API for tools your own code executes (`grant`, `renew`, `settle`,
`intent`). Their `side_effect` decorator turns a function that calls a provider with an
idempotency key into a tool that runs at most once per business intent, however often the
model, the framework, the HTTP client or the user retries it.
"""

from intentgate._client import DEFAULT_TIMEOUT_SECONDS, AsyncClient, Client
from intentgate._errors import IntentGateError, LeaseLost, TooManyRounds
from intentgate._side_effect import MISSING_INTENT_ID, RESEND_STOPS, ResendStop

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MISSING_INTENT_ID",
    "RESEND_STOPS",
    "AsyncClient",
    "Client",
    "IntentGateError",
    "LeaseLost",
    "ResendStop",
    "TooManyRounds",
]
