"""Rollout: environments, environment managers and the rollout scheduler.

- :mod:`roll.rollout.env_manager`: one token-exact multi-turn episode (``EnvManager``);
- :mod:`roll.rollout.chat`: chat-template rendering of turns as token deltas;
- :mod:`roll.rollout.router`: load-balanced, sticky, bounded routing to inference workers;
- :mod:`roll.rollout.scheduler`: ``RolloutScheduler`` (group queues, sync/async modes,
  staleness, partial rollouts; the pipeline-facing API is in its docstring);
- :mod:`roll.rollout.service`: building one from a PipelineConfig; ``ThreadedScheduler``;
- :mod:`roll.rollout.filters`: group filters registered in ``roll.registry.FILTERS``;
- :mod:`roll.rollout.metrics`: namespaced rollout metrics.

The env worker (a Ray actor or in-process host of many episodes) is
:class:`roll.workers.environment.EnvironmentWorker`; trajectories and their collation are in
:mod:`roll.data.trajectory`.
"""
