"""PNG learning curves in ``RUN_DIR/plots/`` (written at the end of every run; ``roll plot``
redraws them). The panels are the report's (``run_data.curve_panels``), drawn with matplotlib's
Agg backend, so no display is needed."""
from __future__ import annotations

import math
from pathlib import Path

from roll.utils.logging import get_logger
from roll.viewer.run_data import RunData, curve_panels, load_run

logger = get_logger("roll.viewer.plots")

PLOT_DIR = "plots"
OVERVIEW = "learning_curves.png"


def _draw(ax, panel: dict) -> None:
    from matplotlib.ticker import MaxNLocator

    for s in panel["series"]:
        style = "--" if s["split"].startswith("val") else "-"
        ax.plot(s["x"], s["y"], style, marker="o", markersize=2.5, linewidth=1.4, label=s["name"])
    ax.set_title(panel["title"], fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
    if len(panel["series"]) <= 8:
        ax.legend(fontsize=7)


def write_plots(run_dir: Path | str, data: RunData | None = None) -> list[Path]:
    """One PNG per panel plus an overview of all of them; returns the files written.
    A run with no metrics yet writes nothing (and says so in the log)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    data = data or load_run(run_dir, max_trajectory_steps=0)
    panels = curve_panels(data.metrics)
    out_dir = data.run_dir / PLOT_DIR
    if not panels:
        logger.info("no metrics in %s yet: no plots written", data.run_dir)
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for panel in panels:
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
        try:
            _draw(ax, panel)
            # fixed margins: tight_layout would measure every label again, the slow part of a plot
            fig.subplots_adjust(left=0.13, right=0.97, top=0.9, bottom=0.15)
            path = out_dir / f"{panel['id']}.png"
            fig.savefig(path)
            written.append(path)
        finally:
            plt.close(fig)
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    height = 3.4 * rows + 0.8  # inches: rows of panels plus the title
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, height), dpi=100, squeeze=False)
    try:
        for k, ax in enumerate(axes.flat):
            if k < len(panels):
                _draw(ax, panels[k])
            else:
                ax.axis("off")
        fig.suptitle(f"{data.name}: learning curves", fontsize=12, y=1 - 0.15 / height)
        fig.subplots_adjust(left=0.06, right=0.98, top=1 - 0.8 / height, bottom=0.5 / height, hspace=0.45, wspace=0.22)
        path = out_dir / OVERVIEW
        fig.savefig(path)
        written.append(path)
    finally:
        plt.close(fig)
    return written
