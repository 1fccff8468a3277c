#!/usr/bin/env bash
# Runs the whole test suite on Airflow 3.3 (.venv) and, at the same time, the suites that depend on
# the Airflow version in every other environment of scripts/environments.sh: Airflow 2.11, 3.1 and
# 3.2 (unit, integration, system; on 2.11 the deployment test of its kill path, on 3.2 and 3.1 the
# connection form from the api-server and the Slurm job tab's attacks, on 3.1 the triggerer, job-event
# watcher and the tab's FAB deployments), every dependency at its floor (unit, system, the
# tab's attacks), Python 3.12 and 3.13 (unit), and a Cloud
# Composer-like image taking the built wheel with plain pip (the example DAG). Three pytest runs go
# at once (see below). Each environment is installed with uv, once.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -x: with test paths given they run
# on Airflow 3.3, then 2.11, only. MATRIX=no runs Airflow 3.3 only (in one pytest run); AIRFLOW2=no
# leaves out Airflow 2.11.
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
# prepare ENV EXTRAS: starts installing the environment in the background, so that it is ready when
# the run before it in the same stream ends (the runs mostly wait on Airflow and Slurm processes:
# an install beside one costs it little); run ENV then waits for it
declare -A preparing=()
prepare() {
    local -n env=$1
    local log
    "${env[1]}" -c '' 2> /dev/null || return 0  # no such Python: run says so
    log=$(mktemp)
    install "$@" > "$log" 2>&1 &
    preparing[$1]="$! $log"
}
# run ENV EXTRAS PYTEST_ARGS...: installs the environment if needed, then runs pytest in it
run() {
    local -n env=$1
    if [ -n "${preparing[$1]:-}" ]; then
        local pid log installed=0
        read -r pid log <<< "${preparing[$1]}"
        unset "preparing[$1]"
        wait "$pid" || installed=$?
        cat "$log"
        rm -f "$log"
        [ "$installed" = 0 ] || { status=1; return; }
    else
        install "$1" "$2" || { status=1; return; }
    fi
    shift 2
    echo "== $1 ($("${env[0]}/bin/python" -c 'import sys, airflow; print(f"Python {sys.version.split()[0]}, Airflow {airflow.__version__}")')): ${*:2}"
    "${env[0]}/bin/python" -m pytest "${options[@]}" "${@:2}" || status=$?
}
# run_python ENV NAME: the unit suite on another Python we claim (mandatory in CI)
run_python() {
    local -n env=$1
    if "${env[1]}" -c '' 2> /dev/null; then
        run "$1" test "$2" tests/unit
    elif [ "${CI:-}" = true ]; then
        echo "error: ${env[1]} not found: the $2 run is mandatory in CI" >&2
        status=1
    else
        echo "== $2: skipped, ${env[1]} not found"
    fi
}
# real Slurm's replies do not depend on the Airflow version (checked on Airflow 3.3)
not_real=(-m "not real_slurm")
# The unit tests that use nothing of Airflow (they call no Airflow code and read no Airflow version):
# the Slurm client, the emulator, the real-Slurm gate; they run on 3.3, 2.11 (the other major), at
# the floors and on each Python, not again on 3.1 and 3.2. The client tests of the operators' durable
# submission (test_durable.py) use Airflow, and stay.
no_airflow_units=(--ignore=tests/unit/emulator --ignore=tests/unit/test_real_slurm_gate.py)
for module in tests/unit/client/test_*.py; do
    [ "$module" = tests/unit/client/test_durable.py ] || no_airflow_units+=("--ignore=$module")
done
# the Slurm job tab's attacks, and its authorisation under the FAB auth manager and its cancel in a
# real deployment (3.3 runs the SimpleAuthManager deployment of tests/deployment besides)
tab_deployment=tests/security/test_job_tab_deployment.py
# what depends on the Airflow version, and the deployment test of each version's kill path (the
# emulator imports nothing of Airflow: its own tests run on 3.3, at the floors and on each Python)
airflow2_suites=(tests/unit --ignore=tests/unit/emulator tests/integration tests/system
    tests/deployment/test_airflow2_kill.py)
# (what a stopped trigger cancels on each version is in tests/integration, run on every version; the
# stalled and shut-down triggerer deployments run on 3.3)
failover=tests/deployment/test_triggerer_failover.py
airflow3_suites=(tests/unit "${no_airflow_units[@]}" tests/integration tests/system
    "$failover::test_the_connection_forms_fields_come_from_the_api_server"
    tests/security/test_job_tab.py)
