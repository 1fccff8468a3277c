# The environments the tests run in, one place for all of them (sourced by scripts/test.sh).
# Each is installed as Airflow documents it: with its constraints. Airflow's constraints files live
# on GitHub, out of reach of many CI machines, so the pins that stand in for them are written here:
# what that Airflow release needs of its dependencies that it does not cap itself.

# name: venv  python  "Airflow requirement"  "pins (constraints: they limit, they never add)"
ENV_AIRFLOW_3_3=(".venv" "python3" "apache-airflow==3.3.*" "")
# 2.11 and 3.1 set an attribute on cryptography's MultiFernet, which cryptography 51 no longer
# allows (every connection read with a Fernet key fails: 'MultiFernet' object has no attribute
# 'is_encrypted'); their constraints files pin cryptography below it
ENV_AIRFLOW_2_11=(".venv-airflow2" "python3" "apache-airflow==2.11.*" "cryptography<51")
ENV_AIRFLOW_3_1=(".venv-airflow3.1" "python3" "apache-airflow==3.1.8" "cryptography<51")
# 3.2.2 caps neither FastAPI nor cadwyn, and svcs 26.2 breaks its in-process execution API
# (airflow dags test: 'State' object has no attribute 'svcs_registry')
ENV_AIRFLOW_3_2=(".venv-airflow3.2" "python3" "apache-airflow==3.2.2" "fastapi<0.137 cadwyn<8 svcs<26.2")
# Every direct dependency at its floor (pyproject.toml), with the oldest supported Airflow 3.
# 3.1.1 as released (October 2025) predates structlog 25.5, FastAPI 0.118, SQLAlchemy 2.1, svcs 26.2.
ENV_LOWEST=(".venv-lowest" "python3" "apache-airflow==3.1.1" "structlog<25.5 fastapi<0.118 cadwyn<6 starlette<0.49 svcs<26.2 sqlalchemy<2.1")
# What Cloud Composer's composer-3-airflow-3.1.8 image holds before a user adds our package.
COMPOSER_IMAGE="apache-airflow==3.1.8 apache-airflow-providers-google==22.2.2 apache-airflow-providers-common-compat==1.13.0"
# The other Pythons we claim (requires-python), with the newest Airflow: pythonX.Y on the PATH, or
# one pyenv installed (a pyenv shim of a version that is not selected fails, and is passed over).
find_python() {
    local version=$1 candidate
    for candidate in "python$version" "$(pyenv root 2>/dev/null)"/versions/"$version".*/bin/"python$version"; do
        if "$candidate" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$version'.split('.'))))" 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "python$version"  # not found: the run says so
}
ENV_PYTHON_3_13=(".venv-py3.13" "$(find_python 3.13)" "apache-airflow==3.3.*" "")
ENV_PYTHON_3_12=(".venv-py3.12" "$(find_python 3.12)" "apache-airflow==3.3.*" "")
