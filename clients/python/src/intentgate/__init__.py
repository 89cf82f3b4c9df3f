"""Python client of intentgate, the retry-safe tool gateway for AI agents.

`Client` (blocking) and `AsyncClient` (asyncio) speak the gateway's HTTP API: `tools`,
`call`, and the intent API for tools your own code executes (`grant`, `renew`, `settle`,
`intent`). Their `side_effect` decorator turns a function that calls a provider with an
idempotency key into a tool that runs at most once per business intent, however often the
model, the framework, the HTTP client or the user retries it. For a tool keyed by the
application's intent id, `with intent_id("..."):` around the code serving one business
request gives every call inside that id.
"""

from intentgate._client import DEFAULT_TIMEOUT_SECONDS, AsyncClient, Client
from intentgate._errors import IntentGateError, LeaseLost, TooManyRounds
from intentgate._intent_id import INTENT_ID_LENGTH_MAX, current_intent_id, intent_id
from intentgate._side_effect import MISSING_INTENT_ID, RESEND_STOPS, ResendStop

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "INTENT_ID_LENGTH_MAX",
    "MISSING_INTENT_ID",
    "RESEND_STOPS",
    "AsyncClient",
    "Client",
    "IntentGateError",
    "LeaseLost",
    "ResendStop",
    "TooManyRounds",
    "current_intent_id",
    "intent_id",
]
