"""Configuration of the extender service: one typed settings object, each feature's args in it.

Read from ESCHER_* environment variables and overridden by `escher-extender serve` flags, which
extender.cli generates from these fields (`--kube-qps` is `kube_qps`, its help the field's
description). Each feature's typed args are defined and validated in its own package and nested
here (settings.gang is extender.gang.args.GangArgs); their variables and flags stay flat, as
they have always been: the group's name, then the field's (ESCHER_GANG_WAIT_SECONDS, `--gang-
wait-seconds`), but for the listeners', leader election's and the scheduling verbs' fields,
which keep their own names (`--port`, `--lease-name`, `--bind-in-flight`). Everything else
receives a Settings instance, or its feature's args; nothing reads the environment. A setting
that cannot work is refused at start with a message naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import copy
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, FiniteFloat, create_model, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from extender.cluster.args import LeaderElectionArgs
from extender.core.args import Args, Seconds
from extender.core.errors import InvalidValue
from extender.core.names import check_domain
from extender.dra.args import DraArgs
from extender.gang.args import GangArgs
from extender.listen import ListenArgs
from extender.policies.args import PolicyArgs
from extender.preference.args import PreferenceArgs
from extender.scheduling.args import SchedulingArgs
from extender.writeback.args import WriteBackArgs

Mode = Literal["standalone", "pure", "extender", "dra"]

# The groups whose fields are named flat without the group's name.
_UNPREFIXED = ("listen", "leader_election", "scheduling")


class Settings(BaseSettings):
    """Everything the extender service can be configured with."""

    model_config = SettingsConfigDict(env_prefix="ESCHER_", extra="forbid")

    listen: ListenArgs = Field(default_factory=ListenArgs)

    # ---- Kubernetes ------------------------------------------------------------------------
    mode: Mode = Field(
        "extender",
        description="extender: in kube-scheduler's path, also binding pods; pure: the policy "
        "API and the write-back only, kube-scheduler decides alone; dra: as pure, with the "
        "resources published as DRA devices (ResourceSlices and a DeviceClass per resource) "
        "instead of Node status; standalone: no Kubernetes API at all, nodes only from "
        "requests, no write-back, no bind",
    )
    kubeconfig: Path | None = Field(None, description="kubeconfig file (default: $KUBECONFIG)")
    in_cluster: bool = Field(False, description="use the pod's service account")
    kube_qps: FiniteFloat = Field(
        50.0,
        gt=0,
        description="the extender's API budget (binds, write-back): give it kube-scheduler's "
        "clientConnection.qps",
    )
    kube_burst: int = Field(100, ge=1, description="... and burst")
    resource_domain: str = Field(
        "escher.io",
        description="pods request <resource_domain>/<name>; the extender owns exactly these "
        "resources",
    )

    # ---- who may call ----------------------------------------------------------------------
    token: str | None = Field(
        None,
        description="bearer token accepted on the policy API (and, with metrics_auth, /metrics)",
    )
    kubernetes_auth: bool = Field(
        False,
        description="also accept Kubernetes tokens on the policy API: TokenReview, then RBAC "
        "through SubjectAccessReview on ephemeralresources.<resource_domain> "
        "(docs/policy-api.md)",
    )
    auth_cache_seconds: Seconds = Field(10.0, ge=0, description="how long a review is reused")
    metrics_auth: bool = Field(False, description="require the token on /metrics too")

    # ---- limits ------------------------------------------------------------------------------
    max_esl_instances: int = Field(1000, ge=1, description="ESL instances at most")

    # ---- the features' args ------------------------------------------------------------------
    policy: PolicyArgs = Field(default_factory=PolicyArgs)
    writeback: WriteBackArgs = Field(default_factory=WriteBackArgs)
    gang: GangArgs = Field(default_factory=GangArgs)
    preference: PreferenceArgs = Field(default_factory=PreferenceArgs)
    leader_election: LeaderElectionArgs = Field(default_factory=LeaderElectionArgs)
    dra: DraArgs = Field(default_factory=DraArgs)
    scheduling: SchedulingArgs = Field(default_factory=SchedulingArgs)

    # ---- the event loop ----------------------------------------------------------
    loop_watch_interval_seconds: Seconds = Field(
        0.05,
        gt=0,
        description="how often the event loop's lag is measured (escher_event_loop_lag_seconds)",
    )

    # ---- the process ---------------------------------------------------------------------------
    gc_freeze: bool = Field(
        True,
        description="once the ledger is built from the cluster, move everything alive then "
        "out of the garbage collector's walks (gc.freeze): its full collections, which stop "
        "the event loop, then cost what came after startup, not the whole process "
        "(extender.collector)",
    )
    gc_defer_full_seconds: Seconds = Field(
        300.0,
        ge=0,
        description="while gang members' bind calls are in flight, defer the garbage "
        "collector's full collections, which would walk every one of them, for at most this "
        "long a busy spell (overlapping gangs of up to 1,024 at 5,000 nodes kept members "
        "binding for 70-145 s on end; 0: never defer; extender.collector)",
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="DEBUG, INFO, WARNING or ERROR"
    )
    log_json: bool = Field(True, description="log JSON lines (off: text)")

    @field_validator("resource_domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        try:
            return check_domain(v)
        except InvalidValue as e:
            raise ValueError(str(e)) from None

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Flat names (keyword arguments, the flags) into their feature's args."""
        return nest(data) if isinstance(data, dict) else data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The variables are read flat, as the flags are (no .env file or secrets directory).
        return init_settings, _FlatEnv(Flat)

    @property
    def kube(self) -> bool:
        """Whether the service talks to the Kubernetes API (every mode but standalone)."""
        return self.mode != "standalone"

    @property
    def binds(self) -> bool:
        """Whether the service binds pods (kube-scheduler's bindVerb): the extender mode."""
        return self.mode == "extender"

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.leader_election.leader_elect and not self.kube:
            raise ValueError("leader_elect needs the Kubernetes API (not mode standalone)")
        if self.kubernetes_auth and not self.kube:
            raise ValueError("kubernetes_auth needs the Kubernetes API (not mode standalone)")
        return self


