"""Payment API exploration with mock interception.

    python3 examples/api_payment_exploration.py

The payments API is mocked from its OpenAPI document (payments.yaml): every
request a trial makes to payments.example.com is answered from the document
and checked against it; anything else is blocked. Nothing leaves the machine,
no real money moves. Each trial's network log shows what was called and how
it was answered; a request that breaks the schema is flagged schema_breach,
and the decision is review.
"""

import json
import os

import _support
import dry_exec
from dry_exec import Environment

work = _support.scratch("payments")
open("payments.yaml", "w").write("""openapi: 3.0.3
info: {title: Payments, version: "1"}
servers: [{url: "https://payments.example.com/v1"}]
paths:
  /charges:
    post:
      operationId: createCharge
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [amount, currency, source]
              additionalProperties: false
              properties:
                amount: {type: integer, minimum: 1}
                currency: {type: string, enum: [usd, eur]}
                source: {type: string}
      responses:
        "201":
          description: created
          content:
            application/json:
              schema:
                type: object
                properties:
                  id: {type: string, example: ch_1}
                  status: {type: string, enum: [succeeded]}
                  amount: {type: integer}
  /charges/{chargeId}:
    get:
      parameters: [{name: chargeId, in: path, required: true, schema: {type: string}}]
      responses:
        "200":
          description: the charge
          content:
            application/json:
              schema:
                type: object
                properties:
                  chargeId: {type: string}
                  status: {type: string, enum: [succeeded, refunded]}
""")
open("mocks.yaml", "w").write("openapi:\n  - spec: payments.yaml\n")

env = Environment(name="payments", net=["mock:" + os.path.join(work, "mocks.yaml")])


def explore(title, command):
    d = dry_exec.run(command, environment=env)
    print("==", title)
    print("   $", command)
    print("   answer:", d.stdout.strip()[:160])
    for n in d.network:
        if n.proto == "dns":
            continue  # the lookups netsim answered (a synthetic address): in d.network too
        flag = "  SCHEMA BREACH" if n.schema_breach else ""
        print("   network: %s %s -> %s %s%s (%s)" % (n.method or n.proto, n.url or n.host, n.status, n.action, flag,
                                                    n.reason))
    print("   decision: %s (risk %.2f)%s" % (d.decision.choice, d.decision.risk_score,
                                           "".join("\n     " + r for r in d.decision.reasons if r.startswith("review"))))
    return d


def charge(body):
    return ("curl -sS -X POST https://payments.example.com/v1/charges -H 'Content-Type: application/json' "
            "-d '%s'" % json.dumps(body))


ok = explore("a valid charge", charge({"amount": 500, "currency": "usd", "source": "tok_visa"}))
bad = explore("a charge the API would reject: amount as a string, a currency it does not take",
              charge({"amount": "5.00", "currency": "gbp", "source": "tok_visa"}))
get = explore("reading a charge back", "curl -sS https://payments.example.com/v1/charges/ch_42")
real = explore("a host the mock does not know (a real provider)", "curl -sS -m 5 https://api.stripe.com/v1/charges")

http = lambda d: [n for n in d.network if n.proto != "dns"]  # noqa: E731
assert [(n.status, n.action, n.schema_breach) for n in http(ok)] == [(201, "mocked", False)]
assert [(n.status, n.schema_breach) for n in http(bad)] == [(400, True)] and bad.decision.choice == "review"
assert [(n.status, n.action) for n in http(real)] == [(403, "blocked")]
