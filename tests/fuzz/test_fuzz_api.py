"""Schemathesis against the OpenAPI document the service serves, in standalone mode, in
process through ASGI (inside the app's lifespan): every operation, kube-scheduler's verbs
included (their bodies are documented from the msgspec wire types), with valid and with
mutated (negative) inputs, with the policy token and without it.

What must hold for every request: no 5xx; the status is one the document lists for the
operation, the body matches its schema and content type; a request the schema calls invalid
is refused with a 4xx; an undeclared method gets 405 with `Allow`; and without the token no
policy operation succeeds. Seeded and derandomized: the same requests every run
(ESCHER_FUZZ_EXAMPLES sets how many per operation and mode; tests/fuzz/campaign.py).

Not checked: that schema-valid requests are accepted (schemathesis' positive_data_acceptance).
The service refuses valid-looking values JSON Schema cannot describe (a quantity's grammar, a
DNS name, a node it does not know) with a 4xx naming the field, which is the point.
"""

from __future__ import annotations

from collections import Counter

import schemathesis
from schemathesis import checks
from schemathesis.core.failures import FailureGroup

from extender.app import create_app
from extender.settings import Settings

from .campaign import EXAMPLES, SEED

TOKEN = "t"

app = create_app(Settings(mode="standalone", token=TOKEN))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
schema.config.seed = SEED
schema.config.generation.update(max_examples=EXAMPLES, deterministic=True, database="none")

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
    checks.missing_required_header,
    checks.unsupported_method,
    checks.allow_header_conformance,
]


def call(case: schemathesis.Case, tally: Counter[str], who: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    response = case.call(headers=headers)
    tally[f"api: requests {who}"] += 1
    tally[f"api: {response.status_code // 100}xx {who}"] += 1
    try:
        case.validate_response(response, checks=CHECKS)
    except FailureGroup:
        tally["api: failed checks"] += 1
        raise
    return response.status_code


@schema.parametrize()
def test_with_token(case: schemathesis.Case, tally: Counter[str]) -> None:
    call(case, tally, "with token", TOKEN)


@schema.parametrize()
def test_without_token(case: schemathesis.Case, tally: Counter[str]) -> None:
    """No token, or whatever the generator makes of one: never the right one."""
    sent = (case.headers or {}).get("Authorization", "")
    status = call(case, tally, "without token", None)
    if case.path.startswith("/v1/") and sent != f"Bearer {TOKEN}":
        assert status >= 400, f"{case.method} {case.path} answered {status} without the token"
