"""``python -m tests.compat``: rewrite the generated tables of docs/compatibility.md: the APIs
(tests/compat/matrix.py) and the clients, from the last results of ``python -m tests.compat.clients``
(tests/compat/clients.json)."""

from tests.compat import clients
from tests.compat.matrix import DOC, REFERENCE, render, replace_table

if __name__ == "__main__":
    if not REFERENCE.is_dir():
        raise SystemExit(f"tests.compat: Kafka's message definitions are not at {REFERENCE}")
    doc = replace_table(DOC.read_text(), render())
    DOC.write_text(clients.replace_table(doc, clients.render(clients.load())))
    print(f"wrote the API and client tables of {DOC}")
