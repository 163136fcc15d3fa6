import multiprocessing
import threading

import pytest

from rehearsal_gym.core.atomic import atomic_directory, recover


def test_crash_inside_keeps_the_previous_directory(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "weights").write_text("good")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "weights").write_text("half")
        raise RuntimeError("killed mid-checkpoint")
    assert (target / "weights").read_text() == "good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary leftovers


def test_recover_restores_a_directory_killed_between_renames(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "weights").write_text("good")
    (tmp_path / ".ckpt.old").mkdir()  # the state a kill between the two renames leaves
    (tmp_path / "ckpt" / "weights").rename(tmp_path / ".ckpt.old" / "weights")
    (tmp_path / "ckpt").rmdir()
    (tmp_path / ".ckpt.abc123").mkdir()  # a half-written temporary
    recover(target)
    assert (target / "weights").read_text() == "good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_recover_waits_for_a_write_in_progress(tmp_path):
    # another writer's temporary is not a leftover: recover must not delete it mid-write
    target = tmp_path / "cache"
    done = threading.Event()

    def other_process_recovers():
        recover(target)
        done.set()

    with atomic_directory(target) as tmp:
        (tmp / "weights").write_text("first half")
        waiter = threading.Thread(target=other_process_recovers, daemon=True)
        waiter.start()
        done.wait(0.3)  # time for a recover that does not wait to run (and delete the temporary)
        (tmp / "config").write_text("second half")
        assert tmp.is_dir() and not done.is_set()  # blocked on the writer's lock, the temporary kept
    waiter.join(60)
    assert done.is_set()
    assert sorted(p.name for p in target.iterdir()) == ["config", "weights"]


def _write_many(target: str, tag: str, n: int) -> None:
    for i in range(n):
        with atomic_directory(target) as tmp:
            (tmp / "a").write_text(f"{tag}{i}")
            (tmp / "b").write_text(f"{tag}{i}")


def test_concurrent_writers_of_one_cache_take_turns(tmp_path):
    # two processes building the same cache at once: neither crashes, the result is whole
    target = tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_many, args=(str(target), tag, 30)) for tag in "xy"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert (target / "a").read_text() == (target / "b").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
