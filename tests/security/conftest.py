"""The security suite: each test is one attack, tried for real, named by what the attacker does.

The emulator keeps the storage as open as real shared storage often is (folders any job's user
may write, as a FUSE mount with a permissive dir-mode): the defence must be in the provider.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/security/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.security)
