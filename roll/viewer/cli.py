"""``roll view`` and ``roll plot`` (wired in roll/cli.py)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from roll.viewer.plots import write_plots
from roll.viewer.report import build_report
from roll.viewer.run_data import RunDirError

CHAIN_STATE = "chain_state.json"
"""Written by a chain (pipelines/chain.py) into its output_dir; its stages run in subfolders."""


def chain_stage_dirs(run_dir: Path | str) -> list[Path] | None:
    """The folders of a chain's pipeline stages in stage order, demonstration stages left out
    (None: not a chain's folder)."""
    state = Path(run_dir) / CHAIN_STATE
    if not state.is_file():
        return None
    try:
        stages = json.loads(state.read_text()).get("stages", {})
    except (OSError, ValueError, AttributeError) as e:
        raise RunDirError(f"{state}: unreadable chain state ({e})") from e
    return [Path(run_dir) / name for name, st in stages.items()
            if (Path(run_dir) / name).is_dir() and st.get("kind") != "demos"]


def _view_chain(args: argparse.Namespace, stage_dirs: list[Path], max_steps: int | None) -> int:
    """One report per pipeline stage that has run; ``--serve`` serves the last one."""
    if args.out:
        raise RunDirError(f"{args.run_dir} is a chain's folder: --out names one report; view a stage "
                          f"({', '.join(str(d) for d in stage_dirs)}) to choose where it goes")
    viewable = []
    for d in stage_dirs:
        try:
            print(f"report of stage {d.name}: {build_report(d, None, max_trajectory_steps=max_steps)}")
            viewable.append(d)
        except RunDirError:
            continue
    if not viewable:
        raise RunDirError(f"{args.run_dir} is a chain's folder with no stage run yet")
    if args.serve:
        args.run_dir = str(viewable[-1])
        return cmd_view(args)
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    max_steps = getattr(args, "max_steps", 40) or None  # 0 on the command line: every dumped step
    stage_dirs = chain_stage_dirs(args.run_dir)
    if stage_dirs is not None:
        return _view_chain(args, stage_dirs, max_steps)
    if not args.serve:
        path = build_report(args.run_dir, args.out, max_trajectory_steps=max_steps)
        print(f"report: {path}")
        return 0
    from roll.viewer.server import make_server

    if args.out:
        print(f"report: {build_report(args.run_dir, args.out, max_trajectory_steps=max_steps)}")
    server = make_server(args.run_dir, port=args.port, max_trajectory_steps=max_steps)
    host, port = server.server_address[:2]
    print(f"serving the report of {args.run_dir} at http://{host}:{port}/ (rebuilt on each reload; Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    written = write_plots(args.run_dir)
    if not written:
        print(f"no metrics in {args.run_dir} yet: nothing to plot")
        return 0
    print(f"{len(written)} plots in {written[0].parent}")
    return 0
