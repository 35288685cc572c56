"""The fault suite's watch reader on streams whose bytes are known: what it records, and how it
takes the two errors that end a stream (docs/api.md), so that a documented answer is never the
suite's own failure and a wrong one still is."""
import io
import json
import threading

import pytest

from workloads import WatchWorker


def event(revision, key, last_of_revision=True):
    data = {"revision": revision, "type": "put", "key": key, "value": f"v{revision}"}
    id_line = f"id: {revision}\n" if last_of_revision else ""
    return f"{id_line}event: put\ndata: {json.dumps(data)}\n\n"


def error(code, details):
    body = {"code": code, "message": "", "details": details}
    return f"event: error\ndata: {json.dumps(body)}\n\n"


def worker_reading(text, next_revision=1):
    worker = WatchWorker({"replicas": []}, threading.Event(), seed=1)
    worker.next_revision = worker.stream_start = next_revision
    worker.read_events(io.BytesIO((": watching\n\n" + text).encode()))
    return worker


def test_events_are_recorded_once_their_revision_is_complete():
    worker = worker_reading(event(1, "f/a") + event(2, "f/b", last_of_revision=False))
    assert [e.revision for e in worker.events] == [1]
    assert worker.next_revision == 2


def test_a_slow_reader_cut_resumes_where_it_was_told_with_no_hole():
    worker = worker_reading(event(1, "f/a") + event(2, "f/b") +
                            error("slow_reader", {"resume_revision": 3}))
    assert worker.next_revision == 3 and worker.slow_reader_cuts == 1
    assert worker.compacted_holes == 0


def test_a_slow_reader_cut_past_revisions_with_nothing_for_it_resumes_there():
    worker = worker_reading(event(1, "f/a") + error("slow_reader", {"resume_revision": 5}))
    assert worker.next_revision == 5 and worker.slow_reader_cuts == 1


def test_a_slow_reader_cut_told_to_go_back_is_the_servers_fault():
    with pytest.raises(AssertionError, match=r"resume from 2, which it had \(up to 2\)"):
        worker_reading(event(1, "f/a") + event(2, "f/b") +
                       error("slow_reader", {"resume_revision": 2}))


def test_compacted_leaves_a_counted_hole_from_the_oldest_revision():
    worker = worker_reading(event(1, "f/a") +
                            error("compacted", {"oldest_revision": 9, "start_revision": 2}))
    assert worker.next_revision == 9 and worker.compacted_holes == 1
    assert worker.covered == [(1, 1)]


def test_any_other_error_ends_the_run():
    with pytest.raises(AssertionError, match="unavailable"):
        worker_reading(error("unavailable", {}))
