"""A Stripe refund made by the application itself with the official Stripe Python SDK, at
most once per payment intent and amount, through intentgate's `side_effect` decorator.

The gateway's config is `stripe_refund.yaml` beside this file (a client-executed tool).
Start the gateway, then refund:

    intentgate serve --config clients/python/examples/stripe_refund.yaml --ledger refunds.db
    STRIPE_SECRET_KEY=sk_test_... python clients/python/examples/stripe_refund.py pi_... 49.00

Four layers may retry the refund: the model, the agent framework, the SDK itself
(`stripe.max_network_retries`, which re-sends a request whose connection failed or that
got a 409 or a 5xx) and the user. Every attempt of one intent carries the one provider key
the gateway grants, as Stripe's `Idempotency-Key` and in the refund's metadata:

- Stripe keeps a key's first answer and replays it (`Idempotent-Replayed: true`), so the
  SDK's own retry after a lost answer gets the refund that was made, not a second one.
- When the outcome stays unknown (the SDK's retries ran out on timeouts, or the key's
  stored answer is a 500), the decorator settles `unknown` and the gateway grants a
  lookup: `find_refund` lists the payment intent's refunds and takes the one whose
  metadata holds the key and whose amount is the intent's, in cents. Found, the intent is
  done; not found, the gateway grants the same request again with the same key.
- Unless Stripe's answer says a re-send would get the same answer (`resend_stop`): a 5xx
  replayed for the key (`Idempotent-Replayed: true`), a 5xx with `Stripe-Should-Retry:
  false`, or a 400 `idempotency_error`. Stripe would replay that answer to every re-send
  for the key's 24 hours, so the settle says so and the gateway grants lookups only: the
  intent stays unknown until a lookup finds the refund or an operator settles it.

Money never passes through a float: the amount is a `Decimal`, converted to cents exactly
(an amount with more than two places is refused, never rounded).

Environment: `STRIPE_SECRET_KEY`, `STRIPE_API_BASE` (default `https://api.stripe.com`, or
an emulator's address), `INTENTGATE_URL` (default `http://127.0.0.1:8080`) and
`INTENTGATE_API_KEY` (when the gateway's `auth` has API keys).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import stripe

import intentgate

#: The tool of `stripe_refund.yaml`.
TOOL = "refund_order"
#: The refunds are in US dollars; a dollar has 100 cents.
CURRENCY = "usd"
CURRENCY_EXPONENT = 2
#: The metadata field of a refund that holds the provider key of its intent.
KEY_METADATA = "intentgate_key"
#: How often the SDK re-sends one request itself (a connection error, a 409, a 5xx).
SDK_NETWORK_RETRIES = 2
#: The SDK's HTTP timeout for one request, in seconds.
SDK_TIMEOUT_SECONDS = 30.0
#: Stripe's largest page of a list.
PAGE_SIZE = 100


class InvalidAmount(ValueError):
    """The amount can't be refunded as it is: not a positive amount in whole cents."""


class RefundMismatch(Exception):
    """A refund carries the intent's key but another amount: not this intent's refund as
    asked, so the lookup proves nothing and the intent stays unknown for an operator."""


def to_minor_units(amount: Decimal, exponent: int = CURRENCY_EXPONENT) -> int:
    """`amount` in the currency's minor units (cents for `exponent` 2): `Decimal("49.00")`
    is 4900, `Decimal("49")` is 4900, `Decimal("0.5")` is 50. An amount with more places
    than the currency has (`49.001`, or `49.000`) is refused, never rounded, and so is a
    float, which has lost the amount already."""
    if isinstance(amount, bool) or not isinstance(amount, (Decimal, int, str)):
        raise TypeError(f"the amount must be a decimal.Decimal, not {type(amount).__name__}")
    try:
        value = Decimal(amount)
    except InvalidOperation:
        raise InvalidAmount(f"{amount!r} is not a decimal amount") from None
    if not value.is_finite():
        raise InvalidAmount(f"{amount} is not a finite amount")
    scale = value.as_tuple().exponent
    assert isinstance(scale, int)
    places = max(-scale, 0)
    if places > exponent:
        raise InvalidAmount(
            f"{amount} has {places} decimal places; {CURRENCY.upper()} has {exponent}, and an amount is never rounded"
        )
    minor = value.scaleb(exponent)
    assert minor == minor.to_integral_value()
    if minor <= 0:
        raise InvalidAmount(f"{amount} is not a positive amount")
    return int(minor)


def configure(api_key: str, api_base: str | None = None, *, timeout_seconds: float = SDK_TIMEOUT_SECONDS) -> None:
    """Sets up the Stripe SDK: the key, the API's address, the SDK's own network retries
    and its HTTP timeout."""
    stripe.api_key = api_key
    if api_base is not None:
        stripe.api_base = api_base
    stripe.max_network_retries = SDK_NETWORK_RETRIES
    stripe.default_http_client = stripe.RequestsClient(timeout=timeout_seconds)


