"""docs/sql/: the SQL each store operation sends on each dialect, rendered from the builders."""

from __future__ import annotations

from .cli import DIRECTORY, main
from .flavours import DIALECTS, FLAVOURS, Flavour
from .formatting import WIDTH as WIDTH
from .formatting import Compiled, compiled, layout, sql_text
from .operations import NOT_SENT, OPERATIONS
from .rendering import Catalog, Document, catalog, render
from .sent import Operation, Sent

__all__ = [
    "DIALECTS",
    "DIRECTORY",
    "FLAVOURS",
    "NOT_SENT",
    "OPERATIONS",
    "Catalog",
    "Compiled",
    "Document",
    "Flavour",
    "Operation",
    "Sent",
    "catalog",
    "compiled",
    "layout",
    "main",
    "render",
    "sql_text",
]

# ``python -m hermes_state.sql_docs`` rewrites docs/sql/: a file per statement of each operation
# on each dialect, and index.md listing them; ``--check`` only says which files are stale or
# missing (exit 1), for CI and the tests. Another directory can be named as the argument.
#
# OPERATIONS says which builders each operation runs on each dialect, as the plans in
# hermes_state/plans/ choose them for a store with an owner and leases (a gateway's); the
# tests hold it to what a store actually sends. Each statement is compiled as the stores
# compile it, ``statement.compile(dialect=...)`` with no options, by the dialect of the store's
# driver (pysqlite, psycopg, PyMySQL) without connecting. Only the parameter style differs
# (``:name``, so every parameter reads by name), and whitespace is laid out for reading.