def _groups() -> dict[str, type[Args]]:
    """Settings' fields that are a feature's args, and their type."""
    out: dict[str, type[Args]] = {}
    for name, field in Settings.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, Args):
            out[name] = field.annotation
    return out


GROUPS = _groups()
# Every setting by its flat name (its ESCHER_ variable's and its flag's): where it is in
# Settings, as (field,) or (group, field).
FLAT: dict[str, tuple[str, ...]] = {}
for _name, _field in Settings.model_fields.items():
    if _name not in GROUPS:
        FLAT[_name] = (_name,)
        continue
    _prefix = "" if _name in _UNPREFIXED else f"{_name}_"
    FLAT.update({f"{_prefix}{f}": (_name, f) for f in GROUPS[_name].model_fields})


def nest(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with its flat names moved into their groups (a flat name given beside its
    group's args wins)."""
    out = {k: v for k, v in data.items() if len(FLAT.get(k, ())) != 2}
    for key, value in data.items():
        where = FLAT.get(key, ())
        if len(where) == 2:
            group = out.get(where[0], {})
            if isinstance(group, BaseModel):
                group = group.model_dump(exclude_unset=True)
            out[where[0]] = {**group, where[1]: value}
    return out


def flat_name(loc: tuple[str | int, ...]) -> str:
    """The flat name of the setting at an error's location in Settings."""
    for name, where in FLAT.items():
        if where == loc[: len(where)]:
            return name
    return ".".join(str(p) for p in loc)


class _FlatSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ESCHER_")


def _flat_field(where: tuple[str, ...]) -> tuple[Any, Any]:
    field = GROUPS[where[0]].model_fields[where[1]] if len(where) == 2 else None
    field = field or Settings.model_fields[where[0]]
    return field.annotation, copy(field)


# The settings as users name them, one field per ESCHER_ variable and serve flag: what the
# environment is read through and the flags are generated from (never validated as such).
Flat: type[BaseSettings] = create_model(  # type: ignore[call-overload]
    "Flat", __base__=_FlatSettings, **{name: _flat_field(w) for name, w in FLAT.items()}
)


class _FlatEnv(EnvSettingsSource):
    """ESCHER_* variables by their flat names, nested as Settings holds them."""

    def __call__(self) -> dict[str, Any]:
        return nest(super().__call__())
