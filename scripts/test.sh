#!/usr/bin/env bash
# Runs the whole test suite (unit, emulator, integration and `airflow dags test` system tests).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-env.sh
exec .venv/bin/python -m pytest "$@"
