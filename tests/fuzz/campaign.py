"""How big the fuzz tier's campaign is, from the environment: `make test` runs a bounded one
with these defaults, `make fuzz` a long one. The seed is fixed, so runs are reproducible.

ESCHER_FUZZ_SEED      the seed every fuzzer starts from
ESCHER_FUZZ_EXAMPLES  examples per API operation and generation mode (schemathesis)
ESCHER_FUZZ_RUNS      runs of each state machine (the ledger's and the gang manager's)
ESCHER_FUZZ_STEPS     steps per run of a state machine
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SEED = int(os.environ.get("ESCHER_FUZZ_SEED", "20261122"))
EXAMPLES = int(os.environ.get("ESCHER_FUZZ_EXAMPLES", "15"))
RUNS = int(os.environ.get("ESCHER_FUZZ_RUNS", "60"))
STEPS = int(os.environ.get("ESCHER_FUZZ_STEPS", "40"))

# The state machines' settings: RUNS runs of up to STEPS steps, no example database (the seed
# makes runs reproducible), no deadline (a loaded CI machine is slow, not wrong).
MACHINE = settings(
    max_examples=RUNS,
    stateful_step_count=STEPS,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
