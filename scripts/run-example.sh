#!/usr/bin/env bash
# Runs the main example end to end, offline: starts the Slurm Job API emulator, points an Airflow
# connection at it and runs example_slurm_submit_job with `airflow dags test`.
# Extra arguments go to `airflow dags test`, e.g. -c '{"exit_code": 3}'.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/setup-env.sh
VENV=$ROOT/.venv
WORK=$(mktemp -d)
export AIRFLOW_HOME=$WORK/airflow AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__DAGS_FOLDER=$ROOT/example_dags
export AIRFLOW__CORE__UNIT_TEST_MODE=False AIRFLOW__LOGGING__LOGGING_LEVEL=INFO
PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"$VENV/bin/slurm-job-api-emulator" --port "$PORT" --key-file "$WORK/emulator-key.json" \
    --state-dir "$WORK/jobs" > "$WORK/emulator.log" 2>&1 &
EMULATOR=$!
trap 'kill $EMULATOR 2>/dev/null; wait $EMULATOR 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do
    [ -f "$WORK/emulator-key.json" ] && "$VENV/bin/python" -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break
    sleep 0.1
done

export AIRFLOW_CONN_SLURM_JOB_API_DEFAULT="{\"conn_type\": \"slurm_job_api\", \"extra\": {\"project_id\": \"test-project\", \"region\": \"us-central1\", \"cluster_id\": \"test-cluster\", \"endpoint\": \"http://127.0.0.1:$PORT\", \"key_path\": \"$WORK/emulator-key.json\"}}"
"$VENV/bin/airflow" db migrate > "$WORK/db.log" 2>&1 || { cat "$WORK/db.log"; exit 1; }
set +e
"$VENV/bin/airflow" dags test example_slurm_submit_job "$@" 2>&1 | tee "$WORK/dags-test.log"
rc=${PIPESTATUS[0]}
set -e
echo
echo "== final state of the Slurm job:"
grep -oE "Slurm job [0-9_+]+ is [A-Z]+[^[]*" "$WORK/dags-test.log" | tail -n 1 || echo "(no final state in the log)"
exit "$rc"
