"""The connection form of Airflow 3's UI, driven in headless Chromium like a user would.

The api-server tests the connection with the provider's hook, against the emulator; the saved
connection is read back through the REST API.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.get_provider_info import CONN_FIELDS
from tests.conftest import CLUSTER, PROJECT, REGION
from tests.deployment.airflow_services import USER, Airflow, require_airflow_3, running
from tests.real_slurm import in_ci

pytestmark = pytest.mark.browser

ROOT = Path(__file__).parents[2]
SCREENSHOT = ROOT / "docs" / "_static" / "connection-form.png"
CHROMIUM = Path("/usr/bin/chromium")
# Chromium refuses to run as root with its sandbox; the rest keeps it from calling out to the network.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
CONN_TYPE_LABEL = "Google Cloud Slurm Job API"
# Airflow <= 3.3.2's UI tests a saved connection with `port: Number(null)`, i.e. 0, which the API takes
# for another destination than the stored one (no port) and refuses (apache/airflow#73298).
PORT_ZERO_REFUSAL = "The host or port to test differs from the stored connection"


def require_chromium() -> None:
    if not CHROMIUM.exists():
        reason = f"the browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium)"
        if in_ci():
            pytest.fail(f"the browser tests are mandatory in CI, but {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    """Checked before any other fixture starts something."""
    require_airflow_3()
    require_chromium()


@pytest.fixture(scope="module")
def airflow(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    home = tmp_path_factory.mktemp("airflow-ui")
    with running(home, ["api-server"], AIRFLOW__CORE__TEST_CONNECTION="Enabled") as api_server:
        yield api_server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # not installed where Airflow 2 is

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, airflow: Airflow) -> Iterator[Any]:
    """A signed-in page, through SimpleAuthManager's login form."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    with airflow.explained():
        page.goto(airflow.url + "/")
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(airflow.password)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("button", name="Admin").wait_for()
    yield page
    context.close()


def field(dialog: Any, label: str) -> Any:
    """A form row by its label (the UI does not tie the extra fields' inputs to their labels)."""
    return dialog.get_by_role("group").filter(has=dialog.page.get_by_text(label, exact=True))


def type_row(dialog: Any) -> Any:
    return dialog.get_by_role("group").filter(has=dialog.page.get_by_role("combobox", name="Connection Type"))


def open_add_form(page: Any) -> Any:
    page.get_by_role("button", name="Admin").click()
    page.get_by_role("menuitem", name="Connections").click()
    page.get_by_role("button", name="Add Connection").click()
    return page.get_by_role("dialog")


def fill_form(page: Any, conn_id: str, extra: dict[str, str]) -> Any:
    """Add Connection: ID, type, then the Slurm fields. Returns the dialog, not saved yet."""
    dialog = open_add_form(page)
    dialog.get_by_label("Connection ID").fill(conn_id)
    dialog.get_by_role("combobox", name="Connection Type").fill("Slurm Job")
    page.get_by_role("option", name=CONN_TYPE_LABEL).click()
    dialog.get_by_role("button", name="Extra Fields", exact=True).click()
    for name, value in extra.items():
        row = field(dialog, CONN_FIELDS[name]["label"])
        if name in ("region", "api_version"):  # fields with `examples` are comboboxes: type, then pick
            row.get_by_role("combobox").fill(value)
            page.keyboard.press("Enter")
        else:
            row.get_by_role("textbox").fill(value)
    return dialog


def check_form(dialog: Any, conn_id: str, extra: dict[str, str]) -> None:
    from playwright.sync_api import expect

    expect(dialog.get_by_label("Connection ID")).to_have_value(conn_id)
    expect(type_row(dialog)).to_contain_text(CONN_TYPE_LABEL)
    for name, value in extra.items():
        row = field(dialog, CONN_FIELDS[name]["label"])
        expect(row.get_by_role("combobox" if name in ("region", "api_version") else "textbox")).to_have_value(value)


def save(page: Any, dialog: Any, conn_id: str) -> None:
    from playwright.sync_api import expect

    dialog.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Connection has been successfully created")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text=conn_id)).to_be_visible()


def _send_no_port(route: Any) -> None:
    body = route.request.post_data_json
    if body.get("port") == 0:
        body["port"] = None
    route.continue_(post_data=json.dumps(body))