# the deployments of the triggerer, the scheduler, the job-event watchers and the tab under FAB: at
# both ends of 3.x (3.3 runs them all), on the oldest 3.x here
airflow3_deployments=(tests/deployment/test_job_events.py "$tab_deployment"
    "$failover::test_killed_triggerer_is_replaced_and_one_poller_serves_all_jobs"
    "$failover::test_a_users_mark_failed_mark_success_and_clear_cancel_their_jobs_only")

# the cluster check reads the emulator, whatever the Airflow: it runs on 3.3 and 2.11, the two ends;
# execution_timeout differs between Airflow 2 and 3 for a deferred task: 2.11, 3.2 and 3.3 run it
once_per_major=(--ignore=tests/integration/test_cluster_check.py)

# The Airflow 3.3 suite in two parts that run at the same time: the benchmarks' smoke runs (which
# wait on the processes they start, using little CPU) and the deployments (Airflow's components as
# separate processes), apart from everything else (the real Slurm's tests among it: one Slurm, in
# one pytest run); the benchmarks first, beside the CPU-heavy start of the other part (browser,
# chaos and docs tests).
apart_on_3_3=(tests/benchmarks tests/deployment "$tab_deployment")
status=0
if [ ${#paths[@]} -gt 0 ] || [ "${MATRIX:-yes}" = no ]; then
    .venv/bin/python -m pytest "$@" || status=$?
    if [ ${#paths[@]} -gt 0 ] && [ "${MATRIX:-yes}" != no ] && [ "${AIRFLOW2:-yes}" != no ]; then
        run ENV_AIRFLOW_2_11 test,deployment "Airflow 2.11" "${paths[@]}"
    fi
    exit "$status"
fi
# The version matrix, in two streams in the background from the start, each installing its next
# environment while it runs one. Three pytest runs at once: the runs mostly wait on the processes
# they start: one lane alone leaves about 60% of a 2-core machine idle, and an install takes at most
# one core for a minute and a half.
# Stream 1: the 3.3 benchmarks and deployments, Airflow 3.2, Python 3.12 and 3.13.
stream_1() {
    prepare ENV_AIRFLOW_3_2 test,deployment
    echo "== Airflow 3.3, benchmarks and deployments: ${apart_on_3_3[*]}"
    .venv/bin/python -m pytest "${options[@]}" "${apart_on_3_3[@]}" || status=$?
    prepare ENV_PYTHON_3_12 test
    run ENV_AIRFLOW_3_2 test,deployment "Airflow 3.2" "${not_real[@]}" "${airflow3_suites[@]}" "${once_per_major[@]}"
    prepare ENV_PYTHON_3_13 test
    run_python ENV_PYTHON_3_12 "Python 3.12"
    run_python ENV_PYTHON_3_13 "Python 3.13"
    return "$status"
}
# Stream 2: Airflow 2.11, 3.1, every dependency at its floor, the Cloud Composer-like image.
stream_2() {
    if [ "${AIRFLOW2:-yes}" = no ]; then
        :
    elif install ENV_AIRFLOW_2_11 test,deployment; then
        prepare ENV_AIRFLOW_3_1 test,deployment  # installed while 2.11 runs
        run ENV_AIRFLOW_2_11 test,deployment "Airflow 2.11" "${not_real[@]}" "${airflow2_suites[@]}"
    else
        status=1
    fi
    RESOLUTION=lowest-direct prepare ENV_LOWEST test
    run ENV_AIRFLOW_3_1 test,deployment "Airflow 3.1" "${not_real[@]}" "${airflow3_suites[@]}" "${airflow3_deployments[@]}" \
        "${once_per_major[@]}" --ignore=tests/system/test_execution_timeout.py
    RESOLUTION=lowest-direct run ENV_LOWEST test "lowest dependencies" "${not_real[@]}" tests/unit tests/system \
        tests/security/test_job_tab.py \
        --ignore=tests/system/test_execution_timeout.py
    echo "== Cloud Composer-like image"
    scripts/composer-check.sh || status=1
    return "$status"
}
log_1=$(mktemp) log_2=$(mktemp)
stream_1 > "$log_1" 2>&1 &
first=$!
stream_2 > "$log_2" 2>&1 &
second=$!
.venv/bin/python -m pytest "$@" "${apart_on_3_3[@]/#/--ignore=}" || status=$?
wait "$first" || status=1
wait "$second" || status=1
cat "$log_1" "$log_2"
rm -f "$log_1" "$log_2"
exit "$status"
