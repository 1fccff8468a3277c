"""DAG-parse cost: what importing our operator and sensor, or using our decorators, adds to ``import airflow.sdk``.

Every measurement is a fresh interpreter, so nothing is cached in memory between them. The
cases run round-robin (each round starting one case later) so drift on the machine affects
all of them alike.

    .venv/bin/python -m benchmarks.import_cost [--quick] [-n REPEATS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from benchmarks.common import REPO_ROOT, machine_line, markdown_table, median, parse_args, use_private_airflow_home

SDK = "airflow.sdk"
GOAL_PERCENT = 5.0
# ru_maxrss is in KiB on Linux, in bytes on macOS
RSS_TO_KIB = 1 / 1024 if sys.platform == "darwin" else 1


@dataclass
class Case:
    name: str
    modules: tuple[str, ...]
    then: str = ""  # statements after the imports, timed with them
    import_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    rss_kib: list[float] = field(default_factory=list)


def cases() -> list[Case]:
    return [
        Case("`python -c pass` (floor)", ()),
        Case(f"`import {SDK}` (baseline)", (SDK,)),
        Case(
            "+ our operator and sensor",
            (SDK, "airflow_provider_slurmapi.operators.job", "airflow_provider_slurmapi.sensors.job"),
        ),
        Case(
            "+ `task.slurm` and `task.slurm_python` (a TaskFlow DAG file's use)",
            (SDK,),
            "from airflow.sdk import task\ntask.slurm, task.slurm_python\n",
        ),
        # every component loads the plugins (the dag-processor to parse): ours must add nothing to that
        Case("`import airflow.plugins_manager` (what loads plugins)", (SDK, "airflow.plugins_manager")),
        Case(
            "+ the Slurm job tab's plugin",
            (SDK, "airflow.plugins_manager", "airflow_provider_slurmapi.ui.plugin"),
            "airflow_provider_slurmapi.ui.plugin.SlurmJobTabPlugin.external_views\n",
        ),
        Case("+ Google `GoogleBaseHook`", (SDK, "airflow.providers.google.common.hooks.base_google")),
        Case("+ Google Dataproc operators", (SDK, "airflow.providers.google.cloud.operators.dataproc")),
        Case(
            "+ Google Vertex AI CustomJob operators",
            (SDK, "airflow.providers.google.cloud.operators.vertex_ai.custom_job"),
        ),
    ]


def child_code(modules: tuple[str, ...], then: str = "") -> str:
    """The child times its own imports and reports its peak RSS on its last line of output."""
    imports = "".join(f"import {module}\n" for module in modules) + then
    return (
        "import resource, time\n"
        "t0 = time.perf_counter()\n"
        f"{imports}"
        "t1 = time.perf_counter()\n"
        "print('BENCH', t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)\n"
    )


def measure(case: Case) -> tuple[float, float, float]:
    """(import seconds, process wall seconds, peak RSS KiB) of one fresh interpreter."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", child_code(case.modules, case.then)],
        cwd=REPO_ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{case.name} failed (exit {result.returncode}):\n{result.stderr}")
    last = result.stdout.strip().splitlines()[-1].split()
    return float(last[1]), wall, float(last[2]) * RSS_TO_KIB


def run(all_cases: list[Case], repeats: int) -> None:
    # one discarded round first: writes .pyc files, Airflow's config, and warms the page cache
    for case in all_cases:
        measure(case)
    for r in range(repeats):
        shift = r % len(all_cases)
        for case in all_cases[shift:] + all_cases[:shift]:
            import_s, wall_s, rss_kib = measure(case)
            case.import_s.append(import_s)
            case.wall_s.append(wall_s)
            case.rss_kib.append(rss_kib)


def increment(value: float, base: float, unit: str, digits: int) -> str:
    return f"{value - base:+.{digits}f} {unit} ({(value - base) / base * 100:+.1f}%)"


def table(all_cases: list[Case]) -> str:
    base = all_cases[1]
    base_import, base_rss = median(base.import_s), median(base.rss_kib) / 1024
    rows = []
    for case in all_cases:
        import_s, wall_s, rss_mib = median(case.import_s), median(case.wall_s), median(case.rss_kib) / 1024
        compared = case.modules and case is not base
        rows.append(
            [
                case.name,
                f"{import_s:.3f}",
                f"{wall_s:.3f}",
                f"{rss_mib:.1f}",
                f"{import_s / base_import:.2f}",
                f"{rss_mib / base_rss:.2f}",
                increment(import_s, base_import, "s", 3) if compared else "",
                increment(rss_mib, base_rss, "MiB", 1) if compared else "",
            ]
        )
    headers = [
        "Case",
        "Import (s)",
        "Process wall (s)",
        "Peak RSS (MiB)",
        "Import ÷ sdk",
        "RSS ÷ sdk",
        "Import over sdk",
        "RSS over sdk",
    ]
    return markdown_table(headers, rows)


def summary(all_cases: list[Case]) -> str:
    base = all_cases[1]
    lines = []
    for what, ours in (("Our operator and sensor", all_cases[2]), ("Our TaskFlow decorators", all_cases[3])):
        time_pct = (median(ours.import_s) / median(base.import_s) - 1) * 100
        rss_pct = (median(ours.rss_kib) / median(base.rss_kib) - 1) * 100
        verdict = "met" if max(time_pct, rss_pct) <= GOAL_PERCENT else "not met"
        lines.append(
            f"{what} over `import {SDK}`: {time_pct:+.1f}% import time, {rss_pct:+.1f}% peak RSS "
            f"(goal: within {GOAL_PERCENT:.0f}%, {verdict})."
        )
    loader, plugin = all_cases[4], all_cases[5]
    rss = (median(plugin.rss_kib) - median(loader.rss_kib)) / 1024
    lines.append(f"The Slurm job tab's plugin over what loads plugins: {rss:+.1f} MiB peak RSS.")
    return "\n".join(lines)


PLUGIN_CHILD = """
import time, airflow.sdk, airflow.plugins_manager
t0 = time.perf_counter()
import airflow_provider_slurmapi.ui.plugin as plugin
plugin.SlurmJobTabPlugin.external_views
print('BENCH', time.perf_counter() - t0)
"""


def plugin_import_ms(repeats: int) -> float:
    """The plugin's own import, timed inside fresh interpreters that loaded what loads plugins: the
    two rows of the table differ by more than that from one interpreter to the next."""
    times = []
    for _ in range(repeats):
        child = [sys.executable, "-c", PLUGIN_CHILD]
        result = subprocess.run(child, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=True)
        times.append(float(result.stdout.strip().splitlines()[-1].split()[1]))
    return median(times) * 1000


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], full=15, quick=1, what="fresh interpreters per case")
    use_private_airflow_home()
    all_cases = cases()
    run(all_cases, args.n)
    print(f"### Import cost (DAG parse): median of {args.n} fresh interpreters per case\n")
    print(table(all_cases))
    print()
    print(
        "Import: time of the import statements, measured inside the child. Process wall: the whole "
        "child process (interpreter start, imports, exit), measured by the parent. Peak RSS: the "
        "child's own `ru_maxrss` after the imports. Every row but the floor imports `airflow.sdk` "
        "first, so “over sdk” is what the module adds to a DAG file that already imports the SDK."
    )
    print()
    print(summary(all_cases))
    print(f"The Slurm job tab's plugin itself, imported after them: {plugin_import_ms(args.n):.1f} ms (median).")
    print(machine_line())


if __name__ == "__main__":
    main()
