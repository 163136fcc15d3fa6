"""Result files a person would rather look at: CSV, markdown tables and PNG curves."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path


def write_table(rows: Sequence[Mapping[str, object]], out_dir: Path, name: str) -> str:
    """Write rows as `name`.csv and `name`.md; return the markdown table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    with open(out_dir / f"{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    md = markdown_table(rows)
    (out_dir / f"{name}.md").write_text(md + "\n")
    return md


def paired_sign_test(before: Sequence[int], after: Sequence[int]) -> dict[str, float]:
    """Compare two evaluations of the same tasks, task by task (exact two-sided sign test, McNemar).

    Only the tasks whose outcome changed count: `gained` (failed before, succeeded after) and `lost`;
    `p_value` is the probability of a split at least this uneven if a change were equally likely to go
    either way. Far more sensitive than comparing two success rates, which carry the task-draw noise.
    """
    if len(before) != len(after):
        raise ValueError(f"paired_sign_test needs the same tasks: {len(before)} vs {len(after)} outcomes")
    gained = sum(1 for b, a in zip(before, after, strict=True) if a and not b)
    lost = sum(1 for b, a in zip(before, after, strict=True) if b and not a)
    n, k = gained + lost, min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n if n else 1.0
    return {"gained": gained, "lost": lost, "p_value": min(1.0, 2 * tail)}


def comparison_rows(results: Mapping[str, Mapping[str, object]]) -> list[dict[str, object]]:
    """One row per named evaluation of the same tasks (`rollout.evaluate` results): success, then the
    tasks gained and lost against the first one with the sign test's p-value, then success per template."""
    names = list(results)
    if not names:
        raise ValueError("comparison_rows needs at least one evaluation")
    base = results[names[0]]
    templates = sorted({t for r in results.values() for t in r["per_template"]})
    rows = []
    for name in names:
        r = results[name]
        if r["env"] != base["env"] or r.get("first_task", 0) != base.get("first_task", 0):
            raise ValueError(f"{name!r} was evaluated on other tasks than {names[0]!r}")
        test = paired_sign_test(base["outcomes"], r["outcomes"])
        rows.append(
            {
                "model": name,
                "success": r["success"],
                "gained": test["gained"],
                "lost": test["lost"],
                "p": f"{test['p_value']:.3f}",
                **{t: r["per_template"].get(t, float("nan")) for t in templates},
            }
        )
    return rows


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else "<0.001"


def seed_tables(
    results: Mapping[tuple[str, str, int], Mapping[str, object]], columns: Mapping[str, str]
) -> tuple[list[dict], list[dict]]:
    """Per-run rows and per-env summary rows (mean over seeds of each setting, with its gain) from
    ``{(env, setting, seed): train result}`` (`agents.train.train`'s result.json). `columns` names
    the summary column of each setting; the "seed" setting (PPO + SEED, which starts from its
    analyst) is left out of the start's mean."""
    runs = [
        {
            "env": env,
            "setting": setting,
            "seed": seed,
            "tasks": r["tasks"],
            "before": r["before"],
            "after": r["after"],
            "gain (points)": f"{100 * (r['after'] - r['before']):+.1f}",
            "tasks gained / lost": f"{r['gained']} / {r['lost']}" if "gained" in r else "-",
            "sign test p": _p(r["p_value"]) if "p_value" in r else "-",
        }
        for (env, setting, seed), r in sorted(results.items())
    ]
    summary = []
    for env in sorted({k[0] for k in results}):
        warm = [r["before"] for (e, s, _), r in results.items() if e == env and s != "seed"]
        row: dict[str, object] = {"env": env, "warm start": sum(warm) / len(warm) if warm else "-"}
        for setting, column in columns.items():
            got = [r for (e, s, _), r in results.items() if e == env and s == setting]
            if not got:
                row[column] = "-"
                continue
            after = sum(r["after"] for r in got) / len(got)
            gain = sum(r["after"] - r["before"] for r in got) / len(got)
            row[column] = f"{after:.1%} ({100 * gain:+.1f}, {len(got)} seed{'s' * (len(got) > 1)})"
        summary.append(row)
    return runs, summary


def markdown_table(rows: Sequence[Mapping[str, object]]) -> str:
    columns = list(rows[0])
    fmt = [lambda v: f"{v:.1%}" if isinstance(v, float) else str(v)]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt[0](r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def plot_curve(
    values: Sequence[float], path: Path, title: str, ylabel: str, smooth: int = 20, xlabel: str = "step"
) -> None:
    """A line plot of `values` (raw and moving average) saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(values, alpha=0.3, label="per step")
    if len(values) >= smooth:
        ax.plot(
            range(smooth - 1, len(values)),
            np.convolve(values, np.ones(smooth) / smooth, "valid"),
            label="mean",
        )
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
