"""The Dockerfile's key properties, read statically from the file.

There is no Docker engine where the tests run, so nothing here builds or runs the image. What
these tests pin is what can honestly be read from the Dockerfile, .dockerignore and
pyproject.toml: exact base-image tags, a build stage and a runtime stage on the same base, a
numeric non-root USER (the one the Deployment runs as), the console script as ENTRYPOINT, the
package pyproject.toml names, and the port the Deployment probes.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli import build_parser
from extender.settings import Settings

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Instruction:
    stage: int  # index of the FROM this instruction belongs to (the FROM itself included)
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comment lines dropped (as Docker
    does); the parser directive on the first line is a comment too."""
    out: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        pending = ""
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword, " ".join(args.split())))
    return out


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return parse((REPO / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def froms(instructions: list[Instruction]) -> list[tuple[str, str | None]]:
    """(image, stage name) of every FROM."""
    out = []
    for i in instructions:
        if i.keyword == "FROM":
            parts = i.args.split()
            out.append(
                (parts[0], parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None)
            )
    return out


def extender_deployment() -> dict[str, Any]:
    docs = yaml.safe_load_all((REPO / "deploy" / "base" / "extender.yaml").read_text())
    return next(d for d in docs if d["kind"] == "Deployment")


def test_every_base_image_is_pinned_to_an_exact_python_tag(
    dockerfile: list[Instruction], pyproject: dict[str, Any]
) -> None:
    images = [image for image, _ in froms(dockerfile)]
    # Patch version and distribution named: no floating tag (latest, 3.11, 3.11-slim).
    exact = re.compile(r"^python:(\d+)\.(\d+)\.(\d+)-slim-bookworm$")
    assert images and all(exact.match(i) for i in images), images
    # The Python the package says it needs.
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", pyproject["project"]["requires-python"])
    assert minimum is not None
    for image in images:
        match = exact.match(image)
        assert match is not None
        assert (int(match[1]), int(match[2])) >= (int(minimum[1]), int(minimum[2]))
    # Digests cannot be looked up here: the file must say who pins them.
    assert "digest" in (REPO / "Dockerfile").read_text()


def test_a_build_stage_makes_wheels_and_the_runtime_stage_only_installs_them(
    dockerfile: list[Instruction],
) -> None:
    stages = froms(dockerfile)
    assert len(stages) == 2
    (build_image, build_name), (runtime_image, _) = stages
    assert build_name == "build"
    # Wheels built for one Python are installed into the same one.
    assert build_image == runtime_image
    build_runs = [i.args for i in dockerfile if i.stage == 0 and i.keyword == "RUN"]
    assert any("pip wheel" in r for r in build_runs)
    runtime = final_stage(dockerfile)
    installs = [i.args for i in runtime if i.keyword == "RUN" and "pip install" in i.args]
    assert len(installs) == 1
    install = installs[0]
    # From the build stage's wheels only: no index, no source builds, nothing copied in.
    assert "from=build" in install and "--no-index" in install and "--only-binary=:all:" in install
    assert not [i for i in runtime if i.keyword in {"COPY", "ADD"}]


def test_installs_the_package_pyproject_names(
    dockerfile: list[Instruction], pyproject: dict[str, Any]
) -> None:
    install = next(i.args for i in final_stage(dockerfile) if "pip install" in i.args)
    assert pyproject["project"]["name"] in install.split()


def test_runs_as_a_numeric_non_root_user_the_deployment_agrees_with(
    dockerfile: list[Instruction],
) -> None:
    users = [i.args for i in final_stage(dockerfile) if i.keyword == "USER"]
    assert len(users) == 1
    match = re.fullmatch(r"(\d+):(\d+)", users[0])
    assert match is not None, f"USER {users[0]} is not numeric uid:gid"
    uid, gid = int(match[1]), int(match[2])
    assert uid > 0 and gid > 0
    pod = extender_deployment()["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"], pod["runAsNonRoot"]) == (uid, gid, True)


def test_entrypoint_is_the_console_script_serve(
    dockerfile: list[Instruction], pyproject: dict[str, Any]
) -> None:
    entrypoints = [i.args for i in final_stage(dockerfile) if i.keyword == "ENTRYPOINT"]
    assert len(entrypoints) == 1
    # The exec form: no shell between the runtime and the process (signals reach uvicorn).
    argv = json.loads(entrypoints[0])
    assert argv == ["escher-extender", "serve"]
    assert pyproject["project"]["scripts"][argv[0]] == "extender.cli:main"
    # The Deployment's args follow the entrypoint: `escher-extender serve` must accept them.
    container = extender_deployment()["spec"]["template"]["spec"]["containers"][0]
    assert "command" not in container
    assert build_parser().parse_args([argv[1], *container["args"]]).command == "serve"


def test_exposes_the_port_the_service_listens_on(dockerfile: list[Instruction]) -> None:
    exposed = [i.args for i in final_stage(dockerfile) if i.keyword == "EXPOSE"]
    assert exposed == ["8888"]
    assert Settings().listen.port == 8888
    container = extender_deployment()["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "https", "containerPort": 8888}]
    # Listening on all interfaces is the image's default, so a bare `docker run` is reachable.
    envs = " ".join(i.args for i in final_stage(dockerfile) if i.keyword == "ENV")
    assert "ESCHER_HOST=0.0.0.0" in envs.split()


def test_no_healthcheck_the_probes_need_nothing_in_the_image(
    dockerfile: list[Instruction],
) -> None:
    # The kubelet probes /healthz and /readyz over HTTP itself: no curl, no shell in the image.
    assert not [i for i in dockerfile if i.keyword == "HEALTHCHECK"]


def test_dockerignore_lets_in_only_what_the_wheel_is_built_from(
    dockerfile: list[Instruction], pyproject: dict[str, Any]
) -> None:
    lines = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "extender"}
    assert pyproject["project"]["readme"] in allowed  # setuptools reads it to build the wheel
    copied = {
        source.rstrip("/").removeprefix("./")
        for i in dockerfile
        if i.keyword == "COPY" and "--from" not in i.args
        for source in i.args.split()[:-1]
    }
    assert copied <= allowed, copied - allowed
