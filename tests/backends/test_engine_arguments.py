"""A store opens on an SQLAlchemy engine the caller already has, as on its URL."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine

from hermes_state import NativeAsyncSessionDB, SessionDB
from hermes_state.engine import with_driver
from tests.support.digest import sync_url


def test_the_sync_store_takes_an_engine(backend_url: URL) -> None:
    engine = create_engine(sync_url(backend_url))
    try:
        with SessionDB(engine) as db:
            db.create_session("on-an-engine", "cli")
            assert db.request_handoff("on-an-engine", "telegram") is True
        with SessionDB(url=engine) as db:
            assert db.get_handoff_state("on-an-engine")["state"] == "pending"  # type: ignore[index]
        # The caller's engine is left as it was: still usable, with none of the store's setup.
        with engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.asyncio
async def test_the_native_store_takes_an_async_engine(backend_url: URL) -> None:
    with SessionDB(url=backend_url) as db:
        db.create_session("async-engine", "cli")
    engine = create_async_engine(with_driver(backend_url, asyncio=True))
    try:
        async with NativeAsyncSessionDB(engine) as store:
            assert (await store.get_session("async-engine"))["id"] == "async-engine"  # type: ignore[index]
    finally:
        await engine.dispose()
