"""The pages' code blocks follow the rule that makes every example a tested one, and the pages
say what the code says (connection fields, dependencies)."""

from __future__ import annotations

import ast
import re
import tomllib

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed")

from tests.docs import pages  # noqa: E402
from tests.docs.test_examples import DAG_RUNS, SESSION_PAGES  # noqa: E402

pytestmark = pytest.mark.docs


def test_no_python_is_written_inline() -> None:
    """Python appears only through literalinclude of a file under docs/examples, which a test runs."""
    inline = [
        block.where
        for block in pages.all_blocks()
        if block.directive in (None, *pages.CODE_DIRECTIVES) and block.language in pages.PYTHON
    ]
    assert not inline, f"inline Python code blocks (use a literalinclude of docs/examples/...): {inline}"


def test_every_code_block_is_tested_or_cannot_run_offline() -> None:
    problems = []
    for block in pages.all_blocks():
        if block.directive not in (None, *pages.CODE_DIRECTIVES):
            continue
        if block.language in pages.OUTPUT:
            if block.runnable:
                problems.append(f"{block.where}: output blocks are not runnable")
        elif block.language in pages.SHELL:
            if block.runnable:
                continue
            untested = [c for c in pages.shell_commands(block.body) if not c.startswith(pages.OFFLINE_IMPOSSIBLE)]
            if untested:
                problems.append(f"{block.where}: mark it `:class: runnable` or drop {untested}")
        else:
            problems.append(f"{block.where}: language {block.language!r} is neither tested shell nor output")
    assert not problems, "\n".join(problems)


def test_runnable_blocks_are_run() -> None:
    with_runnable = {page.relative_to(pages.DOCS).as_posix() for page in pages.pages() if pages.runnable_script(page)}
    assert with_runnable == set(SESSION_PAGES), "test_examples.SESSION_PAGES must list every page with runnable blocks"


def test_no_code_hides_in_rst() -> None:
    rst = [block for block in pages.all_blocks() if block.directive == "eval-rst"]
    hidden = [
        block.where
        for block in rst
        if re.search(r"^\s*(\.\. (code-block|code|sourcecode|literalinclude|testcode)::|>>>)", block.body, re.M)
    ]
    assert not hidden, f"code in eval-rst blocks escapes the checks: {hidden}"


def test_literalincludes_show_example_files() -> None:
    outside = []
    for block in pages.all_blocks():
        if block.directive == "literalinclude":
            target = block.include_target()
            if pages.EXAMPLES not in target.parents or not target.is_file():
                outside.append(f"{block.where}: {block.argument}")
    assert not outside, f"literalinclude of files that are not examples under docs/examples: {outside}"


def test_every_example_is_shown_and_run() -> None:
    shown = {block.include_target() for block in pages.all_blocks() if block.directive == "literalinclude"}
    examples = {
        path.resolve() for path in pages.EXAMPLES.rglob("*") if path.is_file() and "__pycache__" not in path.parts
    }
    assert examples - shown == set(), "example files that no page shows"
    run_dag_ids = {run["dag_id"] for run in DAG_RUNS}
    sessions = "\n".join(pages.runnable_script(pages.DOCS / page) for page in SESSION_PAGES)
    for path in pages.EXAMPLES.rglob("*.py"):
        tree = ast.parse(path.read_text())
        dag_ids = {
            keyword.value.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            for keyword in node.keywords
            if keyword.arg == "dag_id" and isinstance(keyword.value, ast.Constant)
        }
        relative = path.relative_to(pages.EXAMPLES).as_posix()
        if dag_ids:
            assert dag_ids <= run_dag_ids, f"{relative}: DAGs {dag_ids - run_dag_ids} are not in DAG_RUNS"
        else:
            assert f"pytest {relative}" in sessions, (
                f"{relative} is neither a DAG file nor run by a page's pytest command"
            )


def test_connection_page_documents_every_field() -> None:
    from airflow_provider_slurmapi.get_provider_info import CONN_FIELDS

    text = (pages.DOCS / "connection.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")}
    for key, spec in CONN_FIELDS.items():
        assert key in rows, f"connection.md has no row for the field {key}"
        assert f"| {spec['label']} |" in rows[key], f"connection.md: {key} is labelled {spec['label']!r} in the form"
        default = spec["schema"].get("default")
        if default is not None:
            assert f"`{default}`" in rows[key], f"connection.md: {key} defaults to {default!r}"
    assert "_static/connection-form.png" in text


def test_installation_page_lists_every_dependency() -> None:
    project = tomllib.loads((pages.ROOT / "pyproject.toml").read_text())["project"]
    text = (pages.DOCS / "installation.md").read_text()
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        if name != "apache-airflow":
            assert f"`{name}`" in text, f"installation.md does not say what {name} is for"
    bounds = re.fullmatch(r">=\s*3\.(\d+),\s*<\s*3\.(\d+)", project["requires-python"])
    assert bounds, project["requires-python"]
    stated = f"Python | 3.{bounds[1]} to 3.{int(bounds[2]) - 1} |"
    assert stated in text, f"installation.md states another Python range than {stated}"
