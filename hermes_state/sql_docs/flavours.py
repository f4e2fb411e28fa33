"""The servers the docs are rendered for, each with its driver's dialect."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, cast

from sqlalchemy import Connection, Dialect

from ..statements import Capabilities


@dataclass(frozen=True, slots=True)
class Flavour:
    """One server as the docs render for it: the directory its files go to, its name and its
    driver's in their headers, and the driver's dialect (``:name`` parameters), whose
    capabilities the plans choose by."""

    key: str
    directory: str
    server: str
    driver: str
    dialect: Dialect

    @property
    def caps(self) -> Capabilities:
        return Capabilities.of(self.dialect)


def _sqlite() -> Dialect:
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

    return SQLiteDialect_pysqlite(paramstyle="named")


def _postgresql() -> Dialect:
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    dialect: Callable[..., Dialect] = PGDialect_psycopg  # its __init__ is not annotated
    return dialect(paramstyle="named")


def _mysql(version: tuple[int, ...], mariadb: bool) -> Dialect:
    """PyMySQL's dialect as connecting to that server would set it up: SQLAlchemy's own
    vendor setup, which reads nothing but the server's version (it decides, e.g., RETURNING on
    MariaDB and the new row's alias in MySQL's ON DUPLICATE KEY UPDATE)."""
    from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql

    dialect = MySQLDialect_pymysql(paramstyle="named", is_mariadb=mariadb)
    dialect.server_version_info = version
    no_connection = cast(Connection, None)
    if mariadb:
        dialect._initialize_mariadb(no_connection)
    else:
        dialect._initialize_mysql(no_connection)
    return dialect


def _flavours() -> tuple[Flavour, ...]:
    return (
        Flavour("sqlite", "sqlite", "SQLite", "pysqlite", _sqlite()),
        Flavour("postgresql", "postgresql", "PostgreSQL", "psycopg", _postgresql()),
        Flavour("mysql", "mysql", "MySQL 8.0", "PyMySQL", _mysql((8, 0, 36), mariadb=False)),
        Flavour("mariadb", "mysql", "MariaDB 10.11", "PyMySQL", _mysql((10, 11, 0), mariadb=True)),
    )


#: Every flavour rendered; MySQL and MariaDB share the mysql directory (a file of MariaDB's
#: only where what it is sent differs).
FLAVOURS: Final = _flavours()
#: The directories, one per dialect.
DIALECTS: Final = tuple(dict.fromkeys(flavour.directory for flavour in FLAVOURS))
