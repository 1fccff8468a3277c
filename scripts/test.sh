#!/usr/bin/env bash
# Runs the whole test suite on Airflow 3.3 (.venv) and, at the same time, the suites that depend on
# the Airflow version in every other environment of scripts/environments.sh: Airflow 2.11, 3.1 and 3.2 (unit,
# integration, system, the deployment tests of that version's kill path and, on 2.11 and 3.1, of the
# triggerer and the job-event watchers), every dependency at its floor (unit, system), and Python 3.13 (unit); after the 3.3
# suite, a Cloud Composer-like image taking the built wheel with plain pip (the example DAG). Each
# environment is installed with uv, once.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -x: with test paths given they run
# on Airflow 3.3, then 2.11, only. MATRIX=no runs Airflow 3.3 only; AIRFLOW2=no leaves out Airflow 2.11.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/environments.sh
scripts/setup-env.sh "${ENV_AIRFLOW_3_3[0]}" "${ENV_AIRFLOW_3_3[2]}"
scripts/setup-browser.sh

paths=() options=()
for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then paths+=("$arg"); else options+=("$arg"); fi
done

# install ENV EXTRAS: installs the environment if needed (RESOLUTION: see setup-env.sh)
install() {
    local -n env=$1
    RESOLUTION=${RESOLUTION:-highest} PYTHON=${env[1]} scripts/setup-env.sh "${env[0]}" "${env[2]}" "${env[3]}" "$2"
}
# run ENV EXTRAS PYTEST_ARGS...: installs the environment if needed, then runs pytest in it
run() {
    local -n env=$1
    install "$1" "$2" || { status=1; return; }
    shift 2
    echo "== $1 ($("${env[0]}/bin/python" -c 'import sys, airflow; print(f"Python {sys.version.split()[0]}, Airflow {airflow.__version__}")')): ${*:2}"
    "${env[0]}/bin/python" -m pytest "${options[@]}" "${@:2}" || status=$?
}
# real Slurm's replies do not depend on the Airflow version (checked on Airflow 3.3)
not_real=(-m "not real_slurm")
# what depends on the Airflow version, and the deployment test of each version's kill path (the
# emulator imports nothing of Airflow: its own tests run on 3.3, at the floors and on Python 3.13)
airflow2_suites=(tests/unit --ignore=tests/unit/emulator tests/integration tests/system
    tests/deployment/test_airflow2_kill.py)
# (what a stopped trigger cancels on each version is in tests/integration, run on every version; the
# stalled and shut-down triggerer deployments run on 3.3)
failover=tests/deployment/test_triggerer_failover.py
airflow3_suites=(tests/unit --ignore=tests/unit/emulator tests/integration tests/system
    "$failover::test_the_connection_forms_fields_come_from_the_api_server")
# the deployments of the triggerer, the scheduler and the job-event watchers: at both ends of 3.x
# (3.3 runs them all), on the oldest 3.x here
airflow3_deployments=(tests/deployment/test_job_events.py
    "$failover::test_killed_triggerer_is_replaced_and_one_poller_serves_all_jobs"
    "$failover::test_a_users_mark_failed_mark_success_and_clear_cancel_their_jobs_only")

# the cluster check reads the emulator, whatever the Airflow: it runs on 3.3 and 2.11, the two ends;
# execution_timeout differs between Airflow 2 and 3 for a deferred task: 2.11, 3.2 and 3.3 run it
once_per_major=(--ignore=tests/integration/test_cluster_check.py)

status=0
if [ ${#paths[@]} -gt 0 ] || [ "${MATRIX:-yes}" = no ]; then
    .venv/bin/python -m pytest "$@" || status=$?
    if [ ${#paths[@]} -gt 0 ] && [ "${MATRIX:-yes}" != no ] && [ "${AIRFLOW2:-yes}" != no ]; then
        run ENV_AIRFLOW_2_11 test,deployment "Airflow 2.11" "${paths[@]}"
    fi
    exit "$status"
fi
# The version matrix, in the background from the start: the other Airflow versions, every
# dependency at its floor and Python 3.13
other_environments() {
    [ "${AIRFLOW2:-yes}" = no ] || run ENV_AIRFLOW_2_11 test,deployment "Airflow 2.11" "${not_real[@]}" "${airflow2_suites[@]}"
    run ENV_AIRFLOW_3_2 test,deployment "Airflow 3.2" "${not_real[@]}" "${airflow3_suites[@]}" "${once_per_major[@]}"
    run ENV_AIRFLOW_3_1 test,deployment "Airflow 3.1" "${not_real[@]}" "${airflow3_suites[@]}" "${airflow3_deployments[@]}" \
        "${once_per_major[@]}" --ignore=tests/system/test_execution_timeout.py
    RESOLUTION=lowest-direct run ENV_LOWEST test "lowest dependencies" "${not_real[@]}" tests/unit tests/system \
        --ignore=tests/system/test_execution_timeout.py
    if "${ENV_PYTHON_3_13[1]}" -c '' 2> /dev/null; then
        run ENV_PYTHON_3_13 test "Python 3.13" tests/unit
    elif [ "${CI:-}" = true ]; then
        echo "error: ${ENV_PYTHON_3_13[1]} not found: the Python 3.13 run is mandatory in CI" >&2
        status=1
    else
        echo "== Python 3.13: skipped, ${ENV_PYTHON_3_13[1]} not found"
    fi
    return "$status"
}
# Two at once (the tests mostly wait on Airflow and Slurm processes; only the 3.3 suite uses the
# real Slurm): the Airflow 3.3 suite and then the Composer-like image here, the other environments
# in the background, whose log is printed at the end.
log=$(mktemp)
other_environments > "$log" 2>&1 &
others=$!
.venv/bin/python -m pytest "$@" || status=$?
echo "== Cloud Composer-like image"
scripts/composer-check.sh || status=1
wait "$others" || status=1
cat "$log"
rm -f "$log"
exit "$status"
