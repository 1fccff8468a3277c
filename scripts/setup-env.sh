#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) with Airflow 3.3, the Google provider and this package, installed
# with uv. Safe to run again: it reinstalls only when pyproject.toml or this script changed.
# Usage: scripts/setup-env.sh [VENV_DIR] [AIRFLOW_REQUIREMENT] [PINS] [EXTRAS]
#   PINS: constraints standing in for Airflow's (scripts/environments.sh); EXTRAS: default test,docs,deployment
#   RESOLUTION=lowest-direct installs every direct dependency at its floor.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
AIRFLOW_REQUIREMENT=${2:-apache-airflow==3.3.*}
PINS=${3:-}
EXTRAS=${4:-test,docs,deployment}
RESOLUTION=${RESOLUTION:-highest}
PYTHON=${PYTHON:-python3}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: $PYTHON must be Python 3.11 or newer (set PYTHON=...)" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        # Debian ships venv support separately.
        echo "installing python3-venv (Debian)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV"
    fi
fi
# the package's version (in __init__.py) is part of its installed metadata: a new one reinstalls it
stamp="$VENV/.installed-$(cat pyproject.toml scripts/setup-env.sh airflow_provider_slurmapi/__init__.py | sha256sum | cut -c1-16)-$(echo "$AIRFLOW_REQUIREMENT $PINS $EXTRAS $RESOLUTION" | sha256sum | cut -c1-8)"
if [ ! -f "$stamp" ]; then
    if ! "$VENV/bin/python" -m uv --version >/dev/null 2>&1; then
        "$VENV/bin/python" -m ensurepip >/dev/null 2>&1 || true
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check uv
    fi
    read -ra requirements <<< "$AIRFLOW_REQUIREMENT"
    constraints="$VENV/constraints.txt"
    tr ' ' '\n' <<< "$PINS" > "$constraints"
    uv=("$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" -c "$constraints")
    if [ "$RESOLUTION" = highest ]; then
        "${uv[@]}" "${requirements[@]}" -e ".[$EXTRAS]"
    else
        # the package and Airflow first, alone, so that the floors are those of the package only;
        # then the test tools, keeping every version already installed
        "${uv[@]}" --resolution "$RESOLUTION" "${requirements[@]}" -e .
        "$VENV/bin/python" -m uv pip freeze --python "$VENV/bin/python" | grep -v '^-e ' > "$VENV/installed.txt"
        "${uv[@]}" -c "$VENV/installed.txt" -e ".[$EXTRAS]"
    fi
    # Compiled now, once: with PYTHONDONTWRITEBYTECODE set, every Airflow process the tests start
    # would compile what it imports again (import airflow.sdk: about 3.9 s, against 1.6 s compiled).
    # Some packages ship files that do not compile (templates, other Pythons): that is not an error.
    "$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
        > /dev/null 2>&1 || true
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi
# This package is installed editable, from the work tree: compile it on every run too (only what
# changed is compiled again), so that the processes the tests start do not compile it each time.
"$VENV/bin/python" -m compileall -q -j 0 airflow_provider_slurmapi > /dev/null
