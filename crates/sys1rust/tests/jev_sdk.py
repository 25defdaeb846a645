"""Drives Jev's official Python client (typesafe-sdk) against `sys1rust serve --jev-strict`.

Usage: jev_sdk.py BASE_URL [API_KEY]

Every answer type and every error the server can be made to send from outside is requested
through the SDK; the SDK must parse each one into its typed result or its typed exception,
with the server's message and request id. Prints one line per check and exits 1 on the first
one that fails.
"""

import sys

from typesafe_sdk import (
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAPIError,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    TypeSafeNotFoundError,
    TypeSafeUnprocessableEntityError,
)

BASE = sys.argv[1]
KEY = sys.argv[2] if len(sys.argv) > 2 else None
TICKET = "I was billed twice for my Pro plan this month; refund one charge or I dispute it."


def client(key=None, base=BASE):
    # The SDK needs some key even where the server has none.
    return TypeSafeClient(
        api_key=key or KEY or "no-key-set",
        base_url=base,
        timeout=120.0,
        retry=RetryPolicy(max_retries=0),
    )


def check(name, ok, detail=""):
    print(f"{'ok' if ok else 'FAILED'} {name} {detail}".rstrip())
    if not ok:
        sys.exit(1)


def expect_error(name, cls, status, needle, call):
    try:
        call()
    except cls as e:
        check(name, e.status == status and needle in str(e) and bool(e.request_id), str(e))
        return
    except TypeSafeAPIError as e:
        check(name, False, f"{type(e).__name__}: {e}")
    check(name, False, "no error raised")


with client() as c:
    names = [m.name for m in c.models.list().models]
    check("models", names[:1] == ["jev-latest"] and "typed-decisions" in names, str(names))

    r = c.system_one(
        state=TICKET,
        questions={
            "refund": Noul(instructions="Is the customer asking for money back?"),
            "threat": Noul(criteria={"true": "The customer threatens a chargeback", "false": None}),
            "team": Choice(
                instructions="Which team should handle this ticket?",
                criteria={"Billing": "Payments, refunds", "Technical": None, "Sales": None},
            ),
            "anger": Score(
                instructions="How frustrated is the customer?",
                criteria=["Calm", "Frustrated", "Very angry"],
            ),
        },
        model="jev-latest",
    )
    check("noul", 0.0 <= r.nouls["refund"].noul <= 1.0 and 0.0 <= r.nouls["threat"].noul <= 1.0)
    team = r.choices["team"]
    check("choice", team.choice in ("Billing", "Technical", "Sales") and len(team.probabilities) == 3)
    anger = r.scores["anger"]
    check(
        "score",
        dict(anger.legend) == {0: "Calm", 1: "Frustrated", 2: "Very angry"}
        and sorted(anger.probabilities) == [0, 1, 2],
    )
    check("usage", r.usage.input_tokens > 0 and r.usage.output_tokens == 0)
    check("request id", bool(r.request_id), r.request_id)

    queues = {"Billing": "Payments, invoices, refunds"}
    queues.update({f"Queue {i:03d}": f"Tickets routed to queue {i}" for i in range(1, 255)})
    wide = c.system_one(
        state=TICKET,
        questions={"queue": Choice(instructions="Which queue?", criteria=queues)},
    )
    check("choice of 255", len(wide.choices["queue"].probabilities) == 255)

    expect_error(
        "422 for an unknown type",
        TypeSafeUnprocessableEntityError,
        422,
        "unknown type 'boolean'",
        lambda: c.system_one(state="x", questions={"q": {"type": "boolean", "instructions": "?"}}),
    )
    queues["Queue 255"] = "one too many"
    expect_error(
        "413 for 256 options",
        TypeSafeAPIError,
        413,
        "too many choice options for 'queue' (256 > 255)",
        lambda: c.system_one(
            state="x", questions={"queue": Choice(instructions="Which queue?", criteria=queues)}
        ),
    )

with client(base=BASE + "/elsewhere") as c:
    expect_error(
        "404 for another path",
        TypeSafeNotFoundError,
        404,
        "Not Found",
        lambda: c.system_one(state="x", questions={"q": Noul(instructions="?")}),
    )

if KEY:
    with client(key="not-the-key") as c:
        expect_error(
            "401 for a wrong key",
            TypeSafeAuthenticationError,
            401,
            "invalid or missing bearer token",
            lambda: c.system_one(state="x", questions={"q": Noul(instructions="?")}),
        )
        expect_error(
            "401 for models with a wrong key",
            TypeSafeAuthenticationError,
            401,
            "invalid or missing bearer token",
            lambda: c.models.list(),
        )
