"""The roll CLI, SIGKILLing its own process at a chosen point (fault injection for tests).

``ROLL_TEST_KILL=<phase>:<step>`` with phase ``rollout`` (half a second into collecting the
rollouts of pipeline step ``step``), ``train`` (right after the actor trained on step
``step``'s batch, before anything of it is saved) or ``checkpoint`` (while checkpoint
``step-<step>`` is being written: the workers' files are in place, the driver's are not).
The process dies as from ``kill -9``: no cleanup handler runs.
"""
from __future__ import annotations

import os
import signal
import sys
import threading


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(phase: str, step: int) -> None:
    if phase == "rollout":
        from roll.pipelines.agentic import AgenticPipeline

        collect = AgenticPipeline.collect_rollouts

        def collect_rollouts(self, s):
            if s + 1 == step:
                threading.Timer(0.5, _die).start()
            return collect(self, s)

        AgenticPipeline.collect_rollouts = collect_rollouts
    elif phase == "train":
        from roll.pipelines.agentic import AgenticPipeline

        train_step = AgenticPipeline.train_step

        def train_then_die(self, s):
            if s + 1 != step:
                return train_step(self, s)
            train_actor = self.policy.train_actor

            def train_actor_then_die(batch):
                train_actor(batch)
                _die()

            self.policy.train_actor = train_actor_then_die
            return train_step(self, s)

        AgenticPipeline.train_step = train_then_die
    elif phase == "checkpoint":
        from roll.pipelines.agentic import AgenticPipeline

        save_state = AgenticPipeline.save_state

        def save_state_then_die(self, ckpt_dir):
            out = save_state(self, ckpt_dir)  # the workers have written their files
            if ckpt_dir.name.startswith(f".tmp-step-{step}-"):
                _die()
            return out

        AgenticPipeline.save_state = save_state_then_die
    else:
        raise SystemExit(f"unknown phase {phase!r}")


if __name__ == "__main__":
    phase, _, at = os.environ["ROLL_TEST_KILL"].partition(":")
    install(phase, int(at))
    from roll.cli import main

    sys.exit(main(sys.argv[1:]))
