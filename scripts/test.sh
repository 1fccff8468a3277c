#!/usr/bin/env bash
# Runs the whole test suite on Airflow 3.3 (.venv), then the unit, integration, example-DAG and
# Airflow 2 deployment suites on Airflow 2.11 (.venv-airflow2) against the built-in emulator,
# each environment installed with uv.
# Extra arguments go to pytest on both, e.g. scripts/test.sh tests/unit -x
# AIRFLOW2=no skips the Airflow 2.11 run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-env.sh
scripts/setup-browser.sh

status=0
.venv/bin/python -m pytest "$@" || status=$?

if [ "${AIRFLOW2:-yes}" != no ]; then
    scripts/setup-env.sh .venv-airflow2 'apache-airflow==2.11.*'
    # the same options; the test paths given, or the suites that depend on the Airflow version
    paths=() options=()
    for arg in "$@"; do
        if [ -e "${arg%%::*}" ]; then paths+=("$arg"); else options+=("$arg"); fi
    done
    if [ ${#paths[@]} -eq 0 ]; then
        # what depends on the Airflow version: real Slurm's replies do not (checked on Airflow 3.3)
        paths=(tests/unit tests/integration tests/system tests/deployment/test_airflow2_kill.py)
        options+=(-m "not real_slurm")
    fi
    echo "== Airflow 2.11: ${paths[*]}"
    .venv-airflow2/bin/python -m pytest "${options[@]}" "${paths[@]}" || status=$?
fi
exit "$status"
