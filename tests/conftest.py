from pathlib import Path

import pytest

from planner.traces import store


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "store.duckdb"


@pytest.fixture
def con(db_path):
    connection = store.open_store(db_path)
    yield connection
    connection.close()
