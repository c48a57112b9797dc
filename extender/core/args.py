"""The base of every feature's typed args (GangArgs, WriteBackArgs, ...): frozen, validated.

Each feature defines its args in its own package, validated there, as kube-scheduler's
plugins define CoschedulingArgs and NodeResourcesFitArgs; extender.settings nests them
(settings.gang, settings.writeback, ...) and the composition root hands each feature its own.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, FiniteFloat

# Finite: an infinite timeout or backoff is a hang, and NaN compares false with everything.
Seconds = FiniteFloat


class Args(BaseModel):
    """A feature's args: set once, at start, and never changed after."""

    model_config = ConfigDict(frozen=True, extra="forbid")
