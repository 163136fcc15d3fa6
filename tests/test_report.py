"""The paired comparison of two evaluations (hand-computed binomial tails) and the table writers."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rehearsal_gym.core.report import paired_sign_test, write_table


def test_sign_test_counts_only_changed_tasks():
    # gained: tasks 0, 1; lost: task 3; task 2 stays a success. n=3, k=1: 2 * (1 + 3) / 8 > 1 -> 1.
    assert paired_sign_test([0, 0, 1, 1], [1, 1, 1, 0]) == {"gained": 2, "lost": 1, "p_value": 1.0}


@pytest.mark.parametrize(
    ("gained", "lost", "p"),
    [
        (5, 0, 2 / 32),  # 2 * C(5,0) / 2^5
        (10, 0, 2 / 1024),
        (8, 2, 2 * (1 + 10 + 45) / 1024),  # 2 * (C(10,0)+C(10,1)+C(10,2)) / 2^10 = 0.109375
        (0, 0, 1.0),  # nothing changed
    ],
)
def test_sign_test_exact_tail(gained, lost, p):
    before = [0] * gained + [1] * lost + [1, 0]
    after = [1] * gained + [0] * lost + [1, 0]
    got = paired_sign_test(before, after)
    assert (got["gained"], got["lost"]) == (gained, lost)
    assert got["p_value"] == pytest.approx(p)


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60))
def test_sign_test_is_symmetric_and_a_probability(pairs):
    before = [int(b) for b, _ in pairs]
    after = [int(a) for _, a in pairs]
    forward, backward = paired_sign_test(before, after), paired_sign_test(after, before)
    assert forward["gained"] == backward["lost"] and forward["lost"] == backward["gained"]
    assert forward["p_value"] == pytest.approx(backward["p_value"])
    assert 0.0 < forward["p_value"] <= 1.0


def test_sign_test_needs_the_same_tasks():
    with pytest.raises(ValueError, match="same tasks"):
        paired_sign_test([1, 0], [1])


def test_write_table_writes_csv_and_markdown(tmp_path):
    md = write_table(
        [{"env": "ToolCall-v0", "success": 0.5}, {"env": "Retail-v0", "success": 0.125}], tmp_path, "t"
    )
    assert md.splitlines()[2] == "| ToolCall-v0 | 50.0% |"
    assert (tmp_path / "t.csv").read_text().splitlines() == [
        "env,success",
        "ToolCall-v0,0.5",
        "Retail-v0,0.125",
    ]
    assert (tmp_path / "t.md").read_text() == md + "\n"


def test_seed_tables_mean_over_seeds_and_keep_the_paired_test():
    from rehearsal_gym.core.report import seed_tables

    columns = {"real": "PPO real", "rehearsed": "PPO rehearsed", "seed": "PPO + SEED"}
    results = {
        ("ToolCall-v0", "real", 0): {
            "tasks": 300,
            "before": 0.5,
            "after": 0.6,
            "gained": 40,
            "lost": 10,
            "p_value": 0.00002,
        },
        ("ToolCall-v0", "real", 1): {"tasks": 300, "before": 0.5, "after": 0.5},
        ("ToolCall-v0", "seed", 0): {"tasks": 300, "before": 0.4, "after": 0.45},
    }
    runs, summary = seed_tables(results, columns)
    assert [r["gain (points)"] for r in runs] == ["+10.0", "+0.0", "+5.0"]
    assert runs[0]["tasks gained / lost"] == "40 / 10" and runs[1]["sign test p"] == "-"
    (row,) = summary
    assert row["warm start"] == 0.5  # the SEED run starts from the analyst warm start: not averaged in
    assert row["PPO real"] == "55.0% (+5.0, 2 seeds)" and row["PPO + SEED"] == "45.0% (+5.0, 1 seed)"
    assert row["PPO rehearsed"] == "-"


def _result(outcomes, templates, env="Retail-v0", first_task=0):
    per = {
        t: sum(o for o, u in zip(outcomes, templates, strict=True) if u == t) / templates.count(t)
        for t in set(templates)
    }
    return {
        "env": env,
        "first_task": first_task,
        "success": sum(outcomes) / len(outcomes),
        "outcomes": outcomes,
        "per_template": per,
    }


def test_comparison_rows_pair_every_model_with_the_first():
    from rehearsal_gym.core.report import comparison_rows

    templates = ["cancel", "status", "status", "cancel"]
    rows = comparison_rows(
        {
            "warm": _result([1, 0, 0, 0], templates),
            "ppo": _result([1, 1, 1, 0], templates),
            "bad": _result([0, 0, 0, 0], templates[:3] + ["refund"]),
        }
    )
    assert [r["model"] for r in rows] == ["warm", "ppo", "bad"]
    assert (rows[0]["gained"], rows[0]["lost"], rows[0]["p"]) == (0, 0, "1.000")
    assert (rows[1]["success"], rows[1]["gained"], rows[1]["lost"], rows[1]["p"]) == (0.75, 2, 0, "0.500")
    assert (rows[2]["gained"], rows[2]["lost"]) == (0, 1)
    assert rows[1]["status"] == 1.0 and rows[1]["cancel"] == 0.5
    assert rows[0]["refund"] != rows[0]["refund"]  # NaN: the template did not occur in that evaluation
    assert list(rows[0]) == ["model", "success", "gained", "lost", "p", "cancel", "refund", "status"]


def test_comparison_rows_refuse_evaluations_of_other_tasks():
    from rehearsal_gym.core.report import comparison_rows

    a = _result([1, 0], ["x", "y"])
    with pytest.raises(ValueError, match="other tasks"):
        comparison_rows({"a": a, "b": _result([1, 0], ["x", "y"], first_task=100)})
    with pytest.raises(ValueError, match="other tasks"):
        comparison_rows({"a": a, "b": _result([1, 0], ["x", "y"], env="Finance-v0")})
    with pytest.raises(ValueError, match="same tasks"):
        comparison_rows({"a": a, "b": _result([1, 0, 1], ["x", "y", "x"])})
    with pytest.raises(ValueError, match="at least one"):
        comparison_rows({})
