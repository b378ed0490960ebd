"""`backchannel workers`: who shares the PostgreSQL store, what each holds, who is alive."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from .config import Config
from .errors import StoreError
from .workers import DEFAULT_LEASE_TTL

__all__ = ["print_workers", "read_workers"]


async def read_workers(url: str) -> tuple[list[dict[str, Any]], dict[str, tuple[str, float]]]:
    from .store.postgres import PostgresStore

    store = PostgresStore(url)
    try:
        return await store.workers_report(), await store.leases()
    finally:
        await store.close()


def print_workers(config: Config, as_json: bool) -> None:
    if not config.store.url:
        raise StoreError(
            f"workers share a PostgreSQL store; this config's store is the SQLite file"
            f' {config.store.path} (set [store] url = "postgresql://...")'
        )
    workers, leases = asyncio.run(read_workers(config.store.url))
    for worker in workers:
        age = worker["heartbeat_age"]
        worker["state"] = (
            "stopped"
            if worker["stopped_at"] is not None
            else "alive"
            if age <= DEFAULT_LEASE_TTL
            else "silent"
        )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "workers": workers,
                    "leases": {
                        account: {"worker": worker, "expires_in": round(left, 1)}
                        for account, (worker, left) in sorted(leases.items())
                    },
                },
                indent=2,
            )
        )
        return
    if not workers:
        click.echo(f"no workers have used this store yet ({config.store.location})")
        return
    click.echo(f"{'WORKER':<16} {'STATE':<8} {'HEARTBEAT':>9} {'RUNS':>4}  HOST:PID  ACCOUNTS")
    for w in workers:
        since = f"{w['heartbeat_age']:.1f}s ago"
        click.echo(
            f"{w['name']:<16} {w['state']:<8} {since:>9} {w['runs']:>4}  {w['host']}:{w['pid']}"
            f"  {', '.join(w['accounts']) or '-'}"
        )
    unleased = sorted(set(config.accounts) - set(leases))
    for account, (holder, left) in sorted(leases.items()):
        click.echo(f"lease {account}: {holder}, {left:.1f}s left")
    if unleased:
        click.echo(
            "not leased: " + ", ".join(unleased) + " (webhook accounts: every worker serves them)"
        )