def press_test(page: Any, conn_id: str) -> dict[str, Any]:
    """Press the row's Test Connection button; returns the API's answer, ``{"status", "message"}``."""
    row = page.get_by_role("row").filter(has_text=conn_id)
    with page.expect_response("**/api/v2/connections/test") as answer:
        row.get_by_role("button", name="Test Connection").click()
    if answer.value.status == 400 and PORT_ZERO_REFUSAL in answer.value.text():
        warnings.warn(
            f"Airflow's UI could not test {conn_id!r}: {answer.value.text()} (apache/airflow#73298); "
            "sending the test again without the port 0 the UI adds",
            stacklevel=2,
        )
        page.route("**/api/v2/connections/test", _send_no_port)
        with page.expect_response("**/api/v2/connections/test") as answer:
            row.get_by_role("button", name="Test Connection").click()
    assert answer.value.ok, f"POST /api/v2/connections/test: HTTP {answer.value.status}: {answer.value.text()}"
    return dict(answer.value.json())


def notification(page: Any, text: str, timeout: float = 10) -> str:
    """The whole text of the notification showing ``text``; fails listing the ones that came and went."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for shown in page.get_by_role("status").all_inner_texts():
            if " ".join(text.split()) in " ".join(shown.split()):
                return str(shown)
            if shown not in seen:
                seen.append(shown)
        time.sleep(0.1)
    raise AssertionError(f"the UI showed no notification with {text!r}; it showed {seen}")


@contextlib.contextmanager
def explained(airflow: Airflow, page: Any, tmp_path: Path) -> Iterator[None]:
    """On failure: where the page was, a screenshot of it, and the api-server's log."""
    with airflow.explained():
        try:
            yield
        except Exception as error:
            shot = tmp_path / "failure.png"
            with contextlib.suppress(Exception):
                page.screenshot(path=str(shot))
            raise AssertionError(f"{error}\n(page {page.url}, screenshot {shot})") from error


def test_add_and_test_connection(airflow: Airflow, page: Any, emulator: Emulator, tmp_path: Path) -> None:
    conn_id = "slurm_from_the_ui"
    extra = {
        "project_id": PROJECT,
        "region": REGION,
        "cluster_id": CLUSTER,
        "api_version": "v0.0.41",  # not the default, so the stored value can only come from the form
        "endpoint": emulator.url,
        "key_path": str(emulator.key_file),
    }
    with explained(airflow, page, tmp_path):
        dialog = fill_form(page, conn_id, extra)
        check_form(dialog, conn_id, extra)
        # the documentation's picture: the form from the connection type down to the key file
        type_row(dialog).evaluate("row => row.scrollIntoView({block: 'start'})")
        page.evaluate("document.activeElement.blur()")  # no focus ring in the picture
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT))
        save(page, dialog, conn_id)

        calls, tokens = emulator.faults.calls, emulator.tokens.issued
        result = press_test(page, conn_id)
        assert result["status"] is True and f"Connected to {CLUSTER} ({REGION})" in result["message"], result
        assert "Test Connection Successful" in notification(page, result["message"])
        # the hook really went to the emulator: a token from its key file, then the ping
        assert emulator.tokens.issued > tokens and emulator.faults.calls > calls

        stored = airflow.api().get(f"/api/v2/connections/{conn_id}")
        assert stored["conn_type"] == "slurm_job_api", stored
        saved_extra = json.loads(stored["extra"])
        assert set(saved_extra) <= set(CONN_FIELDS), saved_extra  # only declared fields; unset ones are null
        assert {k: v for k, v in saved_extra.items() if v not in (None, "")} == extra, saved_extra


def test_bad_api_version_fails_the_test_naming_the_field(
    airflow: Airflow, page: Any, emulator: Emulator, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    conn_id = "slurm_bad_version"
    extra = {"project_id": PROJECT, "region": REGION, "cluster_id": CLUSTER, "api_version": "v9",
             "endpoint": emulator.url, "key_path": str(emulator.key_file)}  # fmt: skip
    with explained(airflow, page, tmp_path):
        dialog = fill_form(page, conn_id, extra)
        # Airflow 3.3's form does not enforce a conn-field's `pattern`: it saves the value as typed...
        expect(field(dialog, CONN_FIELDS["api_version"]["label"]).get_by_role("combobox")).to_have_value("v9")
        save(page, dialog, conn_id)

        # ...and the Test button reports the hook's refusal, which names the field and the value
        calls = emulator.faults.calls
        result = press_test(page, conn_id)
        assert result["status"] is False, result
        assert result["message"].startswith("api_version: 'v9' is not a Slurm REST version"), result
        assert "Test Connection Failed" in notification(page, result["message"])
        assert emulator.faults.calls == calls  # refused before anything was sent
