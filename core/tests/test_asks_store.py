"""The ask methods of the PostgreSQL store, through the same contract as SQLite's.

`TestPostgresStoreContract` runs them too once PostgresStore implements the
whole Store; until then this runs only the ask part (`AskStoreContract`) on a
PostgresStore whose two search methods of another change are stubbed (and
whose outbox gets that change's `origin` column here).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any

import pytest
from backchannel.store import Store
from backchannel.testing.ask_contract import AskStoreContract


class TestPostgresAskContract(AskStoreContract):
    @pytest.fixture
    async def store(self, postgres_url: str) -> AsyncIterator[Store]:
        from backchannel.store.postgres import PostgresStore

        class AsksOnly(PostgresStore):
            async def search_conversations(
                self,
                *,
                accounts: Collection[str] | None = None,
                query: str | None = None,
                limit: int = 20,
            ) -> list[Any]:
                raise NotImplementedError

            async def count_visible(
                self, conversation_id: int, before_seq: int | None = None
            ) -> int:
                raise NotImplementedError

        opened = AsksOnly(postgres_url)
        # outbox.origin (orchestration) has no PostgreSQL migration yet either: add it here
        async with (await opened.pool()).connection() as connection:
            await connection.execute("ALTER TABLE outbox ADD COLUMN IF NOT EXISTS origin TEXT")
        yield opened
        await opened.close()
