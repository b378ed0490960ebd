"""The throwaway PostgreSQL cluster the PostgreSQL tests run against."""

from __future__ import annotations

import os
import pwd

import psycopg
import pytest
from backchannel.testing.postgres import PostgresUnavailable, throwaway_cluster


def test_a_throwaway_cluster_listens_on_loopback_as_an_unprivileged_user_and_is_removed() -> None:
    try:
        with throwaway_cluster() as cluster:
            directory = cluster.directory
            with psycopg.connect(cluster.url()) as connection:
                addresses = connection.execute("SHOW listen_addresses").fetchone()
                assert addresses == ("127.0.0.1",)
            owner = pwd.getpwuid(os.stat(cluster.data_dir).st_uid).pw_name
            if os.geteuid() == 0:
                assert owner == "postgres"
            else:
                assert owner == pwd.getpwuid(os.geteuid()).pw_name
    except PostgresUnavailable as missing:
        if os.environ.get("BACKCHANNEL_REQUIRE_POSTGRES") == "1":
            raise
        pytest.skip(str(missing))
    assert not directory.exists()
