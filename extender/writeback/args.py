"""The write-back's args (settings.writeback; ESCHER_WRITEBACK_*, `serve --writeback-*`),
validated here.

Read by the node writer (extender.writeback.nodewriter, and through it the dra mode's slice
publisher) and by the service, which waits for a change on the nodes at most wait_seconds.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from extender.core.args import Args, Seconds


class WriteBackArgs(Args):
    """How changes reach the nodes."""

    coalesce_seconds: Seconds = Field(
        0.02, ge=0, description="changes gathered this long become one patch per node"
    )
    backoff_initial_seconds: Seconds = Field(
        0.1, gt=0, description="retry backoff while the API server fails: first"
    )
    backoff_max_seconds: Seconds = Field(10.0, gt=0, description="... and longest")
    wait_seconds: Seconds = Field(
        10.0,
        ge=0,
        description="how long a policy call waits for its change on the nodes before "
        "answering 202 (503 with leader election: a step-down would drop it)",
    )

    @model_validator(mode="after")
    def _backoff(self) -> WriteBackArgs:
        if self.backoff_initial_seconds > self.backoff_max_seconds:
            raise ValueError("writeback_backoff_initial_seconds is above the max")
        return self
