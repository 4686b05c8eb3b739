"""State.write_json replaces a file whole even when several writers write it at once (two clusterctl commands in
one state directory: a run's record and a `stop` of it)."""
from __future__ import annotations

import json
import threading

from clusterctl.state import State


def test_writers_at_once_leave_one_whole_document_and_no_temporary_file(tmp_path):
    state = State(tmp_path)
    target = tmp_path / "facts" / "cluster.json"
    documents = [{"writer": n, "lines": ["x" * 2000] * 50} for n in range(8)]
    errors = []

    def write(document):
        try:
            for _ in range(20):
                state.write_json(target, document)
        except Exception as error:  # noqa: BLE001 (the test reports any)
            errors.append(error)

    threads = [threading.Thread(target=write, args=(d,)) for d in documents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads(target.read_text()) in documents
    assert [p.name for p in target.parent.iterdir()] == ["cluster.json"]
    assert target.stat().st_mode & 0o777 == 0o600
