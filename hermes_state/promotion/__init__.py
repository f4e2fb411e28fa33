"""Copies a hermes state database to another database: promotion to a server, and back.

The copy is lossless for primary data. It reflects the *source* (every table and column,
whether the models know them or not), creates on the target what is missing there (tables and
columns, with the portable type mapping of :func:`portable_type`), then streams each table in
primary-key order, in batches (keyset pagination, so memory stays bounded whatever the size),
committing batch by batch: an interrupted copy is resumed by running it again. Rows already in
the target are compared on every carried column: identical ones are skipped, so a second run
copies nothing; differing ones stop the copy before anything is written unless ``force``.

Before anything is written, the source rows are checked against the target's constraints (NOT
NULL, string lengths, types): a row the target cannot take refuses the whole copy, naming table,
column and row count; ``fills`` supply values for NULLs.

Every table of the models is carried, and so is any other table the source has (primary data
the models do not know). Not carried, because they are derived or bookkeeping
(:class:`SkippedTable` says why for each, with ``derived`` set): the full-text index of
:mod:`hermes_state.search_index` (its FTS virtual tables, their shadow tables and its views),
``sqlite_sequence``, and the version and adoption tables of hermes-state itself (the target
keeps its own). When the target is SQLite and has the full-text index, it is rebuilt from the
copied messages once the rows are in. A virtual table the models do not know (another FTS
index, an R-tree) is neither copied nor derived: it is the one kind of ``SkippedTable`` that
is not ``derived``, so the summary lists it.

Upstream's multimodal content (text starting with NUL) is written to a server in the
reversible form of :mod:`hermes_state.content` and read back from one into upstream's form.
"""

from __future__ import annotations

from ..errors import CopyConflictError, CopyRefusedError
from .copying import Progress as Progress
from .copying import copy_database
from .dry_run import plan_copy
from .planning import DEFAULT_BATCH as DEFAULT_BATCH
from .planning import ENCODED_CONTENT as ENCODED_CONTENT
from .planning import FTS4_SHADOW_SUFFIXES as FTS4_SHADOW_SUFFIXES
from .planning import FTS5_SHADOW_SUFFIXES as FTS5_SHADOW_SUFFIXES
from .planning import MODELLED_TABLES as MODELLED_TABLES
from .planning import OTHER_MODELLED_TABLES as OTHER_MODELLED_TABLES
from .planning import SEARCH_TABLES as SEARCH_TABLES
from .portable import portable_type
from .reports import CONFLICTS_SHOWN as CONFLICTS_SHOWN
from .reports import (
    CopyPlan,
    CopyReport,
    Fill,
    FillPlan,
    SideState,
    SkippedTable,
    TablePlan,
    TableReport,
)

__all__ = [
    "CopyConflictError",
    "CopyPlan",
    "CopyRefusedError",
    "CopyReport",
    "Fill",
    "FillPlan",
    "SideState",
    "SkippedTable",
    "TablePlan",
    "TableReport",
    "copy_database",
    "plan_copy",
    "portable_type",
]
