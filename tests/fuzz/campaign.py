"""How big the fuzz tier's campaign is, from the environment: `make test` runs a bounded one
with these defaults, `make fuzz` a long one. The seed is fixed, so runs are reproducible.

ESCHER_FUZZ_SEED      the seed every fuzzer starts from
ESCHER_FUZZ_EXAMPLES  examples per API operation and generation mode (schemathesis)
ESCHER_FUZZ_RUNS      runs of each state machine (the ledger's and the gang manager's)
ESCHER_FUZZ_STEPS     steps per run of a state machine
"""

from __future__ import annotations

import os

SEED = int(os.environ.get("ESCHER_FUZZ_SEED", "20261122"))
EXAMPLES = int(os.environ.get("ESCHER_FUZZ_EXAMPLES", "15"))
RUNS = int(os.environ.get("ESCHER_FUZZ_RUNS", "60"))
STEPS = int(os.environ.get("ESCHER_FUZZ_STEPS", "40"))
