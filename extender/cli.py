"""The `escher-extender` command line: `serve`, `check-scheduler-config`, and the command groups
of installed plugins.

The console-script entry point (pyproject [project.scripts]) and `python -m extender`.
`serve`'s flags are generated from the one typed Settings object (one flag per setting, by
its flat name: extender.settings.Flat);
errors a user can fix end in a one-line message and exit status 2, never a traceback.

Other command groups (the harness's `cluster`, `tour` and `bench`) are not part of the
service: a distribution adds them through the entry-point group `escher_extender.commands`,
each entry a function that adds its sub-parsers. The service image installs none, so there
`escher-extender` is `serve` alone; the service never imports the harness.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, CliSettingsSource

from extender import __version__
from extender.settings import Flat, Settings, flat_name


def settings_of(args: argparse.Namespace) -> Settings:
    """The Settings `serve`'s parsed flags give (over ESCHER_* variables and defaults)."""
    return Settings(_cli_settings_source=args.settings(parsed_args=args))


def _serve(args: argparse.Namespace) -> int:
    from extender import logs

    try:
        settings = settings_of(args)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = flat_name(err["loc"]) or "settings"
        msg = str(err["msg"]).removeprefix("Value error, ")
        print(f"escher-extender serve: {loc}: {msg}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_json)
    from extender import server

    return server.run(settings)


def _add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the extender service",
        description="Run the extender service. Every flag is a field of its settings "
        "(extender.settings), also read from ESCHER_<FIELD> environment variables.",
    )
    # pydantic-settings adds one flag per setting (bools as --x / --no-x), with its
    # description and default, so a setting cannot be missing from the command line.
    source: CliSettingsSource[BaseSettings] = CliSettingsSource(
        Flat,
        root_parser=p,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_enforce_required=False,
    )
    p.set_defaults(func=_serve, settings=source)


def _check_scheduler_config(args: argparse.Namespace) -> int:
    import yaml

    from extender.core.pod import Keys
    from extender.scheduling.profile import extender_entries, problems

    try:
        with open(args.file, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        print(f"escher-extender check-scheduler-config: {args.file}: {e}", file=sys.stderr)
        return 2
    if not isinstance(config, dict):
        print(
            f"escher-extender check-scheduler-config: {args.file}: not a "
            "KubeSchedulerConfiguration (a mapping)",
            file=sys.stderr,
        )
        return 2
    keys = Keys.for_domain(args.resource_domain)
    found = problems(config, keys, args.gang_wait_seconds, args.kube_qps)
    for p in found:
        print(f"{args.file}: {p}", file=sys.stderr)
    if found:
        return 1
    if extender_entries(config, keys):
        print(f"{args.file}: the extender's entries are as it needs them")
    else:
        print(f"{args.file}: no entry calls the extender (kube-scheduler alone, as in pure mode)")
    return 0


def _add_check_scheduler_config(sub: Any) -> None:
    defaults = Flat.model_fields
    p = sub.add_parser(
        "check-scheduler-config",
        help="check a KubeSchedulerConfiguration against what the extender needs of it",
        description="Say each mistake in kube-scheduler's configuration that would send the "
        "extender's exchanges to the wrong pods (gang members bound without their barrier, "
        "a marker it does not know, preferences never scored...). Exit status 1 if any.",
    )
    p.add_argument("file", help="the KubeSchedulerConfiguration file (YAML or JSON)")
    p.add_argument(
        "--resource-domain",
        default=defaults["resource_domain"].default,
        help="the extender's --resource-domain (default %(default)s)",
    )
    p.add_argument(
        "--gang-wait-seconds",
        type=float,
        default=defaults["gang_wait_seconds"].default,
        help="the extender's --gang-wait-seconds (default %(default)s)",
    )
    p.add_argument(
        "--kube-qps",
        type=float,
        default=defaults["kube_qps"].default,
        help="the extender's --kube-qps, its API budget for binds (default %(default)s)",
    )
    p.set_defaults(func=_check_scheduler_config)


COMMANDS_GROUP = "escher_extender.commands"


# The service's own commands: run without loading the plugins' (the harness's imports cost
# about 0.4 s of CPU at every start of a replica).
BUILTIN = ("serve", "check-scheduler-config")


def build_parser(plugins: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="escher-extender",
        description="A kube-scheduler extender for ESCHER-style ephemeral resources.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    _add_check_scheduler_config(sub)
    if plugins:
        for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
            entry.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(plugins=not argv or argv[0] not in BUILTIN).parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
