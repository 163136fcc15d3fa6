"""Result files a person would rather look at: CSV, markdown tables and PNG curves."""

from __future__ import annotations

import csv
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
