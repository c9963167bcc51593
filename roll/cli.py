"""The `roll` command (also `python -m roll`).

Subcommands load their implementations lazily by entry-point string, so `roll/` never
imports `envs/` or `pipelines/` code statically (a test enforces that).

Failures: an expected one (a :class:`roll.errors.RollError`: config, registry, data, worker,
checkpoint, run errors, also inside a Ray task error; or an OSError about a path, such as a
full disk or an unwritable directory) is one message on stderr and an exit code (2 for
config and registry errors). ``roll run`` also writes ``<output_dir>/run.log``: the driver's
log lines and the traceback of any failure; the traceback reaches the console only with
``--verbose`` (which also sets ``ROLL_VERBOSE=1`` for the run's own console output). An
unexpected exception (a bug) is printed with its traceback.
"""
from __future__ import annotations

import argparse
import datetime
import errno
import importlib
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from roll import __version__
from roll.config.validate import ConfigError
from roll.errors import RollError, unwrap
from roll.registry import REGISTRIES, RegistryError, load_entry_point

ENVS_PACKAGE = "roll.envs"
RUN_LOG = "run.log"
#: errno values of an OSError that is the user's environment, not a bug (full disk, permissions, ...)
_PATH_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR,
                errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.EMFILE, errno.ENFILE}


def _import_envs() -> None:
    importlib.import_module(ENVS_PACKAGE)


def _import_modules(modules: list[str]) -> None:
    """Import user modules (``--import``); a failure is a config error naming the module."""
    problems = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:  # user code: report it like any config problem
            problems.append(f"--import {module}: cannot import it: {type(e).__name__}: {e}")
    if problems:
        raise ConfigError(problems)


def _load(args: argparse.Namespace):
    from roll.config import load_config

    return load_config(args.config, args.overrides)


class _RunLog:
    """``<output_dir>/run.log``: the driver's log lines (the ``roll`` loggers) and the traceback
    of a failure. Appends, so a resumed run keeps the log of the runs before it."""

    def __init__(self, output_dir: str):
        from roll.utils.logging import LOG_FORMAT, setup_logging

        setup_logging()
        self.path = Path(output_dir).expanduser().resolve() / RUN_LOG
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(self.path, encoding="utf-8")
        self.handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
        logging.getLogger("roll").addHandler(self.handler)
        self.write(f"==== roll {__version__}: {' '.join(sys.argv)} (pid {os.getpid()}, "
                   f"{datetime.datetime.now().isoformat(timespec='seconds')})\n")

    def write(self, text: str) -> None:
        self.handler.acquire()
        try:
            self.handler.stream.write(text)
            self.handler.flush()
        finally:
            self.handler.release()

    def __enter__(self) -> "_RunLog":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(exc)  # a failure is written to the log and still raised (returns None)

    def close(self, exc: BaseException | None = None) -> None:
        if exc is not None:
            self.write("run failed:\n" + "".join(traceback.format_exception(exc)))
        else:
            self.write("run finished\n")
        logging.getLogger("roll").removeHandler(self.handler)
        self.handler.close()


def cmd_run(args: argparse.Namespace) -> int:
    from roll.config.preflight import check
    from roll.registry import PIPELINES

    if args.verbose:
        os.environ["ROLL_VERBOSE"] = "1"  # the hook for the run's console output
    from roll.utils.console import quiet_console

    quiet_console()  # roll's INFO lines to run.log only, library progress bars off (roll/utils/console.py)
    if load_entry_point("roll.pipelines.chain:is_chain_file")(args.config):
        return _run_chain(args)
    cfg = _load(args)
    # a local cluster is this machine, so its placement can be checked before anything starts;
    # a remote cluster's is checked by the pipeline once connected
    check(cfg, placement=cfg.ray.address is None)
    with _RunLog(cfg.output_dir) as log:
        args.run_log = log.path
        pipeline = PIPELINES.get(cfg.pipeline)(cfg)
        pipeline.run()
    return 0


def _run_chain(args: argparse.Namespace) -> int:
    """``roll run CHAIN.yaml``: the stages in order (roll/pipelines/chain.py), one run.log."""
    chain, stages = load_entry_point("roll.pipelines.chain:load_chain")(args.config, args.overrides)
    with _RunLog(chain.output_dir) as log:
        args.run_log = log.path
        load_entry_point("roll.pipelines.chain:run_chain")(chain, stages)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from roll.config.preflight import preflight

    if load_entry_point("roll.pipelines.chain:is_chain_file")(args.config):
        return load_entry_point("roll.pipelines.chain:main_plan")(args.config, args.overrides)
    plan_fn = load_entry_point("roll.distributed.resource_pool:print_plan")
    cfg = _load(args)
    return 0 if plan_fn(cfg, problems=preflight(cfg)) else 1


def cmd_model_tiny(args: argparse.Namespace) -> int:
    build = load_entry_point("roll.models.tiny:save_tiny_model")
    path = build(args.out, size=args.size, seed=args.seed)
    print(f"tiny model ({args.size}) written to {path}")
    return 0


def _env_rows(imports: list[str] = ()) -> list[tuple[str, str, str]]:
    """roll's envs, text envs, and every env the ``imports`` modules register."""
    import gymnasium

    _import_envs()
    before = set(gymnasium.registry)
    _import_modules(list(imports))
    added = set(gymnasium.registry) - before
    rows = []
    for env_id, spec in sorted(gymnasium.registry.items()):
        text_env = (getattr(spec, "kwargs", None) or {}).get("text_env", False)
        if spec.namespace != "roll" and not text_env and env_id not in added:
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
    for row in _env_rows(args.imports):
        table.add_row(*row)
    Console().print(table)
    return 0


