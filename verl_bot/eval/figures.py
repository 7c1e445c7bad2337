"""Paper-style figures (matplotlib, Agg) of the evaluation reports.

- :func:`compile_rate_figure`: a training metric (default ``reward/solved/mean``, the per-step share of rollouts
  the reward server judged compiled/correct) over training steps, one line per run, read from the JSONL that
  verl's ``file`` logger writes (``records.read_metric``; drawn by :func:`plot_runs`).
- :func:`winrate_figure`: one horizontal bar per comparison (winrate JSON), split into A wins / ties / B wins,
  with the win rate written next to it.
- :func:`passk_figure`: pass@k over k (log2 axis), one line per run (passk JSON).

Each returns what it drew, read back from the figure (``{series label: data}``), for the JSON next to the PNG.
"""

from __future__ import annotations

from pathlib import Path

from verl_bot.eval.records import EvalError, read_metric


def _pyplot():
    """matplotlib.pyplot on the Agg backend; EvalError when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise EvalError("plot needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def metrics_file(path: str | Path) -> Path:
    """The verl file-logger JSONL of a run: ``path`` itself, or ``path/metrics.jsonl`` for a run directory."""
    path = Path(path)
    path = path / "metrics.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise EvalError(f"{path}: no such metrics file (verl's file logger JSONL)")
    return path


def compile_rate_figure(
    runs: dict[str, str | Path],
    out_png: Path,
    metric: str = "reward/solved/mean",
    title: str | None = None,
    ylabel: str | None = None,
) -> dict:
    """One line per run: ``metric`` per training step. EvalError when a run has no step with the metric.

    ``ylabel`` default: "compile rate" for ``reward/solved/mean``, else the metric key.
    """

    curves = {}
    for name, path in runs.items():
        try:
            curves[name] = read_metric(metrics_file(path), metric)
        except ValueError as e:
            raise EvalError(f"{path}: not a verl file-logger JSONL ({e})") from None
        if not curves[name][0]:
            raise EvalError(f"{path}: no step logs metric {metric!r}")
    percent = all(0.0 <= v <= 1.0 for _, values in curves.values() for v in values)
    ylabel = ylabel or ("compile rate" if metric == "reward/solved/mean" else metric)
    return plot_runs(curves, out_png, title or f"{ylabel} over training", ylabel=ylabel, percent=percent)


def winrate_figure(reports: dict[str, dict], out_png: Path, title: str = "pairwise VLM win rate") -> dict:
    """Stacked bars per comparison: A wins, ties, B wins (shares of pairs); win rate (ties count 0.5) as text."""
    plt = _pyplot()
    labels = list(reports)
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(labels) + 1.6))
    left = [0.0] * len(labels)
    for part, colour, label in (
        ("wins", "#2b6cb0", "A wins"),
        ("ties", "#a0aec0", "ties"),
        ("losses", "#e53e3e", "B wins"),
    ):
        widths = [reports[k][part] / reports[k]["n_pairs"] for k in labels]
        ax.barh(labels, widths, left=left, color=colour, label=label)
        left = [a + w for a, w in zip(left, widths, strict=True)]
    for y, k in enumerate(labels):
        ax.text(1.01, y, f"{reports[k]['win_rate']:.1%}", va="center")
    ax.set_xlim(0, 1)
    ax.axvline(0.5, color="black", linewidth=0.8, linestyle="--")
    ax.invert_yaxis()
    ax.set_xlabel("share of pairs (win rate of A at the right)")
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    fig.savefig(out_png, dpi=150, bbox_inches="tight")
    drawn = {c.get_label(): [round(float(p.get_width()), 6) for p in c.patches] for c in ax.containers}
    plt.close(fig)
    return {"comparisons": labels, "bars": drawn, "win_rate": {k: reports[k]["win_rate"] for k in labels}}


def _save_lines(fig, ax, out_png: Path, labels: tuple[str, str, str], percent: bool, dpi: int) -> dict:
    """Label, grid, legend and save a line plot; returns its lines read back: {label: {"x": [...], "y": [...]}}.

    ``labels``: (x label, y label, title); ``percent``: the y axis as % of 1.
    """
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    if percent:
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(labels[2])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=dpi)
    drawn = {
        ln.get_label(): {"x": list(map(float, ln.get_xdata())), "y": list(map(float, ln.get_ydata()))}
        for ln in ax.get_lines()
    }
    plt.close(fig)
    return drawn


def plot_runs(
    curves: dict[str, tuple[list[int], list[float]]],
    out_png: Path,
    title: str,
    ylabel: str = "mean global score G",
    percent: bool = False,
) -> dict[str, dict[str, list[float]]]:
    """One line per run: a metric over training steps (``curves``: {run: (steps, values)}); returns what it drew."""
    import matplotlib.ticker

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (steps, values) in curves.items():
        ax.plot(steps, values, marker="o", markersize=3, label=name)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    return _save_lines(fig, ax, out_png, ("training step", ylabel, title), percent, dpi=120)


def passk_figure(reports: dict[str, dict], out_png: Path, title: str = "pass@k") -> dict:
    """One line per run: pass@k over k (log2 x axis)."""
    import matplotlib.ticker

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, rep in reports.items():
        ks = sorted(int(k.split("@")[1]) for k in rep["pass@k"])
        ax.plot(ks, [rep["pass@k"][f"pass@{k}"] for k in ks], marker="o", label=name)
    ax.set_xscale("log", base=2)
    all_k = sorted({int(k.split("@")[1]) for rep in reports.values() for k in rep["pass@k"]})
    ax.set_xticks(all_k, [str(k) for k in all_k])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    return _save_lines(fig, ax, out_png, ("k", "pass@k", title), percent=True, dpi=150)
