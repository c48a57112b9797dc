"""The `escher-extender` command line: `serve`, and the command groups of installed plugins.

The console-script entry point (pyproject [project.scripts]) and `python -m extender`.
`serve`'s flags are generated from the one typed Settings object (one flag per field);
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
from pydantic_settings import CliSettingsSource

from extender import __version__
from extender.settings import Settings


def settings_of(args: argparse.Namespace) -> Settings:
    """The Settings `serve`'s parsed flags give (over ESCHER_* variables and defaults)."""
    return Settings(_cli_settings_source=args.settings(parsed_args=args))


def _serve(args: argparse.Namespace) -> int:
    from extender import logs

    try:
        settings = settings_of(args)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or "settings"
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
    # pydantic-settings adds one flag per field (bools as --x / --no-x), with the field's
    # description and bounds, so a setting cannot be missing from the command line.
    source: CliSettingsSource[Settings] = CliSettingsSource(
        Settings,
        root_parser=p,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_enforce_required=False,
    )
    p.set_defaults(func=_serve, settings=source)


COMMANDS_GROUP = "escher_extender.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="escher-extender",
        description="A kube-scheduler extender for ESCHER-style ephemeral resources.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
