"""journal.JournalTail: one follower of a journal path for every reader (the console's live feed,
its time travel): each complete record once across appends, torn lines, rotation and truncation,
and a start near the end that stands where its own reads would have left it."""
import os

from speed_runtime.core.records import MAX_LINE_BYTES, LeaseTrace, encode_line
from speed_runtime.journal import JournalTail


def line(i: int) -> bytes:
    return encode_line(LeaseTrace(float(i), "n", f"s{i}", "acquired")).encode()


def subjects(events) -> list[str]:
    return [e.subject for e in events]


def test_each_complete_record_once_and_a_torn_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_bytes(line(1) + line(2)[:10])
    tail = JournalTail(str(path))
    assert subjects(tail.read()) == ["s1"]
    assert tail.read() == []
    with open(path, "ab") as f:
        f.write(line(2)[10:] + b"not json\n")
    assert subjects(tail.read()) == ["s2"] and tail.bad_lines == 1


def test_a_rotated_or_truncated_journal_is_read_from_its_start(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_bytes(line(1) + line(2))
    tail = JournalTail(str(path))
    assert subjects(tail.read()) == ["s1", "s2"]
    os.rename(path, tmp_path / "n.jsonl.1")
    path.write_bytes(line(3) + line(4) + line(5))  # a new inode, longer than the old file
    assert subjects(tail.read()) == ["s3", "s4", "s5"]
    path.write_bytes(line(6))  # the same inode, truncated
    assert subjects(tail.read()) == ["s6"]


def test_a_reader_that_stops_early_leaves_the_rest_for_the_next_read(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_bytes(b"".join(line(i) for i in range(5)))
    tail = JournalTail(str(path))
    assert subjects(tail.read(max_records=2)) == ["s0", "s1"]
    assert subjects(tail.read()) == ["s2", "s3", "s4"]


def test_lines_follows_an_open_file_whatever_its_name(tmp_path):
    # (time travel follows each file by inode: a rotation renames it, and nothing is read twice)
    path = tmp_path / "n.jsonl"
    path.write_bytes(line(1))
    tail = JournalTail(str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(tail.lines(fd)) == [line(1)]
        os.rename(path, tmp_path / "n.jsonl.1")
        with open(tmp_path / "n.jsonl.1", "ab") as f:
            f.write(line(2))
        assert list(tail.lines(fd)) == [line(2)]
    finally:
        os.close(fd)


def test_start_near_end_stands_at_the_first_line_starting_in_the_last_bytes(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_bytes(b"".join(line(i) for i in range(10)))
    tail = JournalTail(str(path))
    tail.start_near_end(len(line(9)) + len(line(8)) + 3)  # starts inside line 7
    assert subjects(tail.read()) == ["s8", "s9"]
    small = JournalTail(str(path))
    small.start_near_end(10 ** 6)  # the whole journal fits
    assert len(small.read()) == 10


def test_start_near_end_inside_one_over_long_line_reads_it_as_one_bad_line(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_bytes(line(0) + b"x" * (MAX_LINE_BYTES + 10))
    tail = JournalTail(str(path))
    tail.start_near_end(100)
    assert tail.read() == [] and tail.bad_lines == 0
    with open(path, "ab") as f:
        f.write(b"\n" + line(1))
    assert subjects(tail.read()) == ["s1"] and tail.bad_lines == 1


def test_start_near_end_on_a_missing_path_leaves_read_to_report(tmp_path):
    tail = JournalTail(str(tmp_path / "fifo"))
    tail.start_near_end(10)
    os.mkfifo(tmp_path / "fifo")
    tail.start_near_end(10)
    assert tail.read() == [] and "not a regular file" in tail.error


def test_unchanged_says_whether_the_last_read_took_the_file_as_it_is_now_to_its_end(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_bytes(line(1) + line(2))
    tail = JournalTail(str(path))
    assert not tail.unchanged(os.stat(path))  # never read
    tail.read(max_records=1)
    assert not tail.unchanged(os.stat(path))  # stopped before the end
    tail.read()
    assert tail.unchanged(os.stat(path))
    with open(path, "ab") as f:
        f.write(line(3)[:5])  # even a torn line is news
    assert not tail.unchanged(os.stat(path))
    tail.read()
    assert tail.unchanged(os.stat(path))
    os.rename(path, tmp_path / "n.jsonl.1")
    path.write_bytes(line(3))
    assert not tail.unchanged(os.stat(path))  # another file under the name
    os.unlink(path)
    os.mkfifo(path)
    tail.read()
    assert tail.error and not tail.unchanged(os.stat(path))  # a path that cannot be read is looked at again


def test_an_append_cut_short_leaves_whole_lines_and_is_finished_later(tmp_path, monkeypatch):
    """Under `ulimit -f` (or the last free pages of a disk) a write stops mid-line: the journal
    ended in a torn line for good, every later record after it. It is cut back to its last whole
    line, and the rest is written when the file can grow again."""
    import errno

    from speed_runtime import journal
    from speed_runtime.core.records import LeaseTrace
    from speed_runtime.journal import JournalWriter, read_journal

    writer = JournalWriter(str(tmp_path), "n")
    real, room = os.write, [300]

    def short(fd, data):
        if fd != writer._fd:
            return real(fd, data)
        if room[0] <= 0:
            raise OSError(errno.EFBIG, "File too large")
        n = real(fd, bytes(data[:room[0]]))
        room[0] -= n
        return n
    monkeypatch.setattr(journal.os, "write", short)
    for i in range(20):
        writer(LeaseTrace(1000.0 + i, "n", f"peer{i}", "observed_join"))
    writer.flush()
    records, torn = read_journal(writer.path)
    assert torn == 0 and 0 < len(records) < 20 and open(writer.path, "rb").read().endswith(b"\n")
    monkeypatch.setattr(journal.os, "write", real)
    writer.flush()
    records, torn = read_journal(writer.path)
    assert torn == 0 and [r.subject for r in records] == [f"peer{i}" for i in range(20)]
    writer.close()


def test_a_journal_says_when_its_appends_fail_when_it_drops_records_and_when_it_writes_again(tmp_path, monkeypatch):
    import errno

    from speed_runtime import journal
    from speed_runtime.core.records import LeaseTrace
    from speed_runtime.journal import JournalWriter, read_journal

    told: list[tuple[str, str]] = []
    writer = JournalWriter(str(tmp_path), "n", on_problem=lambda event, detail: told.append((event, detail)))
    real = os.write

    def full(fd, data):
        if fd == writer._fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(journal, "MAX_UNWRITTEN_BYTES", 2000)
    monkeypatch.setattr(journal.os, "write", full)
    for i in range(3):
        writer(LeaseTrace(1000.0 + i, "n", f"peer{i}", "observed_join"))
        writer.flush()
    assert [event for event, _ in told] == ["journal_failing"]  # once, not at every failed flush
    assert told[0][1].startswith(f"cannot append to its trace journal {writer.path} (No space left on device); "
                                 "its records wait in memory") and told[0][1].endswith("then are dropped")
    for i in range(40):
        writer(LeaseTrace(2000.0 + i, "n", f"more{i}", "observed_join"))
    writer.flush()
    assert told[-1][0] == "journal_dropping" and "No space left on device" in told[-1][1]
    assert f"{writer.bytes_dropped} bytes so far" in told[-1][1] and writer.bytes_dropped > 2000
    monkeypatch.setattr(journal.os, "write", real)
    writer(LeaseTrace(3000.0, "n", "after", "observed_join"))
    writer.flush()
    assert told[-1] == ("journal_recovered", f"appends to its trace journal {writer.path} again")
    records, torn = read_journal(writer.path)
    assert torn == 0 and [r.subject for r in records] == ["after"]
    writer.close()


def test_a_rare_record_asks_its_owner_to_flush_soon_and_an_envelopes_waits_for_the_next_flush(tmp_path):
    """A control request applied, a lease event, a health report: an operator looks for them in the
    journal as soon as their effect shows, so the writer asks its owner (the node's registry thread)
    to flush at once; envelopes' records, one per envelope, wait for the periodic flush."""
    from speed_runtime.core.records import ControlTrace, HealthTrace, envelope_event
    from speed_runtime.journal import JournalWriter, read_journal

    asked = []
    writer = JournalWriter(str(tmp_path), "n", on_rare=lambda: asked.append(True))
    writer(envelope_event(1.0, "n", "in", "p", "MESSAGE", 1, 10, "accepted", None, None))
    assert asked == []
    writer(ControlTrace(2.0, "n", "op", "abcd", "r1", "allow", {"peer": "p"}, "applied"))
    writer(HealthTrace(3.0, "n", "journal_failing", "detail"))
    writer(LeaseTrace(4.0, "n", "p", "observed_join"))
    assert asked == [True] * 3
    writer.flush()
    assert [r.kind for r in read_journal(writer.path)[0]] == ["envelope", "control", "health", "lease"]
