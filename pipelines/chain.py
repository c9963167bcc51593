"""Chains: several stages in one YAML (``stages:``), run in order by ``roll run``, each
feeding the next (a demonstrations file becomes the SFT data, a trained model the next
stage's ``pretrain``).

A stage is a pipeline config (a file, inline keys, or both) and a kind: ``run`` trains
(output: ``final_model``), ``eval`` runs the validation rounds of an untrained model
(output: ``eval.json``), ``demos`` writes expert demonstrations (output: ``demos.jsonl``).
Every stage runs in ``<chain output_dir>/<stage name>`` in this process (one Ray cluster for
the whole chain). What happens on a rerun is decided per stage from
``<output_dir>/chain_state.json``:

- done, same resolved config, output still there, nothing before it ran again: skipped;
- started but not finished (interrupted): resumed from its own latest checkpoint (a run
  stage's ``resume_from_checkpoint: true``), or, if that checkpoint is already its last
  step, recorded as done;
- anything else (never started, config changed, output gone, an earlier stage ran again):
  its directory is cleared and it runs from the start.

Every stage's config is built and pre-flighted before anything runs: a bad stage fails the
chain in seconds, before Ray starts (outputs of earlier stages that do not exist yet are the
only problems allowed).
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from roll.config.loader import load_config, parse_overrides
from roll.config.schema import ChainConfig, PipelineConfig, StageConfig
from roll.config.validate import ConfigError, build_dataclass, to_dict
from roll.errors import RunFailedError
from roll.utils.logging import get_logger

logger = get_logger("roll.pipelines.chain")

STATE_FILE = "chain_state.json"
SUMMARY_FILE = "summary.json"
OUTPUTS = {"run": "final_model", "eval": "eval.json", "demos": "demos.jsonl"}
"""What each kind of stage produces, inside its directory."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_chain_file(path: str | os.PathLike) -> bool:
    """A chain file has ``stages:`` at its top level (a pipeline config never does)."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return False  # the pipeline loader reports the file's problem
    return isinstance(data, dict) and "stages" in data


@dataclasses.dataclass
class Stage:
    """A stage of a loaded chain with its resolved pipeline config."""

    name: str
    spec: StageConfig
    dir: Path
    cfg: PipelineConfig
    source: str
    """The stage's config file (or "inline")."""
    upstream: Optional[str]
    """The stage whose output feeds this one, if any (with ``inputs``: the one feeding ``pretrain``,
    else the first)."""
    input_key: Optional[str]
    fingerprint: str = ""
    feeds: dict[str, str] = dataclasses.field(default_factory=dict)
    """Every config key fed by an earlier stage -> that stage."""

    @property
    def output(self) -> Path:
        return self.dir / OUTPUTS[self.spec.kind]