def refund_record(refund: stripe.Refund) -> dict[str, Any]:
    """The part of a Stripe refund that the intent keeps as its result (shown to every
    repeat): plain JSON, no floats. (The SDK's objects are not dicts: `to_dict` is.)"""
    fields = refund.to_dict()
    metadata = fields.get("metadata") or {}
    return {
        "id": fields["id"],
        "amount": fields["amount"],
        "currency": fields["currency"],
        "status": fields.get("status"),
        "payment_intent": fields.get("payment_intent"),
        "metadata": {str(name): str(value) for name, value in metadata.items()},
    }


def find_refund(payment_intent: str, amount: Decimal, idempotency_key: str) -> dict[str, Any] | None:
    """The refund made under `idempotency_key`, or None when Stripe has none.

    A payment intent may hold other refunds (an earlier partial refund, one made by hand in
    the dashboard), so the list is read page by page and a refund is this intent's only
    when its metadata holds the key and its amount is the intent's in cents. A refund with
    the key and another amount raises `RefundMismatch`: the intent stays unknown."""
    cents = to_minor_units(amount)
    refunds = stripe.Refund.list(payment_intent=payment_intent, limit=PAGE_SIZE)
    for refund in refunds.auto_paging_iter():
        record = refund_record(refund)
        if record["metadata"].get(KEY_METADATA) != idempotency_key:
            continue
        if record["amount"] != cents:
            raise RefundMismatch(
                f"refund {record['id']} of {payment_intent} carries this intent's key but is {record['amount']} cents, "
                f"not {cents}"
            )
        return record
    return None


def header(error: stripe.StripeError, name: str) -> str | None:
    """The value of response header `name` on a Stripe error, whatever its case."""
    for field, value in (error.headers or {}).items():
        if field.lower() == name.lower():
            return str(value)
    return None


def resend_stop(error: BaseException) -> intentgate.ResendStop | None:
    """Why re-sending the refund with the same key can't help, if Stripe's error says so:
    Stripe replays a key's stored 5xx to every request with the key
    (`Idempotent-Replayed: true`), says when a 5xx is not worth retrying
    (`Stripe-Should-Retry: false`), and answers `idempotency_error` for a key first used
    with other parameters."""
    if isinstance(error, stripe.IdempotencyError):
        return "key_reused"
    # A 409 (another request of the key is running) is an APIError too: it says nothing of
    # what a later re-send gets.
    if not isinstance(error, stripe.APIError) or (error.http_status or 0) < 500:
        return None
    if header(error, "Idempotent-Replayed") == "true":
        return "replayed_server_error"
    if header(error, "Stripe-Should-Retry") == "false":
        return "provider_says_no_retry"
    return None


def refund_tool(gateway: intentgate.Client) -> Callable[..., dict[str, Any]]:
    """`refund_order(payment_intent, amount)`, decorated through `gateway`."""

    @gateway.side_effect(
        TOOL,
        # Stripe refused and nothing happened: a declined or invalid refund (a replayed
        # stored 400 is one too), or an amount that is not whole cents.
        rejected=(stripe.CardError, stripe.InvalidRequestError, InvalidAmount),
        # Refused before processing anything: a later call may refund after all.
        not_processed=(stripe.RateLimitError, stripe.AuthenticationError, stripe.PermissionError),
        # No answer, a 5xx (stored under the key or not), a 409 while another request of
        # the key runs, or a key that Stripe holds for other parameters: the refund may
        # exist, so the gateway grants the lookup.
        ambiguous=(stripe.APIConnectionError, stripe.APIError, stripe.IdempotencyError),
        # ... unless Stripe will answer every same-key re-send the same way: then only
        # lookups follow.
        resend_stop=resend_stop,
        lookup=find_refund,
        external_id="id",
    )
    def refund_order(payment_intent: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
        """Refund part or all of a Stripe payment (amount in US dollars, e.g. "49.00").
        Safe to call once per payment and amount; repeats return the first result."""
        refund = stripe.Refund.create(
            payment_intent=payment_intent,
            amount=to_minor_units(amount),
            metadata={KEY_METADATA: idempotency_key},
            idempotency_key=idempotency_key,
        )
        return refund_record(refund)

    return refund_order


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} PAYMENT_INTENT AMOUNT   (e.g. pi_123 49.00)", file=sys.stderr)
        return 2
    configure(os.environ["STRIPE_SECRET_KEY"], os.environ.get("STRIPE_API_BASE"))
    url = os.environ.get("INTENTGATE_URL", "http://127.0.0.1:8080")
    with intentgate.Client(url, api_key=os.environ.get("INTENTGATE_API_KEY")) as gateway:
        outcome = refund_tool(gateway)(argv[1], Decimal(argv[2]))
    # The answer is parsed with Decimal for every number with a fraction: print those as text.
    print(json.dumps(outcome, default=str, indent=2))
    return 0 if outcome["status"] in ("done", "already_done") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
