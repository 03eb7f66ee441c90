"""The store's schema: the shipped head, migrations from an older revision, and no Alembic when up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedstats.service.store import SCHEMA_HEAD, open_store, schema_revision, upgrade
from service_helpers import store_url


def test_the_schema_head_constant_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    import fedstats.service.store as store

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(store.__file__).with_name("migrations")))
    assert ScriptDirectory.from_config(cfg).get_heads() == [SCHEMA_HEAD]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_older_schema_is_migrated_and_a_current_one_opens_without_alembic(
    kind: str, tmp_path: Path
) -> None:
    with store_url(kind, tmp_path / "s.db") as url:
        fresh = open_store(url, migrate=False)
        try:
            assert schema_revision(fresh.engine) is None  # never migrated
            upgrade(fresh.engine, "0012")
            assert schema_revision(fresh.engine) == "0012"
        finally:
            fresh.close()
        older = open_store(url)  # brings 0012 to the head
        try:
            assert schema_revision(older.engine) == SCHEMA_HEAD
        finally:
            older.close()
        # a process opening the up-to-date store does not import Alembic, and can use the store
        code = (
            "import sys\n"
            "from fedstats.service.store import open_store\n"
            f"s = open_store({url!r}, require_writable=True)\n"
            "with s.transaction(read_only=True) as tx:\n"
            "    assert tx.authorities() == {}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
            "s.close()\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]"
