import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rehearsal_gym.agents.curriculum import TemplateCurriculum, draw_tasks
from rehearsal_gym.envs.finance import FinanceEnv

TEMPLATES = ("a", "b", "c")


def test_unseen_templates_are_sampled_evenly():
    np.testing.assert_allclose(TemplateCurriculum(TEMPLATES).weights(), [1 / 3] * 3)


def test_weights_follow_the_bernoulli_variance_plus_floor():
    c = TemplateCurriculum(TEMPLATES, floor=0.02, decay=1.0)
    c.update(["a"] * 8 + ["b"] * 8 + ["c"] * 8, [True] * 8 + [True, False] * 4 + [False] * 8)
    p = np.array([9 / 10, 5 / 10, 1 / 10])  # Laplace: (wins + 1) / (episodes + 2)
    w = p * (1 - p) + 0.02
    np.testing.assert_allclose(c.weights(), w / w.sum())


def test_decay_forgets_old_rounds():
    c = TemplateCurriculum(TEMPLATES, decay=0.5)
    c.update(["a"] * 4, [False] * 4)
    c.update([], [])
    assert c.episodes["a"] == pytest.approx(2.0) and c.wins["a"] == 0.0


def test_unknown_templates_are_ignored_and_state_round_trips():
    c = TemplateCurriculum(TEMPLATES)
    c.update(["a", "zzz"], [True, True])
    d = TemplateCurriculum(TEMPLATES)
    d.load_dict(c.to_dict())
    np.testing.assert_allclose(c.weights(), d.weights())


@settings(deadline=None)  # timing is not what this checks: a loaded CI core must not fail it
@given(st.lists(st.tuples(st.sampled_from(TEMPLATES), st.booleans()), max_size=60))
def test_weights_are_a_distribution_with_every_template_kept(rounds):
    c = TemplateCurriculum(TEMPLATES, floor=0.01)
    c.update([t for t, _ in rounds], [s for _, s in rounds])
    w = c.weights()
    assert w.sum() == pytest.approx(1.0) and (w > 0).all()
    assert w.max() / w.min() <= (0.25 + 0.01) / 0.01 + 1e-9


@pytest.mark.parametrize("floor", [0.0, -1.0, float("nan")])
def test_bad_floor_is_refused(floor):
    with pytest.raises(ValueError, match="floor"):
        TemplateCurriculum(TEMPLATES, floor=floor)


def test_draw_tasks_gives_train_tasks_of_the_drawn_template():
    family = FinanceEnv.family
    weights = np.array([t == "sell_all" for t in family.templates], dtype=float)
    rng = np.random.default_rng(0)
    indices = draw_tasks(family, rng, 6, weights)
    assert len(set(indices)) == 6
    assert {family.task("train", i).template for i in indices} == {"sell_all"}
    again = draw_tasks(family, np.random.default_rng(0), 6, weights)
    assert again == indices
