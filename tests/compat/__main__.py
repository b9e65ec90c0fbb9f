"""``python -m tests.compat``: rewrite the API table of docs/compatibility.md (tests/compat/matrix.py)."""

from tests.compat.matrix import DOC, REFERENCE, render, replace_table

if __name__ == "__main__":
    if not REFERENCE.is_dir():
        raise SystemExit(f"tests.compat: Kafka's message definitions are not at {REFERENCE}")
    DOC.write_text(replace_table(DOC.read_text(), render()))
    print(f"wrote the API table of {DOC}")
