"""Generate docs/config.md from the schema docstrings: `python -m roll.config.docs [--check]`."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path

from roll.config.schema import ChainConfig, PipelineConfig
from roll.config.validate import field_docs, field_range, type_name

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _default_repr(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{f.default!r}`" if f.default is not None else "`null`"
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "(section)"
        return f"`{value!r}`"
    return "**required**"


def _sections(cls: type, prefix: str, seen: list) -> None:
    seen.append(([prefix], cls))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        for arg in (tp, *typing.get_args(tp)):
            if dataclasses.is_dataclass(arg):
                sub = f"{prefix}.{f.name}" if prefix else f.name
                if typing.get_origin(tp) is dict:
                    sub += ".<name>"
                for entry in seen:
                    if entry[1] is arg:
                        entry[0].append(sub)
                        break
                else:
                    _sections(arg, sub, seen)


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from the schema docstrings in `roll/config/` by `python -m roll.config.docs`;",
        "a test fails when this file is stale. Unknown keys are errors (with a suggestion), and",
        "everything under `strategy_args.strategy_config` passes to the backend untouched.",
        "A number outside its field's **range** column (declared in the schema with `ranged(...)`;",
        "for a list, each item) is an error naming the key; null always passes.",
        "",
        "## Pre-flight",
        "",
        "`roll plan` and `roll run` run the same pre-flight before Ray starts (`roll/config/preflight.py`),",
        "so a plan that says OK is a run that starts. Every problem is listed at once, one line each:",
        "",
        "- the modules under `imports:` import (an error names the module and the exception);",
        "- names resolve: pipeline, each role's strategy (and its backend package; an inference",
        "  engine on a training role or the reverse is an error), advantage estimator, policy loss,",
        "  reward functions (and each `reward_fn_args` key against the fields the function reads),",
        "  group filters, trackers (and their packages);",
        "- agentic: every env tag of the env managers is a key of `custom_envs`; every `env_id` is",
        "  registered with gymnasium (after `imports:`), its entry point imports and takes the given",
        "  `env_kwargs`; an env class with a `config_problems` classmethod checks them further",
        "  (`roll/Tools-v0`: tool ids and options, the parser, MCP entries; docs/tools.md); no tag is",
        "  listed twice in one manager; a warning when a validation tag's env seeds fall in the range",
        "  training draws from over the run (validation would replay training episodes); the",
        "  validation batch splits into whole groups matching its `num_groups_partition`, and every",
        "  tag gets groups in each training and validation batch (an even split over more tags than",
        "  groups is an error; a partition entry of 0 leaves its tag out, with a warning);",
        "- data: rlvr and sft data files exist and every record parses; every rlvr domain has a",
        "  reward; `domain_interleave_probs` name domains with data;",
        "- paths: each role's model (`pretrain` or `model_name_or_path`) is `roll-tiny://...`, a local",
        "  model directory (with `config.json`, weights and a tokenizer), or a hub id (with",
        "  `HF_HUB_OFFLINE=1`, one already in the local cache);",
        "  `resume_from_checkpoint` exists; `output_dir` and `tracking.log_dir` are creatable and writable;",
        "- roles: `adv_estimator: gae` needs a `critic`, `use_kl_loss` and `use_kl_in_reward` need a",
        "  `reference`; the loss settings build (e.g. `seq-mean-token-sum-norm` needs its constant);",
        "  greedy rollouts (`actor_infer` with `do_sample: false` or `temperature: 0`) are an error",
        "  where samples come in groups and the estimator compares a sample only within its group",
        "  (grpo, reinforce, gigpo with `reward_norm.group_by: group`; rloo; reinforce_pp with",
        "  `group_baseline`): every sample of a group would answer alike and every advantage be zero;",
        "  so are groups of one sample (`group_size` / `num_return_sequences` 1) with those estimators",
        "  (gigpo only with `step_weight: 0`): each sample is its own baseline;",
        "  validation with `eval_steps` set and an empty `val_decoding` (it would run nothing);",
        "- `lora`: only on `torch_train` / `deepspeed` trainers (not megatron, not the critic), peft",
        "  installed, every `target_modules` entry names a linear module of the role's model;",
        "- placement (on a local cluster): the `roll plan` table's device and batch arithmetic, and the",
        "  GPU memory fractions of colocated inference engines (vLLM `gpu_memory_utilization`, default",
        "  0.9; SGLang `mem_fraction_static`) add up to at most 1.0 on every device.",
        "",
    ]
    lines += [
        "## Chains",
        "",
        "A file with `stages:` at its top level is a chain (`ChainConfig` below; runner:",
        "`pipelines/chain.py`): `roll run` runs its stages in the order written, each in",
        "`<output_dir>/<stage name>` with the chain's `seed`, and `roll plan` lists them with what a",
        "run would do. A stage is a pipeline config (`config:` file, inline `overrides:`, or both) and",
        "a `kind`: `run` trains (output `final_model`), `eval` runs the validation rounds of the",
        "untrained model (output `eval.json`), `demos` writes expert demonstrations (output",
        "`demos.jsonl`). The output of the nearest earlier `demos` or `run` stage feeds the next stage",
        "(`input: auto`: a demos file becomes `data.train_files`, a model `pretrain`). Every stage is",
        "pre-flighted before anything runs (outputs that earlier stages will write are allowed to be",
        "missing). `<output_dir>/chain_state.json` records what finished: on a rerun a finished stage",
        "whose config, input and output are unchanged is skipped, an interrupted `run` stage resumes",
        "from its own latest checkpoint (set `save_steps` to have some), and a stage whose config",
        "changed or whose output is gone runs again from the start, with every stage after it.",
        "Command-line overrides address the chain: `seed=1`, `stages.grpo.overrides.max_steps=5`.",
        "The run ends with a summary (held-out success of each eval stage and of the first and last",
        "validation round of each run stage, wall times, where the model, plots and report are),",
        "also written to `<output_dir>/summary.json`.",
        "",
    ]
    seen: list = []
    _sections(PipelineConfig, "", seen)
    _sections(ChainConfig, "", seen)  # chain files
    for prefixes, cls in seen:
        title = f"`{cls.__name__}`"
        where = ", ".join(f"`{p}`" for p in prefixes if p) or "the top level of a config file"
        lines += [f"## {title}", "", (cls.__doc__ or "").strip(), "", f"Used at: {where}.", "", "| key | type | default | range | description |", "|---|---|---|---|---|"]
        docs = field_docs(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            desc = " ".join(docs.get(f.name, "").split()).replace("|", "\\|")
            tp = type_name(hints[f.name]).replace("|", "\\|")
            rng = field_range(f)
            rng_text = f"{rng}".replace(" and ", ", ") if rng is not None else ""
            lines.append(f"| `{f.name}` | {tp} | {_default_repr(f).replace('|', chr(92) + '|')} | {rng_text} | {desc} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/config.md is stale")
    parser.add_argument("--out", default=str(DOC_PATH))
    args = parser.parse_args(argv)
    text = render()
    out = Path(args.out)
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is stale: run `python -m roll.config.docs`", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
