"""Compare the contract tables of two speclogs databases, row for row (an engine change must not change a row).

    python scripts/diff_databases.py BEFORE.duckdb AFTER.duckdb [--ignore-column C …] [--show 5]

For every table or view of the contract (no '_' prefix) in either file: the rows of both as multisets (order-free),
over the columns both have, minus the ones that differ by nature (ingest times, parse seconds, file sizes of the
database itself). Prints per table: rows before / after, rows only before, rows only after, and a few examples;
exits 1 when any table differs. A column only one side has is listed (added columns are allowed by the contract).
"""

from __future__ import annotations

import argparse
import sys

import duckdb

VOLATILE = {"ingested_at", "parse_seconds"}


def relations(connection) -> dict[str, list[str]]:
    rows = connection.execute(
        "SELECT table_name, list(column_name ORDER BY column_index) FROM duckdb_columns() "
        "WHERE schema_name = 'main' AND NOT internal AND NOT starts_with(table_name, '_') GROUP BY table_name"
    ).fetchall()
    return {name: columns for name, columns in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--ignore-column", action="append", default=[], help="a column to leave out everywhere")
    parser.add_argument("--show", type=int, default=3, help="example rows shown per side and table")
    args = parser.parse_args()
    connection = duckdb.connect()
    connection.execute(f"ATTACH '{args.before}' AS a (READ_ONLY)")
    connection.execute(f"ATTACH '{args.after}' AS b (READ_ONLY)")
    tables_a = relations(duckdb.connect(args.before, read_only=True))
    tables_b = relations(duckdb.connect(args.after, read_only=True))
    ignored = VOLATILE | set(args.ignore_column)
    differ = False
    for table in sorted(set(tables_a) | set(tables_b)):
        if table not in tables_a or table not in tables_b:
            print(f"{table}: only in {'after' if table in tables_b else 'before'}")
            continue
        common = [c for c in tables_a[table] if c in tables_b[table] and c not in ignored]
        extra = sorted(set(tables_a[table]) ^ set(tables_b[table]))
        columns = ", ".join(f'"{c}"' for c in common)
        count_a = connection.execute(f'SELECT count(*) FROM a."{table}"').fetchone()[0]
        count_b = connection.execute(f'SELECT count(*) FROM b."{table}"').fetchone()[0]
        only_a = connection.execute(f'SELECT {columns} FROM a."{table}" EXCEPT ALL SELECT {columns} FROM b."{table}"').fetchall()
        only_b = connection.execute(f'SELECT {columns} FROM b."{table}" EXCEPT ALL SELECT {columns} FROM a."{table}"').fetchall()
        status = "same" if not only_a and not only_b else "DIFFERS"
        differ |= status != "same"
        note = f"; columns on one side only: {', '.join(extra)}" if extra else ""
        print(f"{table}: {status} — {count_a:,} / {count_b:,} rows; {len(only_a):,} only before, {len(only_b):,} only after{note}")
        for label, rows in (("before", only_a), ("after", only_b)):
            for row in rows[: args.show]:
                print(f"    {label}: {dict(zip(common, row))}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