def cmd_envs_check(args: argparse.Namespace) -> int:
    _import_envs()
    _import_modules(args.imports)
    check_text_env = load_entry_point("roll.envs.checker:check_text_env")
    check_error = load_entry_point("roll.envs.checker:EnvCheckError")
    kwargs = _kwargs(args.kwargs)
    try:
        report = check_text_env(args.env_id, env_kwargs=kwargs, episodes=args.episodes)
    except check_error as e:
        print(f"FAILED {e}")
        return 1
    for name in report.passed:
        print(f"ok    {name}")
    for note in report.notes:
        print(f"note  {note}")
    print(f"{args.env_id} passed the text-env checks")
    return 0


def _kwargs(items: list[str]) -> dict[str, Any]:
    import yaml

    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"--kwargs {item!r} must look like key=value"])
        kwargs[key] = yaml.safe_load(value)
    return kwargs


def cmd_envs_play(args: argparse.Namespace) -> int:
    _import_envs()
    _import_modules(args.imports)
    play = load_entry_point("roll.envs.play:play")
    return play(args.env_id, seed=args.seed, env_kwargs=_kwargs(args.kwargs)) or 0


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
            for env_id, entry, _ in _env_rows(args.imports):
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
    from roll.config.preflight import import_user_modules

    check = load_entry_point("roll.distributed.parity:main")
    cfg = _load(args)
    problems = import_user_modules(cfg)
    if problems:
        raise ConfigError(problems)
    return check(cfg)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roll", description="RL for LLMs: agentic multi-turn RL and multi-domain RLVR.")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("config", help="pipeline YAML")
        p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. actor_train.training_args.lr=1e-5")

    p = sub.add_parser("run", help="run a pipeline (after the same pre-flight as plan)")
    with_config(p)
    p.add_argument("--verbose", "-v", action="store_true",
                   help="the full metric dump, INFO logs, Ray worker output and library warnings on the console, and "
                        "the traceback of a failure (always in OUTPUT_DIR/run.log and OUTPUT_DIR/logs)")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("plan", help="pre-flight checks, placement and batch arithmetic; fail on problems (no Ray)")
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
    e.add_argument("--import", dest="imports", nargs="*", default=[], help="modules that register envs (shown too)")
    e.set_defaults(fn=cmd_envs_list)
    e = esub.add_parser("check", help="run the text-env checker on an environment")
    e.add_argument("env_id")
    e.add_argument("--kwargs", nargs="*", default=[], help="env kwargs as key=value")
    e.add_argument("--import", dest="imports", nargs="*", default=[], help="modules that register envs")
    e.add_argument("--episodes", type=int, default=3, help="full episodes per kind of play (random, garbage, mixed)")
    e.set_defaults(fn=cmd_envs_check)
    e = esub.add_parser("play", help="play an environment in the terminal")
    e.add_argument("env_id")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--kwargs", nargs="*", default=[], help="env kwargs as key=value")
    e.add_argument("--import", dest="imports", nargs="*", default=[], help="modules that register envs")
    e.set_defaults(fn=cmd_envs_play)

    p = sub.add_parser("list", help="list registry entries")
    p.add_argument("kind", nargs="?", help=f"envs or one of: {', '.join(REGISTRIES)}")
    p.add_argument("--import", dest="imports", nargs="*", default=[], help="modules that register envs or entries")
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
    p.add_argument("--max-steps", type=int, default=40,
                   help="steps whose trajectories the report includes, spread over the run (0: all)")
    p.set_defaults(fn=cmd_view)

    p = sub.add_parser("plot", help="redraw a run's PNG learning curves into RUN_DIR/plots/")
    p.add_argument("run_dir")
    p.set_defaults(fn=cmd_plot)

    p = sub.add_parser("version", help="print the version")
    p.set_defaults(fn=cmd_version)
    return parser


def expected_failure(exc: BaseException) -> BaseException | None:
    """The expected failure inside ``exc`` (a RollError, or an OSError about a path), or None."""
    found = unwrap(exc)
    if isinstance(found, RollError):
        return found
    cur: BaseException | None = exc
    for _ in range(8):
        if cur is None:
            break
        if isinstance(cur, OSError) and (cur.errno in _PATH_ERRNOS or cur.filename is not None):
            return cur
        cur = getattr(cur, "cause", None) or cur.__cause__
    return None


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, RollError):
        where = f" {exc.filename}" if exc.filename is not None else ""
        return f"I/O error{where}: {exc.strerror or exc}"
    return str(exc)


def exit_code(exc: BaseException) -> int:
    if isinstance(exc, (ConfigError, RegistryError)):
        return 2
    return exc.exit_code if isinstance(exc, RollError) else 1


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    args = build_parser().parse_args(argv)
    verbose = getattr(args, "verbose", False)
    try:
        return args.fn(args)
    except Exception as e:
        expected = expected_failure(e)
        if expected is None:
            raise  # a bug: the full traceback is what is needed
        if verbose:
            traceback.print_exception(e, file=sys.stderr)
        print(f"roll: {_message(expected)}", file=sys.stderr)
        log = getattr(args, "run_log", None)
        if log is not None:
            print(f"roll: the traceback and the run's log are in {log}", file=sys.stderr)
        return exit_code(expected)
    except KeyboardInterrupt:
        print("roll: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
