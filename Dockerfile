# syntax=docker/dockerfile:1
# The escher-extender service image: `escher-extender serve`, non-root, no build tools.
#
# Base images are pinned by exact tag. The release pipeline must also pin them by digest
# (python:3.11.14-slim-bookworm@sha256:...): no registry was reachable where this file was
# written, so no digest could be looked up. Build and run:
#   docker build -t escher-extender:0.1.0 .
#   docker run --rm -p 8888:8888 escher-extender:0.1.0 --mode standalone

# ---- build: the project's wheel and the wheels of its dependencies ----
FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is built from (.dockerignore keeps the rest of the checkout out).
COPY pyproject.toml README.md ./
COPY extender ./extender
RUN pip wheel --wheel-dir /wheels .

# ---- runtime: the wheels installed, nothing to build with ----
FROM python:3.11.14-slim-bookworm
# A container is reached from outside: listen on every interface (Settings.host).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 ESCHER_HOST=0.0.0.0
# The wheels are bind-mounted from the build stage, so they leave no layer behind; pip and
# setuptools are removed afterwards: nothing installs or builds at run time.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --only-binary=:all: --find-links=/wheels \
        escher-extender \
    && pip uninstall --yes pip setuptools wheel
# Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
EXPOSE 8888
# Flags follow: `docker run IMAGE --mode standalone`, or the Deployment's args (deploy/base/extender.yaml).
ENTRYPOINT ["escher-extender", "serve"]
