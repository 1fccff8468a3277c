#!/usr/bin/env bash
# Installs this package the way Cloud Composer does: into an image whose Airflow, Google provider and
# common-compat are already there (COMPOSER_IMAGE in scripts/environments.sh), with plain pip and the
# built wheel. Fails if pip fails or changes any version already installed; then runs the example DAG.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/environments.sh
VENV=.venv-composer
scripts/setup-env.sh  # .venv builds the wheel and serves the emulator
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
read -ra image <<< "$COMPOSER_IMAGE"
stamp="$VENV/.image-$(echo "$COMPOSER_IMAGE" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    rm -f "$VENV"/.image-*
    .venv/bin/python -m uv pip install -q --python "$VENV/bin/python" "${image[@]}"
    touch "$stamp"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m uv build -q --wheel -o "$work" . 2>/dev/null
"$VENV/bin/python" -m pip uninstall -q -y airflow-provider-slurmapi 2>/dev/null || true
"$VENV/bin/python" -m pip freeze > "$work/before.txt"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$work"/*.whl
"$VENV/bin/python" -m pip freeze > "$work/after.txt"
changed=$(comm -23 <(sort "$work/before.txt") <(sort "$work/after.txt"))
echo "== Composer-like image: $COMPOSER_IMAGE; pip added: $(comm -13 <(sort "$work/before.txt") <(sort "$work/after.txt") | sed "s/ @ .*//" | tr "\n" " ")"
if [ -n "$changed" ]; then
    echo "error: installing the wheel changed what the image holds: $changed" >&2
    exit 1
fi
"$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null 2>&1 || true
EXAMPLE_AIRFLOW=$PWD/$VENV/bin/airflow scripts/run-example.sh > "$work/example.log" 2>&1 || { tail -n 60 "$work/example.log"; exit 1; }
tail -n 2 "$work/example.log"
