import pytest

from rehearsal_gym.atomic import atomic_directory


def test_crash_inside_keeps_the_previous_directory(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "weights").write_text("good")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "weights").write_text("half")
        raise RuntimeError("killed mid-checkpoint")
    assert (target / "weights").read_text() == "good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary leftovers
