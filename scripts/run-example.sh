#!/usr/bin/env bash
# Runs the main example end to end, offline: starts a Cloud Storage stand-in and the Slurm Job API
# emulator (whose jobs write their output to a directory it publishes to the stand-in, as Cloud
# Storage FUSE would), points an Airflow connection at them and runs example_slurm_submit_job with
# `airflow dags test`; then shows the job's output as the task log shows it.
# Extra arguments go to `airflow dags test`, e.g. -c '{"exit_code": 3}'.
# EXAMPLE_AIRFLOW=path/to/bin/airflow runs the DAG with another installation of Airflow and this package.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/setup-env.sh
VENV=$ROOT/.venv
AIRFLOW=${EXAMPLE_AIRFLOW:-$VENV/bin/airflow}
WORK=$(mktemp -d)
export AIRFLOW_HOME=$WORK/airflow AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__DAGS_FOLDER=$ROOT/example_dags
export AIRFLOW__CORE__UNIT_TEST_MODE=False AIRFLOW__LOGGING__LOGGING_LEVEL=INFO
free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for_port() {
    for _ in $(seq 300); do
        "$VENV/bin/python" -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1: see $2" >&2
    exit 1
}
PORT=$(free_port) STORAGE_PORT=$(free_port)
OUTPUT_DIR=$WORK/cluster-output OUTPUT_URI=gs://slurm-output/example
mkdir -p "$OUTPUT_DIR"
export STORAGE_EMULATOR_HOST=http://127.0.0.1:$STORAGE_PORT  # google-cloud-storage reads from the stand-in

"$VENV/bin/gcp-storage-emulator" start --host 127.0.0.1 --port "$STORAGE_PORT" --in-memory > "$WORK/storage.log" 2>&1 &
STORAGE=$!
"$VENV/bin/slurm-job-api-emulator" --port "$PORT" --key-file "$WORK/emulator-key.json" \
    --state-dir "$WORK/jobs" --output-mount "$OUTPUT_DIR=$OUTPUT_URI" > "$WORK/emulator.log" 2>&1 &
EMULATOR=$!
trap 'kill $EMULATOR $STORAGE 2>/dev/null; wait $EMULATOR $STORAGE 2>/dev/null || true; rm -rf "$WORK"' EXIT
wait_for_port "$STORAGE_PORT" "$WORK/storage.log"
wait_for_port "$PORT" "$WORK/emulator.log"

export AIRFLOW_CONN_SLURM_JOB_API_DEFAULT="{\"conn_type\": \"slurm_job_api\", \"extra\": {\"project_id\": \"test-project\", \"region\": \"us-central1\", \"cluster_id\": \"test-cluster\", \"endpoint\": \"http://127.0.0.1:$PORT\", \"key_path\": \"$WORK/emulator-key.json\", \"output_uri\": \"$OUTPUT_URI\", \"output_cluster_path\": \"$OUTPUT_DIR\"}}"
"$AIRFLOW" db migrate > "$WORK/db.log" 2>&1 || { cat "$WORK/db.log"; exit 1; }
set +e
"$AIRFLOW" dags test example_slurm_submit_job "$@" 2>&1 | tee "$WORK/dags-test.log"
rc=${PIPESTATUS[0]}
set -e
# the task log's lines without their timestamp and logger, to show the job's output block again
plain() { sed -E 's/^[0-9T:.+-]+Z? ?\[[a-z]+ *\] //; s/ \[airflow[^]]*\]( loc=[^ ]+)?$//; s/^\[[^]]*\] \{[^}]*\} [A-Z]+ - //' "$WORK/dags-test.log"; }
echo
echo "== the job's output, as the task log shows it:"
plain | awk '/^----- Slurm job .* -----$/ {show=1} show {print} /^----- end of Slurm job / {show=0}' | grep . || echo "(no output in the log)"
echo
echo "== final state of the Slurm job:"
grep -oE "Slurm job [0-9_+]+ is [A-Z]+[^[]*" "$WORK/dags-test.log" | tail -n 1 || echo "(no final state in the log)"
if [ "$rc" -ne 0 ]; then
    echo
    echo "== the task's error:"
    plain | awk '/AirflowException: Slurm job [0-9]+ is/ {show=1} show && /^::|loc=|^\[DAG TEST\]/ {exit} show {print}'
fi
exit "$rc"
