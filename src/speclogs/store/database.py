"""Opening the speclogs database: schema.sql (the only source of columns), its migrations, views.sql.

A file of schema.sql's version or later gets the migrations it lacks, in order, in the opening's transaction, each
recorded in `_migrations`; a file of an older or newer schema is only read. Files are written in DuckDB 1.4's storage
format (the LTS), so the `duckdb` CLI and the 1.4 library read them too.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Sequence
from pathlib import Path

import duckdb

from speclogs.errors import StoreError
from speclogs.ingest.summary import DriftNote
from speclogs.schema import SCHEMA_SQL, base_version, migrations, schema_version

SCHEMA_VERSION = schema_version()
STORAGE_VERSION = "v1.4.0"  # the oldest DuckDB that must read speclogs files: the 1.4 LTS
# DuckDB's buffer pool when writing (default 80 % of RAM): the blocks an ingest writes stay cached up to it
WRITER_MEMORY_LIMIT = "512MB"
_CATALOG = "speclogs"  # the name the file is attached under when it is written (its catalog is then the default one)
_LOCK_PID = re.compile(r"PID (\d+)")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXTS = ("No space left on device", "Disk quota exceeded")  # how DuckDB's messages say ENOSPC / EDQUOT
NO_SPACE_HINT = "free space on that disk, or pass --db FILE on another one, then run the same command again"
VIEWS_SQL = (Path(__file__).parent / "views.sql").read_text(encoding="utf-8")
SCHEMA_TEXT = SCHEMA_SQL.read_text(encoding="utf-8")
SCHEMA_VIEWS = SCHEMA_TEXT[SCHEMA_TEXT.index("CREATE OR REPLACE VIEW"):]  # the views schema.sql defines over its tables


def no_space_left(error: BaseException | None) -> bool:
    """Whether a write failed because the disk (or quota) is full: `error` or the error it was raised while handling
    (a statement after the failed one says only "Current transaction is aborted")."""
    while error is not None:
        if getattr(error, "errno", None) in _NO_SPACE or any(text in str(error) for text in _NO_SPACE_TEXTS):
            return True
        error = error.__cause__ or error.__context__
    return False


def drift_notes(connection, source_files: Sequence[str]) -> tuple[DriftNote, ...]:
    """The drift view's rows for `source_files` (the files an ingest just wrote), biggest first."""
    rows = connection.execute(
        "SELECT source_file, kind, subject, lines, example_line_no, detail FROM drift_of(?::VARCHAR[]) "
        "ORDER BY kind, lines DESC, source_file, subject",
        [list(source_files)],
    ).fetchall()
    return tuple(DriftNote(*row) for row in rows)


# Every connection speclogs opens: DuckDB never fetches or loads an extension by itself (a `.sqlite` file, an
# `https://` path or a `read_json` would otherwise download one from the network).
NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def connect(db_path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the speclogs database (creating or migrating its schema when writable); StoreError says why it cannot."""
    path = Path(db_path)
    if read_only and not path.exists():
        raise StoreError(f"no database at {path}", hint="run `speclogs ingest PATH… --db FILE` first, or pass --db")
    _refuse_other_files(path)
    try:
        if read_only:
            connection = duckdb.connect(str(path), read_only=True, config=NO_EXTENSIONS)
        else:  # attached, for the row group size and the storage version (the file's catalog is then the default one)
            from speclogs.store.writer import ROW_GROUP_ROWS  # (polars: only where the file is written)

            connection = duckdb.connect(config={**NO_EXTENSIONS, "memory_limit": WRITER_MEMORY_LIMIT})
            quoted = str(path).replace("'", "''")
            options = f"ROW_GROUP_SIZE {ROW_GROUP_ROWS}" + ("" if path.exists() else f", STORAGE_VERSION '{STORAGE_VERSION}'")
            connection.execute(f"ATTACH '{quoted}' AS {_CATALOG} ({options})")
            connection.execute(f"USE {_CATALOG}")
    except duckdb.IOException as error:
        raise _store_error(path, error) from error
    except duckdb.Error as error:
        raise StoreError(f"cannot open {path}: {error}", hint="is it a DuckDB file written by speclogs?") from error
    if not read_only:
        try:
            version = _version_of(connection, path)  # None: a new file
            script = ["BEGIN TRANSACTION", *META_SQL, SCHEMA_TEXT]  # (the tables a migration adds columns to exist first)
            for number, name, sql in migrations():
                if version is None or number > version:  # (an older file records each in _migrations)
                    script += [sql] if version is None else [sql, f"INSERT INTO _migrations VALUES ({number}, '{name}', now())"]
            script += [f"INSERT OR REPLACE INTO meta VALUES ('schema_version', '{schema_version()}')", VIEWS_SQL, "COMMIT"]
            # one transaction (one WAL sync) in one script: each call is a wait for the GIL while the grammars load
            connection.execute(";\n".join(statement.strip().rstrip(";") for statement in script))
        except duckdb.Error as error:
            connection.close()
            hint = NO_SPACE_HINT if no_space_left(error) else "use a new --db file"
            raise StoreError(f"cannot create the speclogs schema in {path}: {error}", hint=hint) from error
        except StoreError:
            connection.close()
            raise
    return connection


def _refuse_other_files(path: Path) -> None:
    """StoreError for a file that is there but is not a DuckDB file (a SQLite file, a log passed as --db)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(12)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return  # (connect says what is wrong with those)
    if head and head[8:] != b"DUCK":  # where a DuckDB file says what it is
        raise StoreError(f"{path} is not a speclogs database (not a DuckDB file)",
                         hint="pass the .duckdb file `speclogs ingest --db` wrote, or a new path to create one")


META_SQL = ("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
            "CREATE TABLE IF NOT EXISTS _migrations (version INTEGER, description VARCHAR, applied_at TIMESTAMP)")


def _version_of(connection, path: Path) -> int | None:
    """The schema version of the file attached (None when it is new); StoreError for one this speclogs cannot write."""
    if not connection.execute(
            f"SELECT count(*) FROM duckdb_tables() WHERE database_name = '{_CATALOG}' AND table_name = 'meta'").fetchone()[0]:
        return None
    found = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version, current = int(found[0]) if found else 0, schema_version()
    if not base_version() <= version <= current:  # older than schema.sql, or written by a newer speclogs
        raise StoreError(
            f"{path} is of schema {version}; this speclogs writes schema {base_version()} to {current} only",
            hint="ingest its logs into a new --db file (ingest is idempotent: the same logs give the same rows); "
                 "`speclogs sql` still reads this one",
        )
    return version


def _store_error(path: Path, error: duckdb.Error) -> StoreError:
    message = str(error)
    if "lock" not in message.lower():
        hint = NO_SPACE_HINT if no_space_left(error) else "check the path and its permissions"
        return StoreError(f"cannot open {path}: {message}", hint=hint)
    holder = "pid unknown"
    if found := _LOCK_PID.search(message):  # the process and its command line, where /proc shows it
        try:
            command = Path(f"/proc/{found[1]}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            command = ""
        holder = f"pid {found[1]}" + (f" ({command[:200]})" if command else "")
    return StoreError(f"{path} is being written by another process: {holder}",
                      hint="wait for it to finish (each file is one transaction), or use another --db file")
