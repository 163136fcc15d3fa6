import pytest

from rehearsal_gym.atomic import atomic_directory, recover


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