# ------------------------------------------------------------------------------ loading
def _dotlist(mapping: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Nested or dotted override keys -> ``key=value`` strings (values as JSON, which is YAML)."""
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            yield from _dotlist(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}={json.dumps(value)}"


def _pipeline_config(path: Optional[Path], overrides: list[str]) -> PipelineConfig:
    if path is not None:
        return load_config(path, overrides)
    # inline stage: the overrides on the schema defaults, resolved like a file
    base = {f.name: f.default for f in dataclasses.fields(PipelineConfig) if isinstance(f.default, (str, int, float, bool))}
    try:
        data = OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(base), parse_overrides(overrides)), resolve=True)
    except (OmegaConfBaseException, TypeError, ValueError) as e:  # OmegaConf raises bare TypeErrors on container clashes
        raise ConfigError([f"inline stage config: {e}"]) from None
    return build_dataclass(PipelineConfig, data)


def _upstream(names: list[str], specs: dict[str, StageConfig], i: int) -> Optional[str]:
    """The nearest earlier stage with an output another stage can take (demos or run)."""
    for j in range(i - 1, -1, -1):
        if specs[names[j]].kind in ("demos", "run"):
            return names[j]
    return None


def _feeds(names: list[str], specs: dict[str, StageConfig], i: int) -> dict[str, str] | str:
    """Config key -> the earlier stage whose output it receives, for stage ``i`` (its ``inputs``,
    else its ``input``); a string: the problem."""
    spec = specs[names[i]]
    if spec.inputs:
        wrong = [f"{k}: {v!r}" for k, v in spec.inputs.items()
                 if v not in names[:i] or specs[v].kind not in ("demos", "run")]
        if wrong:
            return (f"inputs: {', '.join(wrong)}: each must name an earlier demos or run stage "
                    f"(earlier: {[n for n in names[:i] if specs[n].kind in ('demos', 'run')]})")
        return dict(spec.inputs)
    upstream = _upstream(names, specs, i)
    key = spec.input
    if key == "auto":
        if upstream is None or spec.kind == "demos":
            return {}
        key = "data.train_files" if specs[upstream].kind == "demos" else "pretrain"
    if key is None:
        return {}
    if upstream is None:
        return f"input {key!r}: no earlier demos or run stage produces anything to feed it"
    return {key: upstream}


def load_chain(path: str | os.PathLike, overrides: list[str] = ()) -> tuple[ChainConfig, list[Stage]]:
    """The chain and its stages, each with its resolved config; every problem of every stage
    at once (a ConfigError, one line per problem, prefixed with the stage)."""
    chain = load_config(path, overrides, schema=ChainConfig)
    chain_file = Path(path).resolve()
    problems: list[str] = []
    if not chain.stages:
        raise ConfigError([f"{chain_file}: stages: a chain needs at least one stage"])
    out = Path(chain.output_dir).expanduser().resolve()
    names = list(chain.stages)
    stages: list[Stage] = []
    for i, name in enumerate(names):
        spec = chain.stages[name]
        where = f"stages.{name}"
        if not _NAME.match(name):
            problems.append(f"{where}: a stage name is a directory name (letters, digits, _ . -)")
            continue
        if spec.config is None and not spec.overrides:
            problems.append(f"{where}: give a `config` file, inline `overrides`, or both")
            continue
        feeds = _feeds(names, chain.stages, i)
        if isinstance(feeds, str):
            problems.append(f"{where}: {feeds}")
            continue
        stage_dir = out / name
        forced = [f"output_dir={json.dumps(str(stage_dir))}", f"seed={chain.seed}",
                  f"exp_name={json.dumps(f'{chain.exp_name}_{name}')}",
                  # an interrupted run stage continues from its own checkpoint (see module doc)
                  f"resume_from_checkpoint={'true' if spec.kind == 'run' else 'false'}"]
        for key, upstream in feeds.items():
            produced = out / upstream / OUTPUTS[chain.stages[upstream].kind]
            value = [str(produced)] if chain.stages[upstream].kind == "demos" else str(produced)
            forced.append(f"{key}={json.dumps(value)}")
        key = "pretrain" if "pretrain" in feeds else next(iter(feeds), None)
        upstream = feeds.get(key) if key else None
        cfg_path = None
        if spec.config is not None:
            cfg_path = Path(spec.config).expanduser()
            cfg_path = cfg_path if cfg_path.is_absolute() else (chain_file.parent / cfg_path).resolve()
        try:
            cfg = _pipeline_config(cfg_path, [*_dotlist(spec.overrides), *forced])
        except ConfigError as e:
            problems += [f"{where}: {p}" for p in e.errors]
            continue
        stages.append(Stage(name, spec, stage_dir, cfg, str(cfg_path) if cfg_path else "inline", upstream, key, feeds=feeds))
    if problems:
        raise ConfigError(problems)
    fingerprints: dict[str, str] = {}
    for st in stages:
        st.fingerprint = _fingerprint(st, ",".join(fingerprints.get(up, "") for up in st.feeds.values()))
        fingerprints[st.name] = st.fingerprint
    return chain, stages


def _fingerprint(st: Stage, upstream: str) -> str:
    """Changes when the stage's resolved config, its kind or demos options, or its input's
    fingerprint change: a changed stage and everything it feeds run again."""
    data = to_dict(st.cfg)
    data.pop("source_path", None)
    blob = json.dumps({"kind": st.spec.kind, "demos": to_dict(st.spec.demos), "cfg": data, "input": upstream},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------ pre-flight
def preflight_chain(stages: list[Stage], placement: bool = True) -> list[str]:
    """Every stage's pre-flight problems, except those about outputs of earlier stages (they
    do not exist before the chain runs); one line each, prefixed with the stage."""
    from roll.config.preflight import check

    future = {str(st.output) for st in stages}
    problems: list[str] = []
    for st in stages:
        try:
            check(st.cfg, placement=placement and st.spec.kind != "demos" and st.cfg.ray.address is None)
            found: list[str] = []
        except ConfigError as e:
            found = e.errors
        problems += [f"stages.{st.name}: {p}" for p in found if not any(f in p for f in future)]
        if st.spec.kind == "eval" and st.cfg.pipeline == "agentic" and st.cfg.val_env_manager is None:
            problems.append(f"stages.{st.name}: an eval stage runs validation rounds: set val_env_manager")
        if st.spec.kind == "eval" and st.cfg.pipeline != "agentic" and not st.cfg.data.val_files:
            problems.append(f"stages.{st.name}: an eval stage runs validation rounds: set data.val_files")
        if st.spec.kind == "demos":
            tags = st.spec.demos.tags or list(st.cfg.train_env_manager.tags) or list(st.cfg.custom_envs)
            unknown = [t for t in tags if t not in st.cfg.custom_envs]
            if not tags or unknown:
                problems.append(f"stages.{st.name}: demos need env tags of custom_envs "
                                f"(unknown: {unknown or 'none given'}; defined: {', '.join(st.cfg.custom_envs) or 'none'})")
    return problems


# ------------------------------------------------------------------------------ state
def read_state(out: Path) -> dict[str, Any]:
    path = out / STATE_FILE
    if not path.exists():
        return {"stages": {}}
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RunFailedError(f"{path}: unreadable chain state ({e}); remove it to run every stage again") from None
    if not isinstance(state, dict) or not isinstance(state.get("stages"), dict):
        raise RunFailedError(f"{path}: not a chain state file; remove it to run every stage again")
    return state


def write_state(out: Path, state: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, out / STATE_FILE)


def decide(st: Stage, record: Optional[dict[str, Any]], earlier_ran: bool) -> tuple[str, str]:
    """``(action, why)``: action is skip, resume or run (see the module doc)."""
    if record is None:
        return "run", "not run yet"
    if record.get("fingerprint") != st.fingerprint:
        return "run", "its config or input changed since it ran"
    if earlier_ran:
        return "run", "an earlier stage ran again"
    if record.get("status") == "done":
        if st.output.exists():
            return "skip", f"done, output {_rel(st.output)}"
        return "run", f"its output {_rel(st.output)} is missing"
    return "resume", "interrupted"


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


# ------------------------------------------------------------------------------ running
def _run_stage(st: Stage) -> None:
    cfg = st.cfg
    if st.spec.kind == "demos":
        from roll.pipelines.sft_data import generate

        st.dir.mkdir(parents=True, exist_ok=True)
        # the resolved stage config, so `roll data demos` on this file repeats the stage
        cfg_file = st.dir / "config.yaml"
        cfg_file.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        d = st.spec.demos
        stats = generate(str(cfg_file), str(st.output), d.episodes, d.epsilon, seed=cfg.seed, tags=d.tags or None)
        (st.dir / "demos_stats.json").write_text(json.dumps(stats, indent=1))
        rates = ", ".join(f"{t} {v['success_rate']:.0%}" for t, v in stats.items() if isinstance(v, dict))
        print(f"  {stats['rows']} samples; expert success {rates}", flush=True)
        return
    from roll.registry import PIPELINES

    pipeline = PIPELINES.get(cfg.pipeline)(cfg)
    if st.spec.kind == "run":
        pipeline.run()
        return
    try:  # eval: the pipeline's own validation rounds on its untrained model
        pipeline.setup()
        metrics = pipeline.validate(0)
    finally:
        pipeline.shutdown()
    st.output.write_text(json.dumps({"model": cfg.pretrain, "val_batch_size": cfg.val_batch_size,
                                     "metrics": metrics}, indent=1))


def _resume_action(st: Stage) -> tuple[str, str]:
    """What an interrupted stage does: a run stage resumes from its newest good checkpoint (or
    is done, if that checkpoint is its last step and the final model was written); demos and
    eval stages are short and start over."""
    from roll.utils.checkpoint import CheckpointManager

    if st.spec.kind != "run":
        return "run", f"interrupted; a {st.spec.kind} stage starts over"
    root = st.dir / "checkpoints"
    found = CheckpointManager(root).find_resumable() if root.is_dir() else None
    if found is None:
        return "run", "interrupted before its first checkpoint"
    step = int(found[1]["step"])
    if step < st.cfg.max_steps:
        return "resume", f"interrupted; from checkpoint step {step} of {st.cfg.max_steps}"
    if st.output.exists():
        return "skip", f"finished (checkpoint step {step}) before the interruption"
    return "run", f"its checkpoint is at the last step but {OUTPUTS['run']} is missing"


def run_chain(chain: ChainConfig, stages: list[Stage]) -> dict[str, Any]:
    """Run (or skip, or resume) every stage in order; returns the summary (also written to
    ``<output_dir>/summary.json`` and printed)."""
    problems = preflight_chain(stages)
    if problems:
        raise ConfigError(problems)
    out = Path(chain.output_dir).expanduser().resolve()
    state = read_state(out)
    records: dict[str, Any] = state["stages"]
    t_chain = time.perf_counter()
    earlier_ran = False
    ran: list[str] = []
    for i, st in enumerate(stages, 1):
        action, why = decide(st, records.get(st.name), earlier_ran)
        src = _rel(Path(st.source)) if st.source != "inline" else "inline config"
        head = f"== stage {i}/{len(stages)} {st.name} ({st.spec.kind}, {src})"
        if action == "skip":
            print(f"{head}: skipped ({why})", flush=True)
            continue
        if action == "resume":
            action, why = _resume_action(st)
            if action == "skip":
                print(f"{head}: {why}; recorded as done", flush=True)
                records[st.name] = {**records[st.name], "status": "done", "output": str(st.output), "finished": _now()}
                write_state(out, state)
                continue
        if action == "run" and st.dir.exists():
            logger.info("stage %s: clearing %s (%s)", st.name, st.dir, why)
            shutil.rmtree(st.dir)
        print(f"{head}: {'resuming' if action == 'resume' else 'running'} ({why}); output in {_rel(st.dir)}", flush=True)
        earlier_ran = True
        wall_before = float(records.get(st.name, {}).get("wall_s", 0.0)) if action == "resume" else 0.0
        records[st.name] = {"status": "running", "kind": st.spec.kind, "fingerprint": st.fingerprint,
                            "output": str(st.output), "started": _now(), "wall_s": wall_before}
        write_state(out, state)
        t0 = time.perf_counter()
        try:
            _run_stage(st)
        finally:
            records[st.name]["wall_s"] = wall_before + time.perf_counter() - t0
            write_state(out, state)
        if not st.output.exists():
            raise RunFailedError(f"stage {st.name} finished without its output {st.output}")
        records[st.name].update(status="done", finished=_now())
        write_state(out, state)
        ran.append(st.name)
        print(f"  stage {st.name} done in {records[st.name]['wall_s']:.0f} s", flush=True)
    summary = summarize(chain, stages, records, ran, time.perf_counter() - t_chain)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    print_summary(summary)
    return summary


# ------------------------------------------------------------------------------ summary
def _metrics_rows(st: Stage) -> list[dict[str, Any]]:
    path = Path(st.cfg.tracking.log_dir or st.dir / "logs") / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def _success(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """tag -> {greedy, sampled} held-out success (0-1) in one validation record."""
    out: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        m = re.match(r"^(val|val_greedy)/env/([^/]+)/success$", key)
        if m:
            out.setdefault(m.group(2), {})["greedy" if m.group(1) == "val_greedy" else "sampled"] = float(value)
    return out


def summarize(chain: ChainConfig, stages: list[Stage], records: dict[str, Any], ran: list[str],
              wall_s: float) -> dict[str, Any]:
    """Held-out success before and after (per eval stage, and the first and last validation
    round of each run stage), wall times, and where the results are."""
    points: list[dict[str, Any]] = []
    for st in stages:
        if st.spec.kind == "eval" and st.output.exists():
            ev = json.loads(st.output.read_text())
            points.append({"stage": st.name, "label": f"{st.name}: untrained ({ev['model']})", "step": None,
                           "episodes": ev["val_batch_size"], "success": _success(ev["metrics"])})
        elif st.spec.kind == "run":
            vals = [(int(r["step"]), _success(r)) for r in _metrics_rows(st)]
            vals = [(s, v) for s, v in vals if v]
            if not vals:
                continue
            start = f"the {st.upstream} model" if st.upstream and st.input_key == "pretrain" else st.cfg.pretrain
            first, last = vals[0], vals[-1]
            points.append({"stage": st.name, "label": f"{st.name} step {first[0]} ({start})", "step": first[0],
                           "episodes": st.cfg.val_batch_size, "success": first[1]})
            if last[0] != first[0]:
                points.append({"stage": st.name, "label": f"{st.name} step {last[0]} (end)", "step": last[0],
                               "episodes": st.cfg.val_batch_size, "success": last[1]})
    runs = [st for st in stages if st.spec.kind == "run"]
    final = runs[-1] if runs else None
    gains: dict[str, float] = {}
    firsts = [p for p in points if final is not None and p["stage"] == final.name]
    if len(firsts) == 2:
        for tag, end in firsts[1]["success"].items():
            for mode, v in end.items():
                start = firsts[0]["success"].get(tag, {}).get(mode)
                if start is not None:
                    gains[f"{tag}/{mode}"] = 100.0 * (v - start)
    return {
        "chain": chain.exp_name, "output_dir": str(Path(chain.output_dir).resolve()),
        "stages": {st.name: {"kind": st.spec.kind, "wall_s": float(records.get(st.name, {}).get("wall_s", 0.0)),
                             "ran_now": st.name in ran, "output": str(st.output)} for st in stages},
        "wall_s": wall_s, "points": points, "gain_pp": gains,
        "final_model": str(final.output) if final else None,
        "plots": [str(st.dir / "plots") for st in runs if (st.dir / "plots").exists()],
        "report_dir": str(final.dir) if final else None,
    }


def _pct(p: Optional[float], n: int) -> str:
    if p is None:
        return "   -"
    se = math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))
    return f"{100 * p:5.1f} ± {100 * se:3.1f}"


def print_summary(s: dict[str, Any]) -> None:
    """Plain prints: the console filters log records, and this is the run's result."""
    print(f"\n== chain {s['chain']}: summary", flush=True)
    tags = list(dict.fromkeys(t for p in s["points"] for t in p["success"]))
    for tag in tags:
        print(f"held-out success on {tag}, % (greedy | sampled, ± standard error):")
        width = max(len(p["label"]) for p in s["points"])
        for p in s["points"]:
            v = p["success"].get(tag, {})
            print(f"  {p['label']:<{width}}  {_pct(v.get('greedy'), p['episodes'])} | "
                  f"{_pct(v.get('sampled'), p['episodes'])}   ({p['episodes']} episodes)")
        g = {m: s["gain_pp"].get(f"{tag}/{m}") for m in ("greedy", "sampled")}
        if all(v is not None for v in g.values()):
            print(f"  gain of the last stage: {g['greedy']:+.1f} greedy, {g['sampled']:+.1f} sampled (points)")
    walls = ", ".join(f"{name} {v['wall_s']:.0f} s" + ("" if v["ran_now"] else " (earlier)")
                      for name, v in s["stages"].items())
    total = sum(v["wall_s"] for v in s["stages"].values())
    print(f"wall time: {walls}; stages {total:.0f} s, this invocation {s['wall_s']:.0f} s")
    if s["final_model"]:
        print(f"final model: {_rel(Path(s['final_model']))}")
    if s["plots"]:
        print("plots: " + ", ".join(_rel(Path(p)) + "/" for p in s["plots"]))
    if s["report_dir"]:
        print(f"report: roll view {_rel(Path(s['report_dir']))}")
    print(flush=True)


