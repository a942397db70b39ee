"""The SqlQuery helper, run inside the sandbox with the standard library only (Python >= 3.9).

    python3 sql_program.py build SPEC.json DB      create DB from a JSON spec, then delete the spec
    python3 sql_program.py tables DB               table names with row counts
    python3 sql_program.py describe DB TABLE       columns, types, keys and a few sample rows
    python3 sql_program.py query DB SQL            one read-only SELECT, printed as a compact text table

The spec is ``{"tables": [{"name": ..., "ddl": "CREATE TABLE ...", "rows": [[...], ...]}, ...]}``; the host
generates it from the seed, so nothing here is random. Queries are read-only three ways over: the database
is opened with a ``mode=ro`` URI, ``PRAGMA query_only`` is on, and an authorizer allows only reading
(no INSERT/UPDATE/DELETE/DDL, no ATTACH, no PRAGMA). Python's sqlite3 refuses a second statement.
Errors print one line and exit 1.
"""

import json
import os
import sqlite3
import sys

MAX_ROWS = 50
COUNT_CAP = 100_000
MAX_CELL = 80
SAMPLE_ROWS = 3
ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
           getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
READ_PRAGMAS = {"table_info", "table_xinfo", "table_list", "foreign_key_list", "index_list", "index_info",
                "index_xinfo"}


class UserError(Exception):
    pass


def build(spec_path, db_path):
    with open(spec_path) as f:
        spec = json.load(f)
    os.makedirs(os.path.dirname(db_path) or ".", exist_ok=True)
    if os.path.exists(db_path):
        os.remove(db_path)
    conn = sqlite3.connect(db_path)
    with conn:
        for table in spec["tables"]:
            conn.execute(table["ddl"])
            if table["rows"]:
                marks = ",".join("?" * len(table["rows"][0]))
                conn.executemany(f"INSERT INTO {table['name']} VALUES ({marks})", table["rows"])
    conn.close()
    os.remove(spec_path)
    os.chmod(db_path, 0o444)
    return f"built {db_path}"


def authorize(action, arg1, _arg2, _db, _trigger):
    """Allow reading only. Table-valued functions (json_each, pragma_table_info) also touch the schema
    table and read-only introspection pragmas; nothing can write anyway (mode=ro, query_only)."""
    if action in ALLOWED:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_UPDATE and arg1 in ("sqlite_master", "sqlite_schema"):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def open_ro(db_path):
    if not os.path.exists(db_path):
        raise UserError("the database is missing")
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    conn.execute("PRAGMA query_only = ON")
    return conn


def table_names(conn):
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
    return [r[0] for r in rows]


def quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


def tables(db_path):
    conn = open_ro(db_path)
    lines = []
    for name in table_names(conn):
        count = conn.execute(f"SELECT COUNT(*) FROM {quote_ident(name)}").fetchone()[0]
        lines.append(f"{name} ({count} rows)")
    return "\n".join(lines) or "(no tables)"


def describe(db_path, table):
    conn = open_ro(db_path)
    names = table_names(conn)
    match = [n for n in names if n.lower() == table.strip().lower()]
    if not match:
        raise UserError(f"no table named {table!r}; tables: {', '.join(names)}")
    name = quote_ident(match[0])
    fks = {row[3]: f"{row[2]}.{row[4]}" for row in conn.execute(f"PRAGMA foreign_key_list({name})")}
    out = [f"table {match[0]}:"]
    for _cid, col, ctype, notnull, _default, pk in conn.execute(f"PRAGMA table_info({name})"):
        notes = (["primary key"] if pk else []) + (["not null"] if notnull and not pk else [])
        if col in fks:
            notes.append("references " + fks[col])
        out.append(f"  {col} {ctype}" + (f"  ({', '.join(notes)})" if notes else ""))
    count = conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0]
    cur = conn.execute(f"SELECT * FROM {name} LIMIT {SAMPLE_ROWS}")
    out.append(f"{count} rows; the first {min(count, SAMPLE_ROWS)}:")
    out.append(render_table([d[0] for d in cur.description], cur.fetchall()))
    return "\n".join(out)


def cell(value):
    if value is None:
        return "NULL"
    if isinstance(value, float):
        text = format(value, ".12g")
    elif isinstance(value, bytes):
        text = f"<{len(value)} bytes>"
    else:
        text = str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 3] + "..."


def render_table(header, rows):
    header = [cell(h) for h in header]
    lines = [" | ".join(header), "-+-".join("-" * max(len(h), 1) for h in header)]
    lines.extend(" | ".join(cell(v) for v in row) for row in rows)
    return "\n".join(lines)


def query(db_path, sql):
    if not sql.strip():
        raise UserError("empty query")
    conn = open_ro(db_path)
    conn.set_authorizer(authorize)
    try:
        cur = conn.execute(sql)
    except sqlite3.Warning as e:  # Python <= 3.11 reports a second statement as a Warning
        raise UserError(f"{e} (send one SELECT statement per query)") from None
    except sqlite3.Error as e:
        raise UserError(explain(e)) from None
    if cur.description is None:
        return "(statement returned no rows)"
    rows = cur.fetchmany(MAX_ROWS)
    extra = 0
    while extra < COUNT_CAP and rows and len(rows) == MAX_ROWS:
        batch = cur.fetchmany(1000)
        if not batch:
            break
        extra += len(batch)
    text = render_table([d[0] for d in cur.description], rows)
    if extra:
        more = f"at least {extra}" if extra >= COUNT_CAP else str(extra)
        return (f"{text}\n({len(rows)} rows shown, {more} more not shown: add LIMIT {MAX_ROWS} OFFSET "
                f"{MAX_ROWS} to page, or aggregate)")
    return f"{text}\n({len(rows)} row{'s' if len(rows) != 1 else ''})"


def explain(err):
    msg = str(err)
    if "not authorized" in msg or "readonly" in msg or "read-only" in msg:
        return f"{msg}: the database is read-only; only SELECT queries are allowed"
    if "one statement" in msg:
        return f"{msg} (send one SELECT statement per query)"
    return msg


def main(argv):
    ops = {"build": (build, 2), "tables": (tables, 1), "describe": (describe, 2), "query": (query, 2)}
    if len(argv) < 2 or argv[1] not in ops or len(argv) != ops[argv[1]][1] + 2:
        sys.stderr.write("usage: sql_program.py build SPEC DB | tables DB | describe DB TABLE | "
                         "query DB SQL\n")
        return 2
    fn = ops[argv[1]][0]
    try:
        print(fn(*argv[2:]))
    except (UserError, sqlite3.Error, sqlite3.Warning) as e:
        print(f"SQL error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
