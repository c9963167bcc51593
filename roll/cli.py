"""The `roll` command (also `python -m roll`).

Subcommands load their implementations lazily by entry-point string, so `roll/` never
imports `envs/` or `pipelines/` code statically (a test enforces that).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from roll import __version__
from roll.config.validate import ConfigError
from roll.errors import RollError, unwrap
from roll.registry import REGISTRIES, RegistryError, load_entry_point

ENVS_PACKAGE = "roll.envs"


def _import_envs() -> None:
    importlib.import_module(ENVS_PACKAGE)


def _load(args: argparse.Namespace):
    from roll.config import load_config

    cfg = load_config(args.config, args.overrides)
    for module in cfg.imports:
        importlib.import_module(module)
    return cfg


def cmd_run(args: argparse.Namespace) -> int:
    from roll.registry import PIPELINES

    cfg = _load(args)
    if cfg.ray.address is None:  # a local cluster is this machine: check the plan before starting anything
        load_entry_point("roll.distributed.resource_pool:validate_plan")(cfg)
    pipeline_cls = PIPELINES.get(cfg.pipeline)
    pipeline = pipeline_cls(cfg)
    pipeline.run()
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    plan_fn = load_entry_point("roll.distributed.resource_pool:print_plan")
    cfg = _load(args)
    return 0 if plan_fn(cfg) else 1


def cmd_model_tiny(args: argparse.Namespace) -> int:
    build = load_entry_point("roll.models.tiny:save_tiny_model")
    path = build(args.out, size=args.size, seed=args.seed)
    print(f"tiny model ({args.size}) written to {path}")
    return 0


def _env_rows() -> list[tuple[str, str, str]]:
    import gymnasium

    _import_envs()
    rows = []
    for env_id, spec in sorted(gymnasium.registry.items()):
        if spec.namespace != "roll" and not getattr(spec, "kwargs", {}).get("text_env", False):
            continue
        entry = spec.entry_point if isinstance(spec.entry_point, str) else repr(spec.entry_point)
        kwargs = ", ".join(f"{k}={v!r}" for k, v in sorted(spec.kwargs.items()))
        rows.append((env_id, entry, kwargs))
    return rows


def cmd_envs_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="registered environments")
    for col in ("id", "entry point", "kwargs"):
        table.add_column(col)
    for row in _env_rows():
        table.add_row(*row)
    Console().print(table)
    return 0


def cmd_envs_play(args: argparse.Namespace) -> int:
    _import_envs()
    for module in args.imports:
        importlib.import_module(module)
    play = load_entry_point("roll.envs.play:play")
    kwargs: dict[str, Any] = {}
    for item in args.kwargs:
        import yaml

        key, _, value = item.partition("=")
        kwargs[key] = yaml.safe_load(value)
    return play(args.env_id, seed=args.seed, env_kwargs=kwargs) or 0


def cmd_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    kinds = [args.kind] if args.kind else ["envs", *REGISTRIES]
    console = Console()
    for kind in kinds:
        table = Table(title=kind)
        if kind == "envs":
            table.add_column("id")
            table.add_column("entry point")
            for env_id, entry, _ in _env_rows():
                table.add_row(env_id, entry)
        elif kind in REGISTRIES:
            table.add_column("id")
            table.add_column("entry point")
            table.add_column("description")
            for e in REGISTRIES[kind].entries():
                table.add_row(e.id, e.entry_point, e.doc)
        else:
            print(f"unknown kind {kind!r}; choose from envs, {', '.join(REGISTRIES)}", file=sys.stderr)
            return 2
        console.print(table)
    return 0


def cmd_data_demos(args: argparse.Namespace) -> int:
    return load_entry_point("roll.pipelines.sft_data:main")(args.args)


def cmd_view(args: argparse.Namespace) -> int:
    return load_entry_point("roll.viewer.cli:cmd_view")(args)


def cmd_plot(args: argparse.Namespace) -> int:
    return load_entry_point("roll.viewer.cli:cmd_plot")(args)


def cmd_version(args: argparse.Namespace) -> int:
    print(f"roll {__version__}")
    return 0


def cmd_check_parity(args: argparse.Namespace) -> int:
    check = load_entry_point("roll.distributed.parity:main")
    cfg = _load(args)
    return check(cfg)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roll", description="RL for LLMs: agentic multi-turn RL and multi-domain RLVR.")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("config", help="pipeline YAML")
        p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. actor_train.training_args.lr=1e-5")

    p = sub.add_parser("run", help="run a pipeline")
    with_config(p)
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("plan", help="print placement and batch arithmetic; fail on problems")
    with_config(p)
    p.set_defaults(fn=cmd_plan)

    p = sub.add_parser("model", help="model utilities")
    msub = p.add_subparsers(dest="model_command", required=True)
    t = msub.add_parser("tiny", help="build the local tiny Qwen-style model and tokenizer")
    t.add_argument("--out", required=True)
    t.add_argument("--size", default="tiny", choices=["tiny", "small", "medium"])
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(fn=cmd_model_tiny)

    p = sub.add_parser("envs", help="environments")
    esub = p.add_subparsers(dest="envs_command", required=True)
    e = esub.add_parser("list", help="list registered environments with their kwargs")
    e.set_defaults(fn=cmd_envs_list)
    e = esub.add_parser("play", help="play an environment in the terminal")
    e.add_argument("env_id")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--kwargs", nargs="*", default=[], help="env kwargs as key=value")
    e.add_argument("--import", dest="imports", nargs="*", default=[], help="modules that register envs")
    e.set_defaults(fn=cmd_envs_play)

    p = sub.add_parser("list", help="list registry entries")
    p.add_argument("kind", nargs="?", help=f"envs or one of: {', '.join(REGISTRIES)}")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("check", help="correctness checks")
    csub = p.add_subparsers(dest="check_command", required=True)
    c = csub.add_parser("parity", help="train/infer logprob parity of a config's backends")
    with_config(c)
    c.set_defaults(fn=cmd_check_parity)

    p = sub.add_parser("data", help="data generators")
    dsub = p.add_subparsers(dest="data_command", required=True)
    d = dsub.add_parser("demos", help="SFT demonstrations from the envs' expert agents (see --help)", add_help=False)
    d.add_argument("args", nargs=argparse.REMAINDER)
    d.set_defaults(fn=cmd_data_demos)

    p = sub.add_parser("view", help="an offline HTML report of a run: curves, trajectories, tokens")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="HTML file to write (default RUN_DIR/report.html)")
    p.add_argument("--serve", action="store_true", help="serve the report on localhost")
    p.add_argument("--port", type=int, default=8765)
    p.set_defaults(fn=cmd_view)

    p = sub.add_parser("plot", help="redraw a run's PNG learning curves into RUN_DIR/plots/")
    p.add_argument("run_dir")
    p.set_defaults(fn=cmd_plot)

    p = sub.add_parser("version", help="print the version")
    p.set_defaults(fn=cmd_version)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except Exception as e:
        expected = unwrap(e)
        if not isinstance(expected, RollError):
            raise
        print(f"roll: {expected}", file=sys.stderr)
        return 2 if isinstance(expected, (ConfigError, RegistryError)) else expected.exit_code
    except KeyboardInterrupt:
        print("roll: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