def print_stages(chain: ChainConfig, stages: list[Stage], problems: list[str]) -> None:
    """``roll plan CHAIN``: the stages in order, what feeds what, and what a rerun would do."""
    out = Path(chain.output_dir).expanduser().resolve()
    state = read_state(out)
    print(f"chain {chain.exp_name}: {len(stages)} stages in {_rel(out)} (seed {chain.seed})")
    earlier_ran = False
    for i, st in enumerate(stages, 1):
        action, why = decide(st, state["stages"].get(st.name), earlier_ran)
        earlier_ran = earlier_ran or action != "skip"
        src = _rel(Path(st.source)) if st.source != "inline" else "inline config"
        feed = "".join(f"; {k} <- {up}" for k, up in st.feeds.items())
        extra = ""
        if st.spec.kind == "run":
            extra = f", {st.cfg.pipeline} {st.cfg.max_steps} steps"
        elif st.spec.kind == "demos":
            extra = f", {st.spec.demos.episodes} episodes per tag, epsilon {st.spec.demos.epsilon}"
        print(f"  {i}. {st.name}: {st.spec.kind} ({src}{extra}{feed}) -> {_rel(st.output)}  [{action}: {why}]")
    if problems:
        print(f"{len(problems)} problem(s):")
        for p in problems:
            print(f"  - {p}")
    else:
        print("pre-flight OK for every stage")


def main_run(config: str, overrides: list[str]) -> int:
    """``roll run CHAIN.yaml [overrides]`` (overrides address the chain: ``seed=1``,
    ``stages.grpo.overrides.max_steps=5``)."""
    chain, stages = load_chain(config, overrides)
    run_chain(chain, stages)
    return 0


def main_plan(config: str, overrides: list[str]) -> int:
    chain, stages = load_chain(config, overrides)
    problems = preflight_chain(stages)
    print_stages(chain, stages, problems)
    return 1 if problems else 0
