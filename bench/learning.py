"""Learning proof: does agentic RL improve a weak SFT-warm-started tiny policy?

For each env (non-slippery FrozenLake 4x4 and simple Sokoban) the whole chain runs through
the CLI, each stage a subprocess:

1. ``roll data demos``: noisy expert demonstrations (``epsilon`` = share of random actions),
   rendered exactly like the RL prompts (step mode, no history);
2. ``roll run <sft config>``: a short SFT warm start of ``roll-tiny://tiny`` on them;
3. ``roll run <grpo config> pretrain=<sft final_model>``: RL with held-out validation
   (seed_offset 100000), greedy and sampled at the training temperature, at step 0 (that is
   the SFT model) and every ``eval_steps`` up to the last step;
4. optionally the same with PPO and a critic (``--ppo``), reported whatever it gives.

The gain of an env is the validation success after RL minus the one at step 0, in points,
the smaller of the greedy and the sampled gain. Learning curves go to docs/learning_curves/,
numbers, commands and seeds to the ``## Learning`` section of docs/benchmarks.md.

    python bench/learning.py            # full run (about an hour on a 2-core CPU)
    python bench/learning.py --quick    # the same chain, tiny (Ray start-up bound: ~3 min)
    python bench/learning.py --jobs 2   # the envs' chains and an env's RL runs side by side
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from common import run_logged, write_section

ROOT = Path(__file__).resolve().parent.parent
CFG = "configs/agentic/learning"
SECTION = "## Learning"
NOTES = """Settings (configs/agentic/learning/*.yaml): step mode without history and observation-only
prompts (each turn's prompt is the current grid alone, about 25 tokens for FrozenLake and 45 for
Sokoban; the SFT warm start teaches the `<answer>...</answer>` format), `max_new_tokens` 8,
temperature 1.0, 64 episodes per step in groups of 8, AdamW lr 2e-4 constant for PPO and the
multi-env run (GRPO on Sokoban and FrozenLake: 5e-4 with betas (0.9, 0.95) and a cosine decay to 0
over the run, below), PPO clip 0.2,
token-mean loss, held-out validation episodes per decoding mode: 256 (FrozenLake records before
its 256: 64). GRPO runs as `gigpo` with
`step_weight: 1` and gamma 0.95: the GRPO advantage of the episode return plus GiGPO's step-level
advantage over identical grids within a group, with `balance_episodes: true` (each episode
weighs the same in the loss; see below). PPO: `gae` (gamma 0.95, lambda 1, whitened
advantages) with a critic started from the SFT model; Sokoban PPO and the multi-env run stop a
batch's optimizer steps once the policy has moved by a KL of 0.02 (`early_stop_kl`). Simple Sokoban is `roll/Sokoban-v0` (6x6,
one box) with `env_kwargs {search_depth: 6, min_solution_length: 2, max_steps: 8,
format_penalty: -1}` (optimal solutions of 2 to 6 moves; unparseable text costs 1, not the 0.1 of a
move), 8 turns; FrozenLake is `roll/FrozenLake-v0` (4x4, p_frozen 0.8, not
slippery), 8 turns. SFT: 32 turns per step at lr 1e-3 constant (a run of N steps is step N of a
longer one); FrozenLake 300 steps on 1000 epsilon-0.5 demonstrations, Sokoban 300 steps on 2000
clean ones (see below). Random play on the validation seeds succeeds about 17% (FrozenLake) and 11%
(Sokoban). One seed per run: a success rate near 30% has a standard error of about 6 points over
64 episodes and 3 over 256, and two runs of one config can end further apart than that (Sokoban:
+14.8 and +22.7 sampled, below; FrozenLake at lr 2e-4: +42.2 and +18.8 greedy over 64 grids).

FrozenLake GRPO now has Sokoban's optimizer. At a constant 2e-4 with beta2 0.999 (the chain's
previous row: 30 / 28 -> 48 / 52, +18.0) the policy became deterministic before it was right:
training success 37% -> 50-55% by step 50 and no further, the sampled tokens' mean -log p
(`env/FrozenLake/token_nll`) 0.35 -> 0.09, and the share of groups whose 8 episodes all ended
alike (`zero_std_groups`: nothing for a group-relative advantage to compare) 14% -> 50% at step 100
and 70% at step 250; held-out success stayed at 46-54 from step 50 to 300. From the same SFT model
(seed 42, 256 grids, greedy / sampled at step 50, 100; `roll run
configs/agentic/learning/frozenlake_grpo.yaml pretrain=<SFT final_model> max_steps=150` with
`actor_train.training_args.lr=2e-4 'actor_train.training_args.adam_betas=[0.9,0.999]'
actor_train.training_args.lr_scheduler_type=constant` and the change named): `balance_episodes`
alone 47 / 47 at 50 (stopped); dynamic sampling (`train_env_manager.group_filter=zero_variance
train_env_manager.max_group_refills=64`, without `balance_episodes`, the DAPO remedy: groups that
all end alike are replaced by new ones) 45 / 48, 48 / 52; lr 5e-4, betas (0.9, 0.95), cosine to 0 over the
run, with `balance_episodes` 64 / 56, 62 / 62, then 70 / 70 at 150 and 70 / 71 at 300 (the table's
row: the same run). Its first 25 steps wobbled (invalid training answers 28%, `ppo_kl_max` up to
0.81) and recovered. It too became deterministic (`token_nll` 0.01 and `zero_std_groups` above 90%
from step 200), but after it had got better: training success 63% at steps 50-75 and 66-75% from
step 150, where the first run stalled at 50%. It learnt faster while it still explored; what makes
the difference between the two optimizers is not measured further here.

How these were chosen (plain-PyTorch probes and pipeline runs):
the 1.2M-parameter model reads the FrozenLake grid from clean demonstrations (72% expert
agreement after 400 SFT steps) and from epsilon-0.5 ones from about step 250, but not from
epsilon-0.75 ones within 600 steps; 300 steps at epsilon 0.5 leave a weak start. Sokoban
demonstrations at epsilon 0.25 or 0.5 left the model at the random level after 300 (0.25) and
600 (0.5) steps; epsilon 0.1 started at 9% greedy, 16% sampled and RL did not move it in 50
steps (12% / 14%). The Sokoban chain therefore warm-starts on clean demonstrations and keeps the
start weak by stopping SFT early: the expert agreement of the SFT model on its demonstrations is
41% after 300 pipeline steps (3% greedy success, below random play) and about 50% after 450 (17%
greedy, 25% sampled).

Sokoban RL, what was tried (seed 42, same SFT start; validation greedy / sampled in %; runs with
2-3 others on the machine): with the default format penalty (-0.1, the price of a move), invalid
answers rose from 0% to 37% within 5 steps in one run and to 92% by step 50 in another (with
box-distance shaping 0.5, which made a push riskier than text): a batch of only invalid answers
carries no signal and does not recover (the multi-env run with the default penalty drifted the
same way around step 100, 75% invalid on Sokoban, and ended failing every validation env:
FrozenLake 16 / 14 -> 8 / 8). Format penalty -1 keeps them at 0-5% at lr 2e-4. It does not
prevent the other failure seen in the runs below: Sokoban PPO went well to step 70 (24 / 33 at 50),
then one step moved the policy by a KL of 0.54 (ppo_kl; about 0.001 on other steps), answers became
88% invalid and then valid but ineffective (9% of moves change the room); the multi-env run reached
25 / 36 on FrozenLake at step 50 and from step 150 answered deterministically (greedy = sampled) at
the start level. A trust region per rollout batch (`early_stop_kl: 0.02`: the batch's optimizer
steps stop once the policy has moved by a KL of 0.02 from the rollout policy) removes the PPO
failure: the same 100-step run stopped early on 24 of its 100 steps (6.75 optimizer steps per step
on average, of 7-8) and ended at 23.8 / 34.8 with under 1% invalid answers, where it had ended at
2.3 / 2.3. On Sokoban GRPO the same bound stopped nearly every step after step 85 and was behind
the unbounded run at step 100 (19 / 30 against 25 / 38), so the GRPO config does without it. The
multi-env run with the bound reached 36 / 44 on FrozenLake and 5 / 9 on the different-symbol
Sokoban at step 100 (from 16 / 14 and 0 / 0), then drifted into invalid answers anyway (45% of
sampled answers at step 150, every step within the bound) and ended answering `Right` to every
grid; a KL loss to the SFT model on top (k3, coefficient 0.1) did not stop the drift either (invalid
answers 2% -> 100% between steps 60 and 96, the KL loss rising from 0.03 to 20-90 per token; run
stopped there). The cause, measured with the per-tag metrics of roll/algorithms/advantages.py
(`reward/<tag>/adv_mean`, `adv_std`, `adv_absmax`, `group_score_std`, `zero_std_groups`,
`small_std_groups`, GiGPO's episode and step parts) at lr 6e-4, where the multi-env run breaks
within 5 steps, and a probe of its saved policy on 200 demonstration prompts: the answers did
not leave the answer vocabulary, they lost the closing tag. p(`</answer>` after the action)
fell from 0.9995 to 0.0003 in 10 steps while p(`<answer>` first) stayed 0.9996, every answer
became `<answer>RightRightRight...` (100% invalid from step 5, and no way back: in an
all-invalid batch every group's episodes score the same). What pushed it: in step mode an
episode gives one sample per turn, failing episodes run to the 8-turn limit and successes end
early, so GiGPO's episode advantage, zero-mean over a group's episodes, is negative on average
over the group's tokens: `adv_mean` -0.05 to -0.15 (SimpleSokoban) and -0.10 to -0.19
(FrozenLake) at steps 1-4. A net negative advantage pushes down every sampled token, the
format tokens of every valid answer included; their gradient is tiny (probability about 1) but
always of one sign, and Adam turns a small consistent gradient into full-size steps (the LM-head
rows of tokens never in the data moved 5 times as far as the used ones in those 10 steps, 0.17
against 0.03). The step-level part is zero-sum within each anchor group, so not one-signed,
though large: on Sokoban it outweighs the episode part (mean |A| 0.65-0.81 against 0.27-0.73),
10-26% of Sokoban's anchor groups differ only by discounting or move costs (mean_std makes them
size 1) and it stays at 0.86 in the all-invalid state. The fix, `adv_estimator_args:
{balance_episodes: true}` (multi_env_grpo.yaml), scales each episode's advantage by its
group's mean tokens per episode over its own, so each episode weighs the same and the episode
advantage sums to zero over a group's tokens (`adv_mean` within 0.05 of 0, the rest from the
step part, zero-sum per anchor group by samples rather than tokens); in the same 10
steps at lr 6e-4 invalid answers still spiked (83% on FrozenLake at step 3, 94% on Sokoban at
step 6) but fell back to 0-1% within 2-3 steps each time. Over the whole 300 steps at a
constant lr 2e-4 invalid answers stayed at 0-1% per validation round after step 100 and every
validation env ended above its start (FrozenLake +23.4; the larger Sokoban peaked at 20 / 30 at step
150 and ended at 12 / 16, +7.8; different symbols +4.7). The generalisation table below is the run
with the LR decayed to 0 by a cosine (as sokoban_grpo.yaml) and Sokoban moves that change nothing
priced (`blocked_move_penalty: -0.5`), from a new SFT start (the demonstrations changed): it kept
what it learnt to the end (the larger Sokoban 14 / 22 at step 300 against a peak of 17 / 23;
FrozenLake +26.6), but from a higher greedy start on the larger Sokoban (8 against 5) its gain there is
+6.2 (greedy; +15.6 sampled); invalid answers spiked once (about 20% at step 50, 100% in the
different symbols) and were 0-3% from step 100. The same config without the fix
(300 steps) peaked at step 100 (FrozenLake 36 / 44) and ended at 8 / 8 on FrozenLake (from 16 /
14) and 3 / 3 on the larger Sokoban (from 5 / 9), answering `Right` to every grid (45% invalid
sampled at step 150). The lr 6e-4 Sokoban run below
moved its format tokens the same way, at the first token instead of the closing tag (not
re-measured with these metrics). At lr
6e-4 the format broke anyway around step 40 (invalid 0% -> 100% in 3 steps): the probability of
`<answer>` as the first token fell from 0.999 to 0.86 in 40 steps, the mass going to tokens that
never occur in the data (` treats`, `kq`) - Adam turns the tiny, consistent gradients that negative
advantages put on every other vocabulary row into full-size steps; Adam eps 1e-5 did not prevent it
and a KL loss to the SFT model (0.05, lr 4e-4) was no better at step 25 (18 / 27 from 20 / 28). A
`blocked_move_penalty` of -1 next to format penalty -1 made unparseable text the cheaper answer
(77% invalid by step 5 at lr 6e-4). Box-distance shaping 0.25 with format penalty -1 was not
better than without over 100 steps (64 rooms: 27 / 33 against 27 / 28). A weaker start (SFT 300
steps: 5 / 6) moved like the 450-step one (9 / 16 at step 50). With 256 validation rooms the
format-penalty recipe went 20 / 28 -> 21 / 30, 22 / 36, 24 / 35, 33 / 38, 28 / 34 at steps 50 to
250: learning, but about 10 points in 200-250 steps and not +20 within 30 minutes. With the LR
constant, the run of 300 steps peaked at step 150 (31 / 44) and ended at 27 / 34 (+6.6). A cosine
decay to 0 over the 300 steps (`lr_scheduler_type: cosine`, `num_training_steps: 2100`, about 7
optimizer steps per step) keeps what was learned instead of wandering off the peak: at lr 2e-4 it
went 20 / 31, 21 / 29, 25 / 35, 29 / 38, 31 / 38 and ended at 32 / 39 (+11.3); at 3e-4 (the table's run until
the demonstrations changed, below) 14 / 30, 23 / 37, 22 / 38, 29 / 41, 35 / 49, 36 / 48 (+16.0 greedy, +20.7 sampled, 1505
s, half of it beside another run); at 4e-4 the answer format broke by step 100 (100% invalid). Rerun with the fixed demonstration noise (envs/agents.py agent_rng: the
expert's demonstrations, and so the SFT start, changed; seed 42, beside 2-3 other runs): the SFT
start is 10.9 / 23.4 (was 19.5 / 27.7) and the recipe above ends at 15.6 / 28.1 (+4.7); with
`balance_episodes: true` (as in the multi-env run) 23.8 / 30.1 (+12.9 greedy, +6.6 sampled). The
earlier demonstrations cannot be drawn again, so the table showed the rerun chain, whose start is weaker
(its Sokoban PPO row, from the earlier start, is gone with it: +4.3, 19.5 / 27.7 -> 23.8 / 34.8). How the
greedy policy fails (`python bench/greedy_probe.py <SFT model>`, 200 held-out rooms): the SFT start of the rerun
solves 10.5% and ends 67.5% of its episodes repeating a move that changes nothing (63.8% of its moves change
nothing): without history, the same room gets the same answer. sokoban_grpo.yaml therefore prices such a move
(`blocked_move_penalty: -0.5`, still cheaper than unparseable text at -1): in its first run (stopped at step 106,
beside two other jobs at 25-35 s per step) greedy went 9.4 -> 17.6 -> 15.6 at steps 0, 50 and 100 and sampled
23.8 -> 25.8 -> 28.1; the share of training moves that changed the room rose from 58% to about 70% within 20
steps and stayed there. The whole chain rerun with it (the table's row until the chain below) went 9 / 24, 18 / 27, 19 / 26, 23 / 29,
26 / 30, 27 / 35, 26 / 35 at steps 0 to 300: +16.4 greedy (the earlier start's +16.0, from half as high) and
+11.3 sampled (RL wall 6143 s, beside one or two other runs throughout: 12-30 s per step, where alone a step
took a median 4.4 s in the earlier run). Why the greedy
target was not reached then: the grid
must be read relationally (box, target and player two-dimensionally, a row apart being 7 tokens
apart in the text) and even SFT on clean demonstrations reaches only about 50% expert agreement
after 450 steps; the SFT policy is flat (its most likely action has about 0.35 probability), so
sampled success rises with sharpening while greedy success needs the argmax to change; a greedy
policy without history that bumps into a wall sees the same room and repeats the bump (above); GiGPO finds few identical rooms within a group once episodes diverge
(about 50 anchor groups among 440 steps per batch), so the credit is mostly episode-level. The
steps are cheaper than before (the LM head runs only on response columns: 1.5x per train step, see
Train step), so 300 steps fit in 30 minutes where 200 did (the run above: median 4.4 s per step,
1505 s in all, half of it beside another run; 8.2 s per step beside three other runs). The 64-room validation set was too small
to see this: a standalone evaluation of one SFT model scored 27% sampled on the first 64 training
seeds and 14% on the 64 validation seeds. A start from a plain-PyTorch SFT loop (49% agreement; 9%
greedy, 27% sampled) went to 41% / 39% after 50 RL steps and 31% / 33% after 100 (64 rooms).
An earlier FrozenLake run of this recipe (demonstration seed 1, SFT from a plain-PyTorch loop)
gained 40.6 points greedy and sampled in 300 steps. With the ~180-token env
instruction in every prompt (5 times the tokens) and episode-level credit only (`step_weight:
0`), RL gained little in 100 steps and drifted into the absorbing all-fail state; Adam at 1e-3
broke the answer format within 2 steps, and 5e-4 on Sokoban was no better than 2e-4 after 25.

Where the Sokoban start comes from, and what breaks a run at a higher LR (seed 42, one run at a
time, 9-14 s per step; greedy / sampled in %): the number of demonstrations, not the SFT length,
limits the SFT start. 450 steps on 2000 clean episodes (7452 turns) instead of 1000 solve 43% of
200 held-out rooms greedily (`python bench/greedy_probe.py`; 43 / 45 on the 256 validation rooms)
where 1000 episodes give 10.5%; 600 steps 45.5%, 900 steps 38%. From that start GRPO as configured
stayed put (42 / 48 at step 50, training success 30-45% over 68 steps; stopped). 300 steps on the
2000 episodes give a weak start that reads the grid better (3 / 19): GRPO as configured reached
15 / 25 at step 50 (stopped at step 66; the previous chain: 18 / 27 from 9 / 24). At lr 5e-4 from
it two runs broke the answer format in one rollout batch, at step 50 and at step 13: `actor/ppo_kl`
0.98 and 1.11 where the steps before had 0.002-0.008, then every answer invalid for 25 steps (the
first run was valid again by step 90, 18 / 23 at step 100). `actor/ppo_kl_first` (the first
mini-batch's KL, before any update: the gap between the inference engine's log-probs and the
trainer's) was 0.000 on every step, so the rollout's log-probs were right; `actor/ppo_kl_max` was 2.4 on
the breaking batch (0.01-0.06 before it). The two batches before it had sampled a new malformed
answer, `<answer><answer>Down</answer>` (0% -> 19% -> 34% of the answers, episode advantage -0.2
to -0.5 on average), and after it no answer closed its tag (`<answer>UpDownLeftUp...`). A likely
mechanism (not measured): the tiny model ties its input embeddings to its LM head, so pushing `<answer>` down as the second token also
moves the embedding every answer starts from, and Adam scales a first large gradient on a rarely
updated row to a full-size step (with beta2 0.999 its second moment remembers hundreds of quiet
steps). A trust region (`early_stop_kl: 0.1`, which no earlier batch reached) did not stop it:
single mini-batch updates still moved the policy by a KL of 0.6-1.3, invalid answers stayed at
10-50% from step 25 to 50 and the run was at 4 / 14 at step 50. AdamW betas (0.9, 0.95) instead
(`actor_train.training_args.adam_betas`; the second moment follows the last ~20 steps) kept the
same run stable over the 150 steps it ran (stopped there): `ppo_kl_max` at most 0.07, invalid answers
at most 8%; 20 / 25, 18 / 27, 24 / 32 at steps 50, 100, 150 (+21 greedy, +13 sampled; at step 50 lr
3e-4 with beta2 0.999 from the same start: +12 / +6; the previous chain at step 150: +14 / +5).
The learning configs now give the trainer and the inference worker two CPUs each (in sync mode
their phases never overlap): 14.0 -> 11.3 s per simple-Sokoban step alone; the FrozenLake rows'
runs had one.

The chain now has both (2000 episodes and 300 SFT steps in bench/learning.py; lr 5e-4 with beta2 0.95 in
sokoban_grpo.yaml), run alone on the machine with two CPUs per worker. Its first run: 3 / 19,
15 / 24, 25 / 30, 27 / 28, 30 / 32, 30 / 33, 32 / 34 at steps 0 to 300, +29.7 greedy and +14.8
sampled, `ppo_kl_max` at most 0.12 (step 65) and invalid training answers at most 5.5%; the chain
took 50 minutes (demos 5 s, SFT 180 s, RL 2810 s: a median 8.2 s per step and 25-45 s per
validation round of 512 episodes). The table's row is the same chain rerun after rollout round
trips were batched (below; the same demonstrations and SFT model, whose stage times it reuses):
+35.2 greedy and +22.7 sampled, the chain in 33 minutes (RL 1811 s: a median 5.5 s per step,
rollout 1.4 s and training 4.0 s, 21-27 s per validation round). Its rollouts were the same as the
first run's for the first steps, then drifted apart through float rounding (batch composition in
the engine); it broke the answer format once for a few steps (invalid training answers 51% at step
130, `ppo_kl_max` 1.18 at step 128, valid again within 10 steps). Two runs of one config ended 8
points apart on the sampled gain (+14.8 and +22.7), so one run's result is one draw: the run below
with only the cosine stretched moved further still. What the first run's models showed: the SFT start is flat:
greedy it repeats a move that changes nothing to the turn limit in 91% of its episodes (3%
success, `python bench/greedy_probe.py`; the same on 256 training rooms: 5%), sampling escapes
that (19%). RL made the policy commit, and made it better, but less of the latter
(`python bench/greedy_probe.py MODEL --episodes 256 --first-move`: the four one-move answers
scored whole on the first room of each validation episode): the top move's probability averages
0.94 after RL and 0.46 before, the entropy over the moves 0.19 nats and 1.03 (of at most 1.39),
while the top move is optimal (it shortens the solver's plan) in 57% of the rooms, from 39%.
Greedy and sampled now play nearly the same policy, so the sampled gain needs more right moves:
it rose 11 points in the first 100 steps and 4 in the last 200, as the LR decayed. The end is below
what longer SFT reaches: 450 SFT steps on the same 2000 episodes give a model whose top first move is
optimal in 64% of the rooms (top move 0.62, entropy 0.91) and which solves 43% greedily, where 300 SFT
steps and 300 RL steps give 57% and 32% (the first run; the table's run ends at 38%): the gain is measured from a start chosen to leave room for
RL. RL from that stronger start with this optimizer (sokoban_grpo.yaml as is, seed 42, stopped at step
53) lost ground: 42.6 / 44.5 -> 21.9 / 39.1 at step 50, training success 35-44% throughout (at lr 3e-4
with beta2 0.999 it had stayed put, above). Rollouts now log `env/<tag>/token_nll` (the
mean -log p of the sampled tokens: the policy's entropy per token) to follow this in a run.

Rollout round trips are batched (docs/architecture.md, `rollout/`): the router sends the requests
admitted in one event-loop pass to an inference worker in one `generate_batch` call, and a lockstep
step calls each env worker once per phase with all of its episodes, where it made a Ray call per
episode and turn (two to the env worker, one to the inference worker). On this config (`roll run
configs/agentic/learning/sokoban_grpo.yaml pretrain=<the chain's SFT model> max_steps=14 eval_steps=0`,
the code before and after, one run after the other, alone on the machine; medians over steps 3-14)
the rollout took 4.14 s per step before and 1.82 s after, the step 8.7 s and 6.4 s.

How far one run moves (seed 42, same SFT start, both stopped): the chain with only
`num_training_steps: 4200` (the cosine reaches half the LR at step 300; at step 50 the LR is 0.98 of
its peak instead of 0.93) had the same rollouts as the table's run for the first steps, then
`ppo_kl_max` 0.4-0.96 at steps 16-70 and 9 / 18, 9 / 16, 10 / 23 at steps 50, 100, 150 (the table's
run: 17 / 25, 18 / 26, 22 / 35). From 200 SFT steps instead of 300 (1 / 11 at step 0) the answer
format broke at step 3 (97% invalid training answers, valid again by step 15) and the run was at
4 / 14 at step 50."""


MULTI_NOTES = """Why the different-symbol Sokoban cannot gain much with this model (`python bench/symbols_probe.py`):
roll/SokobanXSB-v0 draws the same rooms with `- . $ @` for floor, target, box and player where the
training rendering has `_ O X P` (the walls, `#`, are shared). A pretrained LLM has read XSB
levels; the tiny model starts from random weights and knows a symbol only by its embedding row,
which is tied to the LM head. A token never seen as a target has its row pushed down by every
softmax, in the same direction for all such tokens, so training makes the four XSB symbols
nearly parallel: mean pairwise cosine of their input embeddings 0.00 untrained, 0.90 after the
multi-env SFT and 0.88 after its GRPO, against 0.04 and 0.09 among the four training symbols
(0.19-0.52 between a training symbol and its XSB twin). The model's input cannot tell the box
from the target, the player or the floor in that rendering; what it can still read is the wall
layout. Reaching +10 there needs a model that has met these symbols: a pretrained one (none can
be downloaded on this machine) or symbol-level pretraining, which would no longer test
generalisation to unseen symbols. RL on the training rendering cannot supply it: in each of 256
held-out XSB rooms (seeds 100042 on) the player, the box and the target are one cell each, so a
model without a prior for `@ $ .` can tell them apart only by where they stand (box beside target
in 72% of the rooms, player beside box in 27%, player beside target in 8%), cues the training
rendering never makes it use, since there each role has a symbol of its own.

The next four paragraphs are about the table's previous row, the same recipe without the feedback
line (last paragraph): FrozenLake 18.8 / 25.0 -> 45.3 / 57.8 (+26.6), the larger Sokoban 7.8 / 6.2 ->
14.1 / 21.9 (+6.2), the different symbols 1.6 / 9.4 -> 4.7 / 7.8 (-1.6); RL wall 4603 s, chain 84
minutes beside other jobs ("the table's run" there).

The optimizer change that steadied simple Sokoban (lr 5e-4 with Adam's beta2 0.95, without the
trust region) did not help this run (seed 42, the same SFT start, beside the test suite for
most of it: RL wall 3831 s): FrozenLake 19 / 25 -> 45 / 48 (+23.4), the larger Sokoban 8 / 6 ->
14 / 20 (+6.2), the different symbols -3.1; the format broke for a few steps twice and recovered
(invalid training answers up to 70% at steps 74-92 and 17% at 154-160, `actor/ppo_kl_max` up to
1.08). multi_env_grpo.yaml keeps lr 2e-4, beta2 0.999 and `early_stop_kl: 0.02` (the table).

What holds the larger Sokoban back (that run's SFT and final models, 128 held-out rooms each, greedy;
`python bench/greedy_probe.py MODEL --config configs/agentic/learning/multi_env_grpo.yaml --tag
LargerSokoban --episodes 128 --first-move`, and `--tag SimpleSokoban`): the larger room is read about
as well as the trained one. Its top first move is optimal in 47% of the rooms before RL and 51%
after, where the simple rooms give 43% and 47%; but the multi-env run learns Sokoban itself far
less than the Sokoban chain: 6% -> 15% greedy success on its own training rooms (the Sokoban
chain: 3% -> 38%, with 57% optimal first moves). RL made the policy commit (top move probability
0.44 -> 0.79 in the larger room), and in the larger room a committed policy without history that
meets a move that changes nothing repeats it: 67% of the episodes end stuck that way after RL,
37% before. So the larger Sokoban waits on the Sokoban in the multi-env run: half the
groups per step of the Sokoban chain, from 1000 demonstrations at epsilon 0.1 where the Sokoban
chain starts from 2000 clean ones.

Two runs tried to give the multi-env run's Sokoban more (seed 42, 128 held-out episodes per validation
env and decoding mode; greedy / sampled in %). With the Sokoban chain's ingredients (2000 clean
Sokoban demonstrations, 6 Sokoban and 2 FrozenLake groups per step, lr 5e-4 with beta2 0.95, the trust
region kept; 600 SFT steps): the larger Sokoban went 5 / 10 -> 3 / 11 at step 50 -> 1 / 6 at step 100,
FrozenLake 26 / 25 -> 19 / 22 -> 27 / 41 (stopped; 5 s per step alone). With one turn of history in
every prompt (`train_env_manager.history_window=1 val_env_manager.history_window=1`, demonstrations
rendered the same way; otherwise the table's recipe), so that a policy could see that its last move
changed nothing: the larger Sokoban 6 / 8 -> 7 / 11 -> 8 / 7 at steps 0, 50, 100, FrozenLake 27 / 31 ->
42 / 40 -> 38 / 34, training success on simple Sokoban flat at 28-33% (stopped at step 145). Neither
moved the larger room within 100 steps, where the table's run had 12 / 22 at step 100.

The table's recipe run again alone (`python bench/learning.py --envs multi`, seed 42, nothing else on
the machine): demos 4 s, SFT 133 s, RL 953 s (about 3 s per step): the chain takes 18 minutes, where
the table's 84 were measured beside other jobs. Its validation (greedy / sampled, 64 episodes per env
and mode): FrozenLake 3 / 19 -> 27 / 45 (+23.4), the larger Sokoban 9 / 5 -> 6 / 5 (-3.1, never above
9 / 12), the different symbols 2 / 6 -> 2 / 11 (0.0). The larger Sokoban's +6.2 in the table is
within what two runs of one recipe differ by; at 5-10% greedy success it is near its floor.

Feedback in the prompt (now multi_env_grpo.yaml, every tag: `turn_template: "{observation}{feedback}"`;
roll/rollout/env_manager.py `action_feedback`): after a move that changes nothing, or an answer that
is no move, the next prompt adds one line saying so, where without history the same room came back
and a greedy policy repeated the move (67% of the larger-room episodes after RL, above). The
demonstrations show it as well (391 FrozenLake and 159 Sokoban turns after a random move that changed
nothing, each followed by the expert's move). The chain with it is the table's row (`python
bench/learning.py --envs multi`, seed 42: demos 4 s, SFT 143 s, RL 1326 s beside the WebShop chain's
SFT, 25 minutes; the same commands run by hand first gave the same numbers at every validation; the
table's row before the KL loss, last paragraph):
FrozenLake 18.8 / 26.6 -> 67.2 / 64.1 (+37.5, where the previous row gained 26.6), the larger Sokoban
20.3 / 12.5 -> 26.6 / 29.7 (+6.2: the feedback lifts the greedy start from 7.8 to 20.3, and RL adds
about what it added before), the different symbols -4.7. The larger room's greedy episodes still end
truncated in 73% (the loops are broken; the policy wanders), and simple Sokoban's training success
stays at 19-32% per 50 steps through the run while FrozenLake's rises from 33% to 69%: the multi-env
RL learns FrozenLake and hardly Sokoban, and the larger room waits on that. With simple Sokoban's
optimizer on top (lr 5e-4, betas (0.9, 0.95), no trust region; `roll run
configs/agentic/learning/multi_env_grpo.yaml pretrain=<that SFT model> actor_train.training_args.lr=5e-4
'actor_train.training_args.adam_betas=[0.9,0.95]' algorithm.early_stop_kl=null`): the larger Sokoban
12 / 11 at step 50 and 16 / 19 at 100, FrozenLake 19 / 39 and 20 / 39 (stopped; the row's run had 23 / 27
and 39 / 48 at step 100). A step's 32 Sokoban episodes are 4 rooms (groups of 8 share the room), and
its training success ranged 0-62% from step to step in both runs. Eight rooms of each env per step
instead (groups of 4: `train_env_manager.group_size=4 'train_env_manager.num_groups_partition=[8,8]'`,
otherwise the row's recipe, from the same SFT model): the larger Sokoban 25.0 / 18.8, 20.3 / 21.9, 20.3 /
15.6, 21.9 / 25.0 at steps 50-200, FrozenLake 42.2 / 64.1 at 200, simple Sokoban's training success 23%
-> 29% per 50 steps (stopped at step 209): no better.

Where the row's larger-room gain comes from (`python bench/greedy_probe.py MODEL --config
configs/agentic/learning/multi_env_grpo.yaml --tag LargerSokoban --episodes 256 --first-move`, and
`--tag SimpleSokoban`; the probe renders the feedback line as the env manager does; greedy, 256 held-out
rooms; the row's SFT and final models): larger room 16.4% -> 21.9% success, stuck (the last three
moves changed nothing) 36% -> 32% of the episodes; simple room 13.7% -> 18.8%, stuck 47% -> 29%. The
line breaks a loop only where the model answers the room with the line otherwise than without it, and
with a move that does something; a greedy policy that answers it with a blocked move meets the same
prompt again. RL made the policy commit (top first-move probability 0.44 -> 0.75 in the larger room,
0.47 -> 0.83 in the simple one) without choosing better: the top first move is optimal in 54% of the
larger rooms before and 56% after, 47% and 48% in the simple ones.

Longer, and Sokoban alone (from the row's SFT model, seed 42, 128 held-out episodes per validation env
and mode; greedy / sampled in %; step 0: FrozenLake 15.6 / 28.1, larger Sokoban 20.3 / 12.5, different
symbols 3.9 / 9.4). The row's recipe for 600 steps (`max_steps=600
actor_train.training_args.num_training_steps=3600 val_batch_size=384`; 45 minutes beside other runs):
simple Sokoban's training success 25, 26, 23, 30, 25, 30, 32, 33, 40, 34, 41, 35% per 50 steps (it does
learn, from step ~300), FrozenLake 72.7 / 71.9 from step 400 on, and the larger room falls as the
simple one rises: 22.7 / 19.5, 18.8 / 15.6, 12.5 / 9.4, 11.7 / 10.9, 14.1 / 11.7, 9.4 / 7.0 at steps
100-600 (different symbols 0.8 / 1.6 at the end). Simple Sokoban alone (`'train_env_manager.tags=[SimpleSokoban]'
'train_env_manager.num_groups_partition=[8]'`, lr 5e-4, betas (0.9, 0.95), no trust region, 300 steps):
training success 21, 20, 21, 23, 30, 30% per 50 steps; on 256 held-out rooms of each (`roll run
configs/agentic/learning/multi_env_grpo.yaml pretrain=MODEL max_steps=1 val_batch_size=512
'val_env_manager.tags=[SimpleSokoban,LargerSokoban]'`, step 0's validation) the simple room goes 13.7 / 19.9 -> 23.0 / 25.0 and the larger one 18.4 / 10.9 -> 17.6 / 17.2 (13-21 greedy at every
validation); the same without the feedback line (every template `{observation}`): training success up
to 35%, the larger room 17.2 / 14.8 -> 21.9 / 21.9. So the larger room does not wait on simple
Sokoban: learning the 6x6 room better, with or without FrozenLake, leaves the 8x8 room where it
started or lowers it. What RL adds there is early (commitment and fewer loops, peak near step 100),
before the tiny model specialises on the trained room.

Other variants from the row's SFT model (same validation): simple Sokoban's optimizer (lr 5e-4, betas
(0.9, 0.95)) with the trust region kept, 300 steps: FrozenLake 72.7 / 68.8 at the end, the larger room
22.7 / 21.1, 23.4 / 22.7, 18.8 / 27.3, 16.4 / 16.4, 21.1 / 21.9, 20.3 / 18.8 at steps 50-300, simple
Sokoban's training success 24, 24, 18, 24, 19, 33% per 50 steps. Six Sokoban and two FrozenLake
groups per step (`'train_env_manager.num_groups_partition=[6,2]'`): with that optimizer the trust
region stopped 43-53% of the updates (`actor/ppo_kl` 0.012-0.015 per step) and the larger room fell to
11.7 / 12.5 at step 50 (stopped at 84); at the row's lr, 18.0 / 12.5 at 50 and training success 23 ->
16% (stopped at 100). The feedback line naming the move ("Your last action, Up, changed nothing.",
demonstrations rendered the same way; `python bench/learning.py --envs multi`, 1450 s of RL beside the
600-step run): the SFT start was weaker (greedy probe: 15 and 26 successes in 256 simple and larger
rooms, against the row's 35 and 42; stuck as often), the larger room went 12.5 / 9.4 -> 25.0 / 25.0
(+12.5, from the lower start to the row's end), FrozenLake only 18.8 / 28.1 -> 26.6 / 35.9 (+7.8;
training success 30 -> 38%); not kept.

The KL loss to the SFT model (now multi_env_grpo.yaml: `use_kl_loss: true`, `kl_loss_coef: 0.1`, a
reference worker holding the SFT weights): it keeps the policy near the SFT model where RL finds
nothing to gain, the larger room among them, while the rewarded envs still move. From the row's
previous SFT model with 128 episodes per env and mode: the larger room 22.7 / 14.8, 23.4 / 21.1,
18.8 / 19.5, 28.9 / 25.8, 28.9 / 22.7, 29.7 / 22.7 at steps 50-300 (without it 26.6 / 29.7 at the end
on 64 episodes, and falling from step 200 in the 600-step run), FrozenLake 64.8 / 64.1 at 300, different
symbols 6.2 / 9.4. The chain with it, validated on 64 episodes per env and mode as it then was (`python bench/learning.py --envs multi`, seed 42:
demos 4 s, SFT 128 s, RL 1020 s: 19 minutes, alone but for a short test run at its start): FrozenLake 18.8 / 26.6 -> 62.5 /
62.5 (+35.9), the larger Sokoban 20.3 / 12.5 -> 32.8 / 26.6 (+12.5; 25.0 / 21.9 at step 100, 31.2 / 28.1
at 200), the different symbols 4.7 / 14.1 -> 7.8 / 10.9 (-3.1). The KL term costs a reference forward
per batch (RL 3.4 s per step here). A standard error of about 5 points per rate at 64 episodes holds
for these figures too: the larger room's +12.5 is above the bar by less than one standard error.

Firmer measurements say the larger room's gain is about +8, short of the bar (from the row's SFT model,
128 episodes per env and mode: `roll run configs/agentic/learning/multi_env_grpo.yaml pretrain=<the row's
SFT final_model> val_batch_size=384` and the change; greedy / sampled, start 20.3 / 12.5). As configured
but 450 steps (`max_steps=450 actor_train.training_args.num_training_steps=2700`, 48 minutes beside other
runs): 24.2 / 17.2, 25.0 / 17.2, 21.9 / 24.2, 25.0 / 21.1, 25.0 / 25.8, 19.5 / 23.4, 22.7 / 25.8, 26.6 / 28.9,
28.1 / 27.3 at steps 50-450 (+7.8 at the end); FrozenLake 15.6 / 28.1 -> 70.3 / 69.5, the different symbols
3.9 / 9.4 -> 6.2 / 4.7. Twice the lr (`actor_train.training_args.lr=4e-4`, 300 steps): 16.4 / 9.4, 27.3 /
28.9, 28.9 / 27.3, 30.5 / 31.2, 28.9 / 25.8, 29.7 / 27.3 (+9.4; FrozenLake 65.6 / 64.1); the same with seed 43
(other rollouts and validation rooms; start 20.3 / 21.1): 14.8 / 18.8, 14.8 / 21.9, 18.8 / 22.7, 18.0 / 21.1,
17.2 / 21.9, 17.2 / 24.2 at steps 50-300 (-3.1; FrozenLake 14.8 / 31.2 -> 44.5 / 57.8). Six Sokoban and two FrozenLake groups per step with the KL loss: 12.5 / 10.9 at 50, 14.8 /
14.1 at 100 (stopped). With the earlier SFT model (above) 29.7 / 22.7 at 300 (+9.4). So RL from this SFT
start lifts the larger room's sampled success by 10-15 points with seed 42 and its greedy success by 8-9, and
with seed 43 neither; the 64-episode chain's +12.5 is the high end of that spread. The chain now
validates on 128 episodes per env and mode (multi_env_grpo.yaml `val_batch_size: 384`) and is the table's
row (`python bench/learning.py --envs multi`, seed 42, alone: demos 2 s, SFT 128 s, RL 1117 s, 21 minutes):
FrozenLake 15.6 / 28.1 -> 64.8 / 64.1 (+35.9), the larger room 20.3 / 12.5 -> 22.7 / 14.8, 23.4 / 21.1,
18.8 / 19.5, 28.9 / 25.8, 28.9 / 22.7, 29.7 / 22.7 at steps 50-300 (+9.4, short of +10), the different
symbols 3.9 / 9.4 -> 6.2 / 9.4 (0.0).

Rooms of one row length (roll/Sokoban-v0 `canvas`, new; docs/envs/sokoban.md). Every cell is one
token, so the cell above another is one row back: 7 tokens in the 6x6 room, 9 in the 8x8 one, and a
model that learnt "above" at 7 reads another cell at 9. It does (`python bench/greedy_probe.py
<the row's final_model> --config <multi_env_grpo.yaml with canvas: 8 on SimpleSokoban> --tag
SimpleSokoban --episodes 256`): the row's RL model solves 27.0% of 256 held-out 6x6 rooms drawn plainly
and 18.4% of the same rooms drawn at the top left of an 8x8 grid of walls (moves that change nothing
51% -> 67%). With every Sokoban room on an 8x8 canvas from the demonstrations on, the SFT model reads
the larger room as well as the trained one: a Sokoban-only SFT (2000 clean demonstrations, 300 steps,
as the Sokoban chain) puts its top first move on an optimal one in 40% of 256 simple and 29% of 256
larger rooms when drawn plainly, 38% and 38% on the canvas (greedy success in the larger rooms 2.3%
-> 10.9%). RL does not build on it. The multi-env chain with the canvas on all three Sokoban tags
(seed 42, 128 episodes per env and mode, beside a second run): the larger room 21.1 / 10.2 -> 16.4 / 12.5,
13.3 / 15.6, 12.5 / 14.8 at steps 50-150, FrozenLake 33.6 / 25.8 -> 72.7 / 73.4, the different symbols
6.2 / 7.8 -> 12.5 / 11.7, simple Sokoban's training success 23, 21, 19, 22% per 50 steps (stopped at
150; without the KL loss the larger room 10.9 / 12.5 at 100); its step-150 model: 16.4% of the simple
rooms (SFT 14.5%), 9.0% of the larger ones (SFT 12.9%), top first move optimal 48% and 31% (SFT 49% and
41%). The Sokoban recipe alone (sokoban_grpo.yaml, validated on 128 simple and 128 larger rooms,
200 steps; `roll data demos`, `roll run configs/agentic/learning/sokoban_sft.yaml` and `roll run` of a
config that adds the LargerSokoban tag to sokoban_grpo.yaml's validation, the two side by side): drawn
plainly, simple 4.7 / 21.9 -> 18.0 / 24.2, 11.7 / 24.2, 21.1 / 27.3, 29.7 / 32.8 at steps 50-200 and larger
3.1 / 7.0 -> 2.3 / 3.1, 3.1 / 3.9, 2.3 / 4.7, 3.1 / 2.3; on the canvas simple 5.5 / 17.2 -> 6.2 / 15.6,
3.1 / 11.7, 10.2 / 18.0 and larger 9.4 / 8.6 -> 6.2 / 8.6, 3.9 / 7.8, 7.8 / 7.0 at steps 50-150 (stopped). What RL
teaches the tiny model in one room size does not carry to the other even where both are drawn alike:
the row length is one cause of the weak transfer at SFT time, not what holds RL back. The chain keeps
plain rooms. (The plain Sokoban run also showed a format collapse that heals itself: at step 70 every
answer became unparseable after one update of `actor/ppo_kl` 1.0, and the few valid answers, 0.2-0.6%
of them, carried the batch's advantage back: 90% valid again by step 82, 99% by 86.)

The small model (`roll-tiny://small`, about 10M parameters against the tiny one's 1.2M) on the row's
demonstrations, otherwise the row's recipe (`roll run configs/agentic/learning/sokoban_sft.yaml
pretrain=roll-tiny://small ...` 600 steps, then multi_env_grpo.yaml from it): SFT 1138 s beside the test
suite, RL 24 s per step alone (a median: 13.6 s training, 7.3 s the KL loss's reference forward, 3.3 s
rollouts), so 300 steps would take two hours, past the chain's 45 minutes. It starts lower (FrozenLake
11.7 / 15.6, the larger room 8.6 / 2.3, the different symbols 3.9 / 10.2) and at the row's lr had moved
none of them by step 50 (13.3 / 19.5, 6.2 / 4.7, 0.8 / 10.2; stopped).

Which trained env lifts the larger room (from the row's SFT model, seed 42, 128 episodes per env and
mode; start 20.3 / 12.5). FrozenLake alone (`'train_env_manager.tags=[FrozenLake]'
'train_env_manager.num_groups_partition=[8]'`, 300 steps, 893 s beside another run): 16.4 / 16.4, 18.0 /
23.4, 18.0 / 18.8, 21.1 / 23.4, 17.2 / 18.8, 19.5 / 21.1 at steps 50-300 (FrozenLake 15.6 / 28.1 -> 77.3 /
73.4): sampled success rises by about 9, greedy not at all. Two Sokoban and six FrozenLake groups per
step (`num_groups_partition: [2, 6]`, the chain rerun with --reuse): 24.2 / 18.8, 21.9 / 13.3, 15.6 / 14.8,
14.1 / 13.3 at steps 50-200 (stopped). With the Sokoban-only runs above (the larger room flat or falling),
the row's +9.4 needs both envs in the batch, at the row's even split.

Seeds, sample size and three more variants (from the row's SFT model; greedy / sampled in %). On 256
held-out episodes per env and mode (`roll run configs/agentic/learning/multi_env_grpo.yaml
pretrain=MODEL max_steps=1 val_batch_size=768`, step 0's validation) the row's SFT and final models
give the larger room 18.4 / 10.9 -> 28.1 / 19.9 (+9.7 / +9.0) and FrozenLake 17.2 / 28.1 -> 66.8 / 61.7:
more rooms measure the row's +9.4 again. The row's recipe with seed 43 (other rollouts and validation
rooms; 300 steps, 32 minutes beside another run): the larger room 20.3 / 21.1 -> 14.1 / 25.8, 22.7 /
26.6, 26.6 / 26.6, 22.7 / 20.3, 24.2 / 25.0, 21.9 / 24.2 at steps 50-300 (+1.6), FrozenLake 14.8 / 31.2
-> 62.5 / 58.6, the different symbols 3.9 / 9.4 -> 5.5 / 8.6; with seed 44 (26 minutes beside the test
suite): the larger room 20.3 / 12.5 -> 21.1 / 19.5, 13.3 / 23.4, 21.1 / 18.8, 25.0 / 20.3, 21.9 / 18.8, 24.2 /
21.1 at steps 50-300 (+3.9 greedy, +8.6 sampled), FrozenLake 14.8 / 28.9 -> 43.0 / 56.2, the different
symbols 3.9 / 8.6 -> 10.2 / 13.3. What RL adds to the larger room moves with the seed by as much as the
gain itself: +9.4, +1.6 and +3.9 with seeds 42, 43 and 44. Twice the episodes per step (`rollout_batch_size=128
'train_env_manager.num_groups_partition=[8,8]' actor_train.training_args.num_training_steps=3600
train_env_manager.max_concurrent_episodes=128`, seed 42, 48 minutes beside another run): the larger
room 22.7 / 18.8, 30.5 / 25.0, 17.2 / 21.1, 31.2 / 24.2, 30.5 / 21.1, 29.7 / 24.2 at steps 50-300 (+9.4;
on 256 episodes per mode 29.7 / 20.3, +11.3 / +9.4 against the SFT model's 18.4 / 10.9), FrozenLake
71.1 / 74.2, simple Sokoban's training success 24, 24, 24, 31, 38, 40% per 50 steps. Rollouts at
temperature 0.7 (`actor_infer.generating_args.temperature=0.7`, which the sampled validation uses
too; start 20.3 / 13.3): 26.6 / 23.4, 21.1 / 22.7, 22.7 / 21.1, 18.8 / 21.9, 22.7 / 22.7, 21.9 / 23.4 at
steps 50-300 (+1.6), FrozenLake 66.4 / 71.1. The SFT and final weights averaged, (1 - a) SFT + a RL
(greedy probe, 256 rooms each): the larger room 16.4% (SFT), 23.8% (a = 0.5), 29.7% (0.75), 30.9%
(RL), FrozenLake 17.2, 38.7, 57.4, 66.8%: no mixture beats the trained model."""


WEBSHOP_NOTES = """WebShop (`--envs webshop`, configs/agentic/learning/webshop_*.yaml; `python bench/webshop_probe.py`
probes a model page by page; in the order measured, the chain as configured now in the last two
paragraphs): roll/WebShop-v0, step mode without history, each prompt the current
page alone with the goal's instruction at its top, `max_new_tokens` 40, 8 turns, format penalty
0 as in the original (was -0.5, then -0.1, see below), GiGPO (step_weight 1, balance_episodes) at lr 2e-4 with the KL trust
region `early_stop_kl: 0.02`, 32 episodes per step in groups of 8 (a group shares its goal), 60
steps, validation every 20 on 64 held-out test goals per split and decoding mode; SFT on
1000 epsilon-0.1 expert episodes on training goals (92.6% of them buy the target; 5185 turns).
What makes it hard for the tiny model, measured with the tiny tokenizer on the clean expert's
pages (100 test goals): prompts of 67 tokens on the search page, 695 on a results page (10
products: id, title, price) and 242 on an item page, 20% less without the list of available
actions; the expert needs 4.5 turns (search, product, one or two options, buy); its answers
take 21 tokens for a search (the goal's product type and attributes) and 8 for a click (a product
id is 8 tokens of letters and digits, copied from the page). Which skills matter, measured with
scripted policies on the test goals: search with the goal's words, open the top hit, click the
goal's options, buy: 65% success (mean reward 0.90; the whole instruction as the query does as
well, the product type alone 20%, mean reward 0.68); random valid actions: 0%. So the policy
must copy the goal into the query (about 20 tokens), copy a product id from a fixed place on the
results page and copy the option value. The easier split the chain trains on
(webshop_rl_base.yaml) keeps the reward, pages and actions and shortens what is read: 3 products
per results page (236 tokens; the expert pages on when the target ranks lower), no list of
available actions, goals with at most one option (243 of the 500 test goals, 519 of the 1160
training goals; expert 4.4 turns, top-hit policy 70%, random 0%). WebShopFull is every test goal,
10 products per page, same prompts, validated only. Model: the tiny one (1.2M parameters): the
small one (10M) costs about 8 times as much per token and the chain has to fit in 45 minutes on
2 shared cores (here SFT ran at 6 s per step and RL at 30-50 s, beside 2-3 other jobs).
What SFT teaches, and when (`python bench/webshop_probe.py --model roll-tiny://tiny --train-steps 1500
--every 250 --lr 2e-3`: plain PyTorch on the chain's demonstrations, 32 turns per step, lr decayed
to 0 over the run, probed greedy on the clean expert's pages of 48 held-out easy goals): the
search query names the goal's product type on 6% of search pages after 100 steps and 94-98% from
400-500, with about half of its attributes from 600-750 (the target then in the top 50: 98-100%);
on an item page the model buys at once until about 750 steps and then picks the goal's option
(as the expert: 55% -> 72-74%); a product id is copied from a results page only from about 750
steps (opens a product: 3% at 500, 9% at 750, 26% at 1000, 32% at 1500, the top hit 25%; a
600-step run ends at 0%). The id is the slow part: the ids of the shipped catalog are `B0` and
8 random letters and digits, 8.3 tokens each with the tiny tokenizer, 21% of them 509 distinct
two-letter merges seen a few times each; but a copy of the catalog with `B0` and 8 digits (every
id token a frequent single digit) copied no id after 600 steps either, nor did one product per
results page (a shorter page) after 400: it is the number of steps. The expert used to click the
lower-cased id, as the original's demonstrations do, which tokenizes differently from the page
(the model would have to transliterate); it now writes the id as the page shows it. The chain's
SFT is therefore 1500 steps at lr 2e-3, cosine (webshop_sft.yaml). The earlier 100-step start
(constant 1e-3) was 0% on both splits with 83-88% invalid answers, and 22 RL steps from it stayed
at 0% success while invalid answers fell from 88% to 18% (greedy): it learnt to avoid the format
penalty, not to buy. RL from the probe's 1500-step model (webshop_grpo.yaml, seed 42, 64 held-out easy goals per
decoding mode): held-out success 18.8% greedy, 7.8% sampled at step 0 (the full benchmark: 0 / 0;
the training goals, which the demonstrations covered: 41-56% at steps 1-3). With the earlier settings
(lr 2e-4, format penalty -0.5, no trust region) it fell to 10.9 / 4.7 at step 15 and training success to 0-12% at steps 16-20
while invalid answers fell from 36% to 10-24%: a miscopied id costs 0.5, so the policy moved away
from clicking ids. With lr 1e-4, `early_stop_kl: 0.02` and format penalty -0.1 for training,
training success held at 25-59% and held-out success was 17.2 / 6.2 at step 15 and 15.6 / 7.8 at
step 30: no collapse, and no gain in 30 steps. The chain's RL stage as first run end to end (format penalty -0.1, the
trust region, lr 2e-4; from the chain's own SFT model, which starts lower than the probe's: 9.4 / 6.2
held-out easy, 0 / 0 full) collapsed: training success 59% at step 1, 28-44% to step 15, 0-3% from step
18, every episode running to the 8-turn limit, and held-out 0 / 0 at step 20 (run stopped there). The
probe (`python bench/webshop_probe.py --model <step-20 checkpoint> --goals 24`) shows what it learnt:
on results pages the SFT model opens a product 21% of the time (52% of its answers are not an action
on the page, mostly miscopied ids) and pages on 27%; after 20 steps it opens none and pages on 91%
(`click[Next >]`, a valid action: invalid answers fell from 25-46% to 2-9%). A miscopied id costs the
format penalty, a page turn costs nothing, and the policy moved from the one to the other. With format
penalty 0 (the original's reward: only a purchase counts; now webshop_rl_base.yaml), 20 steps from the same
start (beside two other runs, 60-75 s per step): training success held (38-59%, 56% at step 20) and held-out
easy ended at 7.8 / 4.7 (from 9.4 / 6.2; 64 goals, a standard error of about 3.5 points); on results pages the
probe's model opens a product 18% of the time and pages on 15%: no collapse, and no gain. The SFT stage's trainer runs on two
CPUs (webshop_sft.yaml `num_cpus_per_worker: 2`): Ray sets a worker's torch threads to its CPUs,
and with one thread a step took 3.5-3.8 s, with two 2.1-2.6 s. A step's time was mostly attention
under the batch's mask and the LM head over prompt columns; with micro-batches of similar lengths cut
to their longest row, run without a mask, and the head on the answer columns only (see Train step), it
takes 1.6 s alone (1500 steps: about 40 minutes on this machine, so the WebShop chain does not fit in
45 minutes here: SFT alone takes most of it).

RL on goals the demonstrations never showed. The chain's SFT model (1500 steps; its loss 0.04-0.1
from step 1200: about 9 passes over the 5185 demonstrated turns) succeeds on 41-56% of the training
goals and 9 / 6 (greedy / sampled) of the held-out ones: much of what it does on a training goal is
recall. RL on the training goals then rewards recall, which does not reach a new goal; on other
goals only what carries over (the goal in the query, an id copied from the page, the option) earns
reward. webshop_rl_base.yaml defines those goals as `WebShopRL` (the easier split of the shipped
"validation" goals: neither demonstrated nor validated on). From the chain's SFT model (seed 42,
`roll run configs/agentic/learning/webshop_grpo.yaml pretrain=<SFT final_model>
'train_env_manager.tags=[WebShopRL]' max_steps=20 eval_steps=20`, beside the test suite, 35-45 s
per step; the lr 5e-4 run with `actor_train.training_args.lr=5e-4
'actor_train.training_args.adam_betas=[0.9,0.95]' actor_train.training_args.lr_scheduler_type=cosine
actor_train.training_args.num_training_steps=300`): its training
success on them was 0-16% (return 0.1-0.3) in the first steps, and RL made it worse. At lr 5e-4
with beta2 0.95 and a cosine (the grid envs' optimizer): invalid training answers 57% (steps 1-5)
-> 77% (6-10) -> 75% (16-20), the sampled tokens' mean -log p 0.72 -> 0.90, held-out easy 9.4 / 6.2 ->
1.6 / 0.0 at step 20 (invalid answers 39 / 46% -> 77 / 77%; stopped). At lr 2e-4 (the chain's) the same,
slower: invalid answers 47% -> 50% -> 61% (steps 11-15), -log p 0.59 -> 0.79, held-out easy
9.4 / 6.2 -> 10.9 / 3.1 at step 20 (invalid answers 39 / 46% -> 43 / 60%; 64 goals per mode).
A reading not measured further: with successes this rare, most of a batch's advantage lies on
failing episodes, whose sampled tokens (largely miscopied ids) are pushed down, and the tiny model's
probability moves to other text rather than to the right id.

Products by their place on the page, and demonstrations that buy the first match
(webshop_rl_base.yaml: `product_refs: index`, still; `expert_target: first_match`, since replaced by
the visible expert below; docs/envs/webshop.md). A
results page names its products 1 to 3 and `click[1]` opens the first, so no id has to be copied;
and the expert no longer pages to the goal's own product (85 page turns over 200 easy test goals:
the page does not tell it from its neighbours) but buys the first product that scores as well with
the goal's options (5 page turns; 4.0 turns per goal instead of 4.4; 95.1% of 1000 epsilon-0.1
demonstrations buy with reward 1). The same probe on these settings (`python bench/webshop_probe.py
--model roll-tiny://tiny --train-steps 800 --every 200 --lr 2e-3 --goals 48`), at steps 200 / 400 / 600 / 800: the query names the product type on 56 / 100 / 98 / 100% of search pages
and copies 9 / 46 / 55 / 57% of the attributes; a product is opened from 100 / 90 / 94 / 90% of
results pages (the top hit 100 / 90 / 90 / 85%); on an item page the model does what the expert does
on 56 / 70 / 74 / 77% (valid answers 76 / 91 / 94 / 97%). By id the 1500-step probe opened a product
from 32% of results pages. Numbered products with the old expert are not enough: at step 200 and 400
that model paged on from 75% and 51% of results pages and opened a product from 25% and 49%.
GRPO from the probe's 800-step model on goals it never saw (`roll run
configs/agentic/learning/webshop_grpo.yaml pretrain=<that model> 'train_env_manager.tags=[WebShopRL]'
max_steps=40 eval_steps=20`, seed 42, beside the test suite: 22-35 s per step): held-out easy 23.4 /
14.1 at step 0 (the id chain's SFT model: 9.4 / 6.2), the full benchmark 4.7 / 7.8; at step 20 15.6 /
12.5 and 7.8 / 10.9 (64 goals per split and mode; stopped there). Training success on the unseen goals
stayed at 0-25% per step (32 episodes) with no trend and invalid answers at 13-33%. The start is now
2.5 times the id chain's; RL from it has not gained yet. The chain's SFT is now 800 steps
(webshop_sft.yaml: about 21 minutes alone at 1.6 s per step, where 1500 took 40).

The chain with numbered products and first-match demonstrations, alone on the machine (seed 42;
held-out easy goals, greedy / sampled success in %, 64 goals per mode): SFT 1337 s, step 0 26.6 / 9.4
(invalid answers 14 / 25%; full benchmark 9.4 / 7.8), RL as configured 17.2 / 9.4 at step 20
(stopped there). From the same SFT model, 20 steps each (`roll run configs/agentic/learning/webshop_grpo.yaml
pretrain=<SFT final_model> max_steps=40 eval_steps=20` and the change): the grid envs' optimizer
(lr 5e-4, Adam beta2 0.95, cosine) 4.7 / 4.7, training success 0-19% from step 4; format penalty
-0.1 on the training env 18.8 / 6.2. What the invalid answers are (that run's 96 episodes of steps
1-3, `tracking.dump_trajectories=32`): 119 of 159 on product pages, a click on the goal's option that
the product does not offer, and the episode then clicks it again until the turn limit. With the
expert's query the first matching product is the top hit on 144 of 200 easy test goals and ranks
2nd, 3rd or lower on 41, 11 and 4; the first-match expert clicked it directly, a choice a results
page (titles and prices, no options) does not show, so the SFT model learnt to open the top hit and
to click the goal's option whether or not the page offers it.

Demonstrations that decide from the pages (now webshop_rl_base.yaml: `expert_target: visible`,
`mark_viewed: true`; docs/envs/webshop.md): the expert opens the results in ranking order, buys on
a product page that offers the goal's option within its price and goes back (`click[< prev]`) from
one that does not; a results page marks the products opened since the search ("Viewed"), so a
policy that sees one page can skip them. With its own query this expert buys what first-match buys
(98% of 200 easy test goals within 8 turns, 4.7 turns instead of 4.0); 80.5% of 1000 epsilon-0.1
demonstrations buy with reward 1 (5240 turns; the noise now costs more of the 8 turns). SFT 800
steps, 1290 s: step 0 23.4 / 14.1 with invalid answers 6 / 11% (full benchmark 3.1 / 1.6). RL from it,
20 steps each, alone: as configured 15.6 / 9.4 (stopped at step 20 of the chain; invalid 13 / 18%);
`algorithm.advantage_floor: 0` (new: only better-than-average actions are pushed up, nothing is
pushed down; docs/algorithms.md) 15.6 / 4.7 (invalid 12 / 20%: without any push-down they still grow,
so they are pushed up: an invalid turn inside an episode that bought shares that episode's
advantage); `advantage_floor: 0` with format penalty -0.5 on the training env 9.4 / 6.2 (invalid
12 / 10%). What that run learnt (its dumped episodes, steps 1-4 against 17-20, 128 each): episodes
that buy nothing 49 -> 7, purchases 79 -> 121, successes 21 -> 14; on product pages `click[< prev]`
21% -> 3% and `click[buy now]` 20% -> 42%; on results pages the top hit 54% -> 85%. The partial reward
(WebShop scores a purchase by the share of attributes, options and price it matches: about 0.5 for
the top hit bought as it is) makes buying the first product opened worth more, on average, than
going back for the one that matches, which risks the turn limit: the policy learns the shortcut and
success falls. The same with a training reward that pays only a full match (`purchase_reward:
success` on the training env; validation keeps WebShop's reward): 12.5 / 7.8 at step 20; training
successes 16 -> 19 of 128 (steps 1-4 against 17-20) but purchases 64 -> 90 and `click[< prev]` on
product pages 21% -> 12%: at -0.5 per invalid turn, buying anything (0) still beats an episode of
invalid turns. Without the penalty and the floor (`purchase_reward: success` alone): 7.8 / 3.1, invalid
answers 32 / 36% (from 6 / 11%); training successes 13 -> 20 of 128 while invalid answers on product
pages rose 38% -> 65%: a free invalid turn inside a successful episode shares its advantage. Every
variant so far either rewards invalid turns inside good episodes (penalty 0) or makes buying at once
the safe answer (a penalty). With the success reward, format penalty -0.1 and GiGPO's step part
weighed twice (`algorithm.adv_estimator_args.step_weight=2.0`): 0.0 / 0.0 at step 20 (invalid
answers 1 / 7%); on product pages `click[< prev]` 31% -> 64%, episodes that buy nothing 62 -> 81 of
128: the policy learnt to leave every product page, the other way out.

Never rewarding an invalid turn (`algorithm.invalid_action_advantage`, new: the advantage of every
turn the env rejected is capped; docs/algorithms.md). From a new SFT model on the same
demonstrations (800 steps, 568 s alone: 21.9 / 10.9 at step 0), seed 42, the success reward on the
training env: cap 0, 20 steps: 17.2 / 6.2 (invalid 18 / 16%); cap -0.5: 7.8 / 6.2 (invalid 2 / 7%;
its episodes, steps 1-4 against 17-20: `click[< prev]` on product pages 23% -> 56%, purchases
75 -> 46 of 128, successes 16 -> 3: pushed off invalid clicks, the policy leaves product pages, as
with the step part weighed twice). Cap 0 with `advantage_floor: 0` (nothing pushed down, invalid
turns never pushed up; 100 steps planned, validation every 25): 10.9 / 4.7 at step 25 (stopped);
the same with WebShop's reward: 10.9 / 9.4 (25), 17.2 / 14.1 (50), 12.5 / 9.4 (75; stopped; top
hit on results pages 65% -> 77%, `buy now` on product pages 21% -> 37%); trained on the unseen
`WebShopRL` goals: training success 0-25% per step (stopped at step 24); 12 turns per training
episode: 15.6 / 7.8 at step 25 (stopped).

What that SFT model cannot do (`python bench/webshop_probe.py`, 64 held-out goals): after its own
search the goal's product is on the first results page for 25% of the goals (70.5% of 200 with the
expert's query), and it copies half the goal's attributes. The expert's keywords are always words
of the instruction (all 519 training and 243 test easy goals); `expert_query: instruction` (new,
now in webshop_rl_base.yaml; docs/envs/webshop.md) demonstrates the instruction up to its price
clause instead, one span to copy: the goal's product ranks where it does for the keywords on all
200 easy test goals and the visible expert still solves 98% in 4.7 turns; an answer is 37 tokens
on average, at most 60 (`max_new_tokens` now 64). SFT on those (814 s beside another run): step 0
20.3 / 15.6 and the full benchmark 9.4 / 7.8 (3.1 / 3.1 for the keyword model); the probe: the product on the first
page for 27%, half the attributes, 9% exact copies: the tiny model copies the span hardly better
than it picked the words. The chain end to end (`python bench/learning.py --envs webshop`: demos
3 s, SFT 814 s, RL 1014 s for 60 steps, 30.5 minutes beside other runs): 20.3 / 15.6 -> 26.6 / 9.4
(step 20) -> 12.5 / 7.8 (40) -> 7.8 / 10.9 (60), invalid answers 8 / 11% -> 25 / 16%, full benchmark
9.4 / 7.8 -> 1.6 / 3.1 (`RESULT webshop_gain_pp=-12.5`). From the same SFT model: the cap at 0
(WebShop's reward): invalid answers stay at 6-13%, but 12.5 / 7.8 at step 20 and 1.6 / 3.1 at 40;
its episodes (steps 1-4 against 30-40) buy 59% -> 98% of the time, `buy now` on product pages
18% -> 56%, `< prev` 27% -> 4%, successes 24% -> 11%: the partial-reward shortcut. The success
reward with cap and floor 0: 12.5 / 9.4 at step 20 (invalid 24 / 20%). The success reward with the
cap at 0 and sampling at temperature 0.6 (`actor_infer.generating_args.temperature=0.6`, which the
sampled validation uses too: 20.3 / 20.3 at step 0): 6.2 / 6.2 at step 20 and 12.5 / 12.5 at 40, invalid
answers 8 / 9% -> 27 / 27%.
The success reward with the cap at 0 and 8 goals per step instead of 4 (`rollout_batch_size=64`): 20.3 / 7.8
at step 20 and 20.3 / 20.3 at 40 (invalid answers 8 / 12% -> 21 / 22%; training success 6-36% per step, no
trend): the first variant that ends no lower than it started, and no gain.

What the invalid answers are (the success reward with cap and floor 0, steps 15-22): on product pages an option the page
does not show (`click[oak]` where it offers white and grey), on results pages an option value,
and after a garbled search a page without products answered with more garbled text. Nothing
pushed an invalid turn up there: the option clicks pushed up in successful episodes carry over to
pages that do not offer the option, because the model does not tell those pages apart. The probe
measures it (`python bench/webshop_probe.py --model M --max-new-tokens 64`, new item-page split,
152 pages on the expert's walk over 64 held-out goals): on a page that offers the goal's option the
SFT model clicks it 40% of the time; on one that lacks it, it goes back 42% and clicks the option
anyway 23%. RL moves both kinds of page the same way: the success reward with the cap at 0 (20
steps) 49% / back 19% / 54%, the cap at -0.5 8% / back 88% / 4%, the chain as configured (60 steps,
the instruction-query model, which starts at the same 40 / 42 / 23) 14% / back 0% / 23%, 8 goals per
step with the success reward and the cap at 0 (40 steps) 63% / back 0% / 62%. A longer
SFT does not teach it either (`python bench/webshop_probe.py --model roll-tiny://tiny --train-steps 1600
--every 400 --lr 2e-3 --max-new-tokens 64`, the chain's instruction-query demonstrations): at steps
400 / 800 / 1200 / 1600 the same three read 17 / 15 / 12, 52 / 46 / 35, 51 / 38 / 27 and 59 / 46 / 31%,
while the goal's product reaches the first results page after the model's search for 22, 30, 36 and
38% of the goals (attributes copied 29, 50, 56, 59%). Each way
out measured so far fails on that one skill: WebShop's partial reward pays for the top hit bought
as it is (the shortcut), the success reward with free invalid turns grows invalid answers, and a
price on them (format penalty, negative cap, the step part weighed twice) moves the policy off
product pages or into buying at once. RL at 32 or 64 episodes a step has not taught the tiny model to
read whether a page offers the goal's option, and twice the SFT steps add little of it; the next
step is a model that can learn it (the small one costs about 8 times as much per token).
Fresh training goals (the chain as configured now: webshop_rl_base.yaml `fresh_goals: true` on the
training tag, 8000 demonstration episodes, 2000 SFT steps; RL on the success reward at lr 1e-4 with 8
goals per step for 40 steps, with the three settings of the last paragraph). The easier split holds 519 training goals, and the SFT model learnt
them by heart: the probe's 1600-step run ended at a loss of 0.04 while it copied a held-out
instruction exactly into its search on 20% of the goals. `fresh_goals` (roll/WebShop-v0,
docs/envs/webshop.md) draws every training goal anew from the catalog's products by the rules the
shipped goals were made with (envs/webshop/goals.py `FreshGoals`), never the product and options of
a validation or test goal; the visible expert solves 98% of them in 4.6 turns, as it does the
shipped ones. At the old length it changes little (the probe's train mode on 4000 fresh-goal
episodes, 800 steps: exact copies 9%, attributes copied 61%, the goal's product on the first
results page 31%), but the demonstrations no longer run out: 8000 episodes (42,715 turns, 1.5 passes
in 2000 steps) and the chain's SFT probed at its checkpoints (steps 666 / 999 / 1332 / 1665 / 2000)
copies the instruction exactly on 5 / 33 / 52 / 89 / 94% of the held-out search pages, its
attributes 59 / 77 / 94 / 96 / 98%, and puts the goal's product on the first page for 41 / 55 / 67 /
67 / 72% of the goals (the expert's own query: 70.5%). On product pages it does as the expert on
64 / 72 / 76 / 80 / 82% (offers the goal's option: clicks it 44 / 63 / 65 / 76 / 78%; lacks it: goes
back 27 / 27 / 42 / 38 / 50%, clicks the option anyway 35 / 62 / 42 / 50 / 38%). Its held-out start:
70.3 / 43.8 greedy / sampled on the easier split (the 800-step model on the shipped goals: 20.3 /
15.6), 25.0 / 25.0 on the full benchmark (9.4 / 7.8). Stages: demonstrations 9 s, SFT 1673 s (beside
the checkpoint probes).

RL from it. As the chain was configured before (GiGPO on WebShop's score, lr 2e-4, 4 goals per step,
60 steps): 57.8 / 45.3 at step 20, 42.2 / 39.1 at 40, 40.6 / 32.8 at 60 (full 20.3 / 20.3; RL 693 s).
With the success reward, lr 1e-4 and 8 goals per step (as now, before the three changes below; 40 steps, 807 s): 67.2 / 48.4
at 20, 57.8 / 51.6 at 40 (full 26.6 / 25.0; the chain end to end, its RL stage run twice from the same
SFT model, gave these numbers both times: 41.5 minutes with the SFT's 1673 s), training success 49, 59, 56, 59% over steps 1-10, 11-20,
21-30, 31-40. Sampled success rises, greedy falls, and the probe (`python bench/webshop_probe.py --model
<final_model> --max-new-tokens 64`) says why: RL made the greedy search worse (exact copies 94% ->
42%, attributes 98% -> 90%; the goal's product on the first page 72% -> 67%) and turned the product
page into one habit again (clicks the goal's option where offered 78% -> 84%, where lacking 38% ->
77%; goes back 50% -> 19%). A sampled search with a few words wrong still finds the product (BM25),
so episodes with miscopied queries are rewarded as well, and the greedy copy drifts; a greedy policy
that clicks an option its page lacks repeats the invalid answer to the turn limit (no history). A KL
loss to the SFT model (`algorithm.use_kl_loss=true algorithm.kl_loss_coef=0.1` and a `reference` role,
otherwise as configured; 40 steps, 1137 s beside the test suite) kept more of the copy (exact 75%,
attributes 90%, first page 64%) but not the product pages (84% / back 23% / 69%): 64.1 / 51.6 at step
20, 56.2 / 54.7 at 40. With the invalid-turn advantage capped at 0 instead
(`algorithm.invalid_action_advantage=0`; 40 steps, 968 s): 64.1 / 46.9 at 20, 62.5 / 50.0 at 40, the
search copy 81% exact, product pages 83% / back 27% / 54%: the habit is smaller, and still there. Both together (the KL loss and
the cap; 40 steps, 984 s): 65.6 / 50.0 at 20, 57.8 / 46.9 at 40.
What the drift looks like (greedy search answers of the SFT model and of an RL model on the same
held-out pages): RL repeats attributes ("shea butter and vegan and vegan", "sap groove, sap groove
and sap groove") and swaps one for another the product type often has ("wireless charging case"
for "touch control"). The search deduplicates query words (envs/webshop/search.py), so a repeat
costs nothing and an attribute dropped for it costs little: the direction is free of reward and
the tiny model's copy walks along it. The chain's RL now (webshop_grpo.yaml) centres rewards within
a group without dividing by their spread (`reward_norm: {method: mean}`: a success one turn later
differs by the discount alone, which mean_std blew up to a full advantage), weighs each turn the
same (`loss_agg_mode: seq-mean-token-mean`: with token-mean a 40-token search answer weighed 3 to 8
clicks) and never pushes up an invalid turn (`invalid_action_advantage: 0`). From the same SFT
model, 40 steps each: the first two alone 64.1 / 59.4 at 20, 59.4 / 57.8 at 40 (greedy invalid
answers 7% -> 20%); all three 62.5 / 51.6 at 20, 64.1 / 59.4 at 40 (full 28.1 / 32.8; the table's row until the feedback line below: the chain rerun
with them, `--reuse` keeping its demonstrations and SFT model, gave the same numbers, RL 770 s, 41
minutes in all; its probe: the goal's product on the first page 69%, attributes copied 95%, the
drift mostly gone; product pages: clicks the goal's option where offered 89%, where lacking 81%,
goes back 19%: what the greedy policy loses now is the product page's one habit); the
self-imitation floor with the cap (`algorithm.advantage_floor=0 algorithm.invalid_action_advantage=0`
with mean_std and token-mean) 64.1 / 54.7 at 20, 67.2 / 48.4 at 40; centred rewards alone with rollouts at
temperature 0.6 (sampled validation at 0.6 too: start 70.3 / 59.4) 70.3 / 68.8 at 20, 62.5 / 67.2 at
40, its probe: exact copies 94% -> 73%, the goal's product on the first page 72% -> 64%, back from a
page lacking the option 50% -> 38%; all three at 0.6: 67.2 / 68.8 at 20, 65.6 / 67.2 at 40; all three at half the
lr (5e-5): 68.8 / 48.4 at 20, 67.2 / 50.0 at 40 (less lost, less gained). On all 243 easy test goals (`val_batch_size=243
'val_env_manager.tags=[WebShopTest]'`, one step) the SFT model scores 67.9 / 45.7, the three
together 60.1 / 56.0 and the floor 61.3 / 52.3: the greedy loss is real, not the 64 goals' noise
(a standard error of about 6 points). A shorter SFT start leaves RL more room and does not help
it: 600 steps (7 minutes) start at 1.6 / 3.1, 1100 steps (12 minutes) at 43.8 / 26.6 (full 14.1 /
9.4), and RL from the latter falls or holds (20 steps: the defaults 34.4 / 20.3; micro-batches of 64,
5 optimizer steps a batch instead of 10, 32.8 / 23.4, and with the first two changes 42.2 / 34.4;
training success 22-31% throughout, invalid answers 11% -> 20%). In step mode a mini-batch cannot
exceed the 64 episodes of rollout_batch_size (roll plan), so a batch of about 330 turns is always 5
or more optimizer steps.
Feedback in the prompt (now webshop_rl_base.yaml, every tag: `turn_template:
"{observation}{feedback}"`; roll/rollout/env_manager.py `action_feedback`): after an answer that is no
action on the page (a miscopied option, say) or a click that changes nothing, the next prompt adds one
line saying so, with the env's error; without it the page came back unchanged and the greedy policy
repeated the answer to the turn limit. RL as configured from the previous row's SFT model (trained
without the line; the demonstrations' random actions are valid and hardly ever show it), 40 steps:
73.4 / 43.8 at the start (without the line 70.3 / 43.8), 67.2 / 56.2 at 20, 70.3 / 64.1 at 40 (full
25.0 / 21.9 -> 26.6 / 25.0); greedy episodes truncated 10.9% -> 4.7% (without: 15.6% -> 17.2%),
greedy invalid answers 3% throughout (without: 7% -> 13%). The greedy failures left are purchases of
the wrong product or option, not loops. From the 1100-step SFT model: 43.8 / 26.6 -> 42.2 / 29.7 at
step 20 (stopped). The chain rerun with the line is the table's row (`python bench/learning.py --envs
webshop`, seed 42; 83 of the 42715 demonstration turns show it): 75.0 / 48.4 -> 70.3 / 57.8 at 20 ->
68.8 / 64.1 at 40, full 28.1 / 21.9 -> 28.1 / 28.1; demos 9 s, SFT 2369 s beside the multi-env chain
and another RL run, RL 940 s beside one RL run: 55 minutes, where the same stage sizes took 41 alone
(the previous row). Both ends rose by about 5 points and the gain did not: RL lifts sampled success
by 16-20 points and greedy falls by 3-6. On all 243 easy test goals (as above, one step): the SFT
model 70.4 / 47.3, the chain's end 68.7 / 63.4, where the previous row went 67.9 / 45.7 -> 60.1 / 56.0:
with the line the greedy loss is within the noise (a standard error of about 3 points per model) and
the sampled gain is 16 points. Twice the RL steps from the same SFT model (`max_steps=80`, 1490 s
alone; steps 1-40 repeat the row's run exactly): 68.8 / 65.6 at 60, 70.3 / 62.5 at 80 (full 31.2 /
28.1), training success 59-68% per 10 steps from step 30 on: the sampled policy catches up with the
greedy one and both stay where greedy started.
Where the greedy episodes fail (`python bench/webshop_probe.py --model M --play --goals 243
--max-new-tokens 64`, new: the model plays all 243 easy test goals greedily on the RL prompts, feedback
line included, and each episode is sorted by what the bought product's page shows). The row's SFT model:
70.4% success; 11.1% buy a product over the goal's price limit, 3.3% one whose page lacks the goal's
option, 3.7% the right kind of product with another option, 4.1% one that offers the option within the
price and misses attributes or a product type the page does not show, 7.4% buy nothing in 8 turns. On
the product pages it opens it goes back from 14% of those that offer the option within the price, from
25% of those that offer it over the price and from 67-73% of those that lack it: it reads the option and
hardly the price (a results page and a product page both show it, e.g. `$220.95` against the
instruction's "price lower than 140.00 dollars"). The row's RL model: 68.7% success, 12.3% over the price,
buys nothing 4.5%; on pages that offer the option over the price it clicks the option 97% of the time (87%
within it) and goes back from 3%: RL removed the little price check there was, and fewer episodes run out.
GiGPO's step part alone (`algorithm.adv_estimator_args.episode_weight=0`, new; docs/algorithms.md: a turn
is credited only against the other answers on the same page within its group, so no answer is pushed up
because its episode bought later; from the row's SFT model, 40 steps, 839 s beside a multi-env run):
75.0 / 48.4 -> 71.9 / 62.5 at 20 -> 68.8 / 64.1 at 40 (the row: 70.3 / 57.8 at 20, the same end); on the 243 goals 67.9% greedy,
12.8% over the price, and the option clicked on 100% of the pages that offer it over the price. Can the
model learn the price check at all? The SFT model fine-tuned on product pages alone (the clean expert's
first visits on 20000 fresh training goals: 26942 pages, 16% of them offering the option over the price;
lr 1e-3, 32 pages per step), scored greedily on the 336 pages the expert opens on the 243 test goals: it goes
back from a page that offers the option over the price 26% (start) -> 28% (400 steps) -> 44% (1000) -> 36-59%
(1200-1600), from one within the price 11% -> 8% -> 7% -> 4-12%. About 51,000 pages aimed at the one
decision teach half of it; the RL stage meets about 9 such pages a step (64 episodes), 360 in its 40
steps, with a reward that the option and the product's hidden attributes decide as well. That is why RL
lifts sampled success (fewer random turns) and not greedy: the greedy policy's failures are decisions
the tiny model does not learn from the few hundred examples a 45-minute chain gives RL."""


WEBSHOP_PENDING = "WebShop is not in the table yet: no run of its chain has gained (below)."


@dataclass
class EnvSpec:
    """One env's chain: configs, demonstration noise and sizes."""

    name: str
    tag: str
    sft_config: str
    rl_configs: dict[str, str]
    """Algorithm name -> RL config (grpo always, ppo with --ppo)."""
    epsilon: float
    episodes: int
    sft_steps: int
    rl_steps: int
    eval_steps: int
    overrides: list[str] = field(default_factory=list)
    """Extra overrides for every RL run of this env."""
    demo_sets: list[tuple[str, float, int]] = field(default_factory=list)
    """Several demonstration sets (tag, epsilon, episodes), one file each, all given to SFT
    (the multi-env chain); empty: one set of ``epsilon`` and ``episodes`` for every tag."""
    val_tags: list[str] = field(default_factory=list)
    """Validation tags to report (default: ``tag``)."""
    algo_overrides: dict[str, list[str]] = field(default_factory=dict)
    """Extra overrides for the RL run of one algorithm."""
    checkpoints: bool = True
    """Stages checkpoint (SFT_CHECKPOINTS per SFT run, RL at each validation round) so that an
    interrupted chain resumes under --reuse."""


WEBSHOP_EPSILON = 0.1
SFT_CHECKPOINTS = 6
"""Checkpoints per SFT stage (and RL stages save at each validation round): an interrupted
chain rerun with --reuse resumes its stage from the last one."""
WEBSHOP_SFT_STEPS = 2000


def env_specs(quick: bool) -> dict[str, EnvSpec]:
    specs = {
        "frozenlake": EnvSpec(
            name="frozenlake", tag="FrozenLake", sft_config=f"{CFG}/frozenlake_sft.yaml",
            rl_configs={"grpo": f"{CFG}/frozenlake_grpo.yaml", "ppo": f"{CFG}/frozenlake_ppo.yaml"},
            epsilon=0.5, episodes=1000, sft_steps=300, rl_steps=300, eval_steps=50),
        "sokoban": EnvSpec(
            name="sokoban", tag="SimpleSokoban", sft_config=f"{CFG}/sokoban_sft.yaml",
            rl_configs={"grpo": f"{CFG}/sokoban_grpo.yaml", "ppo": f"{CFG}/sokoban_ppo.yaml"},
            # 2000 clean episodes: the demonstrations, not the SFT length, limit the start (NOTES);
            # 300 steps on them leave a start that reads the room but seldom solves it greedily
            epsilon=0.0, episodes=2000, sft_steps=300, rl_steps=300, eval_steps=50),
    }
    specs["multi"] = EnvSpec(
        name="multi", tag="FrozenLake", sft_config=f"{CFG}/sokoban_sft.yaml",
        rl_configs={"grpo": f"{CFG}/multi_env_grpo.yaml"},
        epsilon=specs["frozenlake"].epsilon, episodes=specs["frozenlake"].episodes,
        sft_steps=600,
        rl_steps=300, eval_steps=50,
        # FrozenLake as in its own chain; Sokoban with a little noise (the multi-env SFT is longer)
        demo_sets=[("FrozenLake", 0.5, 1000), ("SimpleSokoban", 0.1, 1000)],
        val_tags=["FrozenLake", "LargerSokoban", "SokobanDifferentSymbols"])
    # trained on the easier split (webshop_rl_base.yaml), validated on its held-out test goals
    # (the reported gain) and on the full benchmark's (reported next to it)
    specs["webshop"] = EnvSpec(
        name="webshop", tag="WebShopTest", sft_config=f"{CFG}/webshop_sft.yaml",
        rl_configs={"grpo": f"{CFG}/webshop_grpo.yaml"},
        epsilon=WEBSHOP_EPSILON, episodes=8000, sft_steps=WEBSHOP_SFT_STEPS, rl_steps=40, eval_steps=20,
        val_tags=["WebShopTest", "WebShopFull"])
    if quick:
        # Same chain, every stage as small as it goes: the run time is Ray start-ups.
        for s in specs.values():
            s.episodes, s.sft_steps, s.rl_steps, s.eval_steps = 8, 2, 2, 1
            s.checkpoints = False
            s.demo_sets = [(tag, eps, 8) for tag, eps, _ in s.demo_sets]
            s.overrides = ["rollout_batch_size=8", "val_batch_size=4", "train_env_manager.group_size=4",
                           "actor_train.training_args.per_device_train_batch_size=8",
                           *(f"custom_envs.{t}.max_turns=3" for t in
                             dict.fromkeys([s.tag, *s.val_tags, *(t for t, _, _ in s.demo_sets)]))]
            s.algo_overrides = {"ppo": ["critic.training_args.per_device_train_batch_size=8"]}
        # one group per training tag, one validation episode per tag
        specs["multi"].overrides += ["train_env_manager.num_groups_partition=[1,1]", "val_batch_size=3"]
        specs["webshop"].overrides += ["custom_envs.WebShop.max_turns=3", "actor_infer.generating_args.max_new_tokens=16"]
    return specs


# ------------------------------------------------------------------------------ running
_SLOTS: Optional[threading.BoundedSemaphore] = None
"""With ``--jobs N``: at most N stage subprocesses at once (see main)."""


RESUME_ARGS = ("save_steps=", "resume_from_checkpoint=")
"""Overrides that make a stage resumable and do not change what it computes: left out of the
marker's command and of the commands the docs show."""


def _core(cmd: list[str]) -> list[str]:
    return [a for a in cmd if not a.startswith(RESUME_ARGS)]


def _inputs_digest(cmd: list[str]) -> str:
    """What a stage reads besides its command line: each config file it names, composed with its
    ``defaults:`` (an edited config or base config changes it), and each input file or model
    directory (``data.train_files=[...]``, ``pretrain=``: an earlier stage that ran again changes
    it). Its output directory is not an input."""
    from roll.config.loader import load_raw
    h = hashlib.sha256()
    args = _core(cmd)[2:]
    for i, arg in enumerate(args):
        key, _, value = arg.partition("=") if "=" in arg and not arg.startswith("-") else ("", "", arg)
        if key == "output_dir" or (i > 0 and args[i - 1] == "--out"):
            continue
        for item in value.strip("[]").split(","):
            path = Path(item) if Path(item).is_absolute() else ROOT / item
            if not item or not path.exists():
                continue
            h.update(item.encode())
            if path.suffix in (".yaml", ".yml"):
                h.update(json.dumps(load_raw(path), sort_keys=True, default=str).encode())
            elif path.is_file():
                h.update(path.read_bytes())
            elif path.is_dir():  # a model directory: its top-level files
                for f in sorted(p for p in path.iterdir() if p.is_file()):
                    h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def run_cmd(cmd: list[str], log: Path, commands: list[str], reuse: bool = False,
            out_dir: Optional[Path] = None) -> float:
    """Run one stage as a subprocess (output to ``log``); its wall time in seconds.

    With ``reuse``, a stage whose marker (next to its log) records the same command, the same
    inputs (``_inputs_digest``: configs as composed, input files, the model it starts from) and a
    clean exit is not run again: its recorded wall time is returned (a later invocation for
    another env, or after an interruption, continues the chain). A ``roll run`` stage that
    checkpoints (``save_steps=``, ``out_dir`` its output_dir) and was interrupted resumes
    from its last checkpoint under ``reuse`` (``resume_from_checkpoint=true``); its wall time
    then adds the interrupted attempts' time up to their last checkpoint (kept in a
    ``.running.json`` next to the log)."""
    # as a reader would type it: `roll ...` from the repository root
    commands.append(shlex.join(["roll", *_core(cmd)[3:]]).replace(f"{ROOT}/", ""))
    marker = log.with_suffix(".done.json")
    running = log.with_suffix(".running.json")
    digest = _inputs_digest(cmd)
    if reuse and marker.exists():
        done = json.loads(marker.read_text())
        if _core(done.get("cmd", [])) == _core(cmd)[2:]:  # the interpreter path may differ between machines
            if done.get("inputs", digest) == digest:  # markers written before digests: the command decides
                print(f"$ {shlex.join(cmd)}\n  reused ({done['wall_s']:.0f} s, {marker})", flush=True)
                return float(done["wall_s"])
            print(f"  {marker}: same command, but its config or input files changed since: running it again",
                  flush=True)
    marker.unlink(missing_ok=True)
    earlier = 0.0
    if reuse and out_dir is not None and running.exists() and any(a.startswith("save_steps=") for a in cmd):
        cmd = [*cmd, "resume_from_checkpoint=true"]
        before = json.loads(running.read_text())
        latest = out_dir / "checkpoints" / "latest"
        ckpt_t = latest.stat().st_mtime if latest.exists() else 0.0
        earlier = before["earlier_s"] + max(0.0, ckpt_t - before["start"])
        print(f"  an earlier attempt was interrupted: resuming from its last checkpoint, if any "
              f"({earlier:.0f} s of earlier attempts counted)", flush=True)
    running.parent.mkdir(parents=True, exist_ok=True)
    running.write_text(json.dumps({"start": time.time(), "earlier_s": earlier}))
    print(f"$ {shlex.join(cmd)}", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with _SLOTS or contextlib.nullcontext():
        wall = run_logged(cmd, log, "stage") + earlier
    print(f"  done in {wall:.0f} s", flush=True)
    marker.write_text(json.dumps({"cmd": cmd[2:], "wall_s": wall, "inputs": digest}))
    running.unlink(missing_ok=True)
    return wall


def roll_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "roll.cli", *args]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def curves(rows: list[dict[str, Any]], tag: str) -> dict[str, list[tuple[int, float]]]:
    """Validation success (sampled, greedy) and training success per step, as (step, value)."""
    keys = {"val_sampled": f"val/env/{tag}/success", "val_greedy": f"val_greedy/env/{tag}/success",
            "train": f"env/{tag}/success",
            "val_greedy_invalid": f"val_greedy/env/{tag}/invalid_action_rate",
            "val_sampled_invalid": f"val/env/{tag}/invalid_action_rate"}
    out: dict[str, list[tuple[int, float]]] = {k: [] for k in keys}
    for r in rows:
        for name, key in keys.items():
            if key in r:
                out[name].append((int(r["step"]), float(r[key])))
    for v in out.values():
        v.sort()
    return out


def gains(c: dict[str, list[tuple[int, float]]]) -> dict[str, float]:
    """Start (step 0), peak (best round, and its step) and end (last validation) success, in
    points, and the gains (end - start)."""
    out: dict[str, float] = {}
    for mode in ("sampled", "greedy"):
        pts = c[f"val_{mode}"]
        if len(pts) < 2 or pts[0][0] != 0:
            raise ValueError(f"validation {mode}: need step 0 and a later round, got steps {[s for s, _ in pts]}")
        out[f"{mode}_start"] = 100.0 * pts[0][1]
        out[f"{mode}_end"] = 100.0 * pts[-1][1]
        peak_step, peak = max(pts, key=lambda p: (p[1], -p[0]))
        out[f"{mode}_peak"], out[f"{mode}_peak_step"] = 100.0 * peak, float(peak_step)
        out[f"{mode}_gain"] = out[f"{mode}_end"] - out[f"{mode}_start"]
    out["gain"] = min(out["sampled_gain"], out["greedy_gain"])
    return out


def plot(runs: dict[str, dict[str, list[tuple[int, float]]]], title: str, out: Path) -> None:
    """One PNG: validation (greedy, sampled) and training success against RL steps, per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    styles = {"val_greedy": "-o", "val_sampled": "-s", "train": ":"}
    for algo, c in runs.items():
        for name, style in styles.items():
            if c[name]:
                xs, ys = zip(*c[name])
                ax.plot(xs, [100 * y for y in ys], style, label=f"{algo} {name.replace('_', ' ')}", alpha=0.9)
    ax.set_xlabel("RL step")
    ax.set_ylabel("success (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def run_env(spec: EnvSpec, algos: list[str], out_root: Path, seed: int, commands: list[str],
            reuse: bool = False, ppo_steps: Optional[int] = None) -> dict[str, Any]:
    base = out_root / spec.name
    demos = base / "demos.jsonl"
    rl_main = spec.rl_configs["grpo"]
    result: dict[str, Any] = {"seed": seed, "tag": spec.tag, "epsilon": spec.epsilon, "episodes": spec.episodes,
                              "sft_steps": spec.sft_steps, "wall_s": {}, "algos": {}}
    if spec.demo_sets:
        files = []
        result["wall_s"]["demos"] = 0.0
        for tag, eps, episodes in spec.demo_sets:
            files.append(base / f"demos_{tag}.jsonl")
            result["wall_s"]["demos"] += run_cmd(
                roll_cmd("data", "demos", rl_main, *spec.overrides, "--out", str(files[-1]), "--tags", tag,
                         "--episodes", str(episodes), "--epsilon", str(eps), "--seed", str(seed)),
                base / f"demos_{tag}.log", commands, reuse)
        train_files = ",".join(map(str, files))
    else:
        result["wall_s"]["demos"] = run_cmd(
            roll_cmd("data", "demos", rl_main, *spec.overrides, "--out", str(demos), "--episodes", str(spec.episodes),
                     "--epsilon", str(spec.epsilon), "--seed", str(seed)), base / "demos.log", commands, reuse)
        train_files = str(demos)
    sft_dir = base / "sft"
    result["wall_s"]["sft"] = run_cmd(
        roll_cmd("run", spec.sft_config, f"output_dir={sft_dir}", f"data.train_files=[{train_files}]",
                 f"max_steps={spec.sft_steps}", f"seed={seed}", "show_progress=false",
                 *([f"save_steps={max(1, spec.sft_steps // SFT_CHECKPOINTS)}"] if spec.checkpoints else [])),
        base / "sft.log", commands, reuse, out_dir=sft_dir)
    algo_cmds: dict[str, list[str]] = {algo: [] for algo in algos}

    def run_algo(algo: str) -> float:
        rl_dir = base / algo
        cmd = roll_cmd("run", spec.rl_configs[algo], f"pretrain={sft_dir / 'final_model'}", f"output_dir={rl_dir}",
                       f"max_steps={ppo_steps if algo == 'ppo' and ppo_steps else spec.rl_steps}",
                       f"eval_steps={spec.eval_steps}", f"seed={seed}",
                       "show_progress=false", *spec.overrides, *spec.algo_overrides.get(algo, []),
                       *([f"save_steps={spec.eval_steps}"] if spec.checkpoints else []))  # at each validation round
        return run_cmd(cmd, base / f"{algo}.log", algo_cmds[algo], reuse, out_dir=rl_dir)

    # the RL runs of one env are independent: with --jobs > 1 they run side by side
    with ThreadPoolExecutor(max_workers=len(algos) if _SLOTS else 1) as pool:
        walls = dict(zip(algos, pool.map(run_algo, algos)))
    runs = {}
    for algo in algos:
        commands.extend(algo_cmds[algo])
        result["wall_s"][algo] = walls[algo]
        rows = read_metrics(base / algo / "logs" / "metrics.jsonl")
        c = curves(rows, spec.tag)
        runs[algo] = c
        result["algos"][algo] = {**gains(c), "curves": c}
        if spec.val_tags:
            result["algos"][algo]["per_tag"] = {t: {**gains(ct), "curves": ct}
                                                for t in spec.val_tags for ct in [curves(rows, t)]}
    result["runs"] = runs
    return result


# ------------------------------------------------------------------------------ report
def chain_minutes(r: dict[str, Any], algo: str) -> str:
    """One chain's wall time (demonstrations + SFT + the ``algo`` RL run) in minutes, or ``-``
    where the record lacks a stage's time (records written before stages were timed)."""
    walls = r["wall_s"]
    if not all(k in walls for k in ("demos", "sft", algo)):
        return "-"
    return f"{(walls['demos'] + walls['sft'] + walls[algo]) / 60:.0f}"


def section_text(results: dict[str, dict[str, Any]], commands: list[str], result_line: str, curves_dir: str,
                 invocation: str = "python bench/learning.py") -> str:
    lines = [SECTION, "",
             f"`{invocation}` (tiny model `roll-tiny://tiny`, 2-core CPU shared with other jobs; the rows of envs it",
             "does not run are those of their last run, kept in docs/learning_curves/<env>.json; every row's commands",
             "are at the end of this section).",
             "Chain per env: expert demonstrations (share of random actions: eps) -> SFT warm start -> RL with held-out validation",
             "(env seeds seed+100000 on; training seed+0 on; demonstrations 50,000,000+seed*1,000,003 on) at step 0",
             "(the SFT model) and every `eval_steps`, greedy (do_sample false) and sampled (temperature",
             "1.0, the training temperature). Configs: `configs/agentic/learning/`. Gain = end - start",
             "in points; the RESULT gain is the smaller of the greedy and sampled gain of GRPO. RL wall =",
             "the whole `roll run` (Ray start-up and validation rounds included); chain = demonstrations + SFT +",
             "that RL run, in minutes (the target is 45 per chain; `-`: a record without its stage times). PPO: GAE with a critic",
             "from the SFT model; the step-mode samples of an episode are chained, so returns cross turns.", "",
             NOTES, "", *([] if "webshop" in results else [WEBSHOP_PENDING]), WEBSHOP_NOTES, "",
             "| env | algo | eps | greedy start | greedy end | sampled start | sampled end | gain (pp) | RL wall (s) | chain (min) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name == "multi":
            continue
        for algo, g in r["algos"].items():
            for label, gt in [(name, g), *((f"{name} ({t})", gt) for t, gt in g.get("per_tag", {}).items()
                                           if t != r.get("tag"))]:
                lines.append(f"| {label} | {algo} | {r['epsilon']} | {gt['greedy_start']:.1f} | {gt['greedy_end']:.1f} | "
                             f"{gt['sampled_start']:.1f} | {gt['sampled_end']:.1f} | {gt['gain']:+.1f} | "
                             f"{r['wall_s'][algo]:.0f} | {chain_minutes(r, algo)} |")
    if "multi" in results:
        r = results["multi"]
        lines += ["", "Generalisation (`multi_env_grpo.yaml`: GRPO on simple Sokoban + FrozenLake from one SFT "
                  "start on both envs' demonstrations; validation on held-out seeds, the Sokoban variants never "
                  f"trained on; RL wall {r['wall_s']['grpo']:.0f} s, chain {chain_minutes(r, 'grpo')} min):", "",
                  "| validation env | greedy start | greedy peak (step) | greedy end | sampled start | "
                  "sampled peak (step) | sampled end | gain (pp) |",
                  "|---|---|---|---|---|---|---|---|"]
        for t, g in r["algos"]["grpo"]["per_tag"].items():
            peak = {m: f"{g[f'{m}_peak']:.1f} ({g[f'{m}_peak_step']:.0f})" if f"{m}_peak" in g else "-"
                    for m in ("greedy", "sampled")}
            lines.append(f"| {t} | {g['greedy_start']:.1f} | {peak['greedy']} | {g['greedy_end']:.1f} | "
                         f"{g['sampled_start']:.1f} | {peak['sampled']} | {g['sampled_end']:.1f} | {g['gain']:+.1f} |")
        lines += ["", MULTI_NOTES]
    lines += ["", "Validation success per round (step: greedy / sampled, %):", ""]
    for name, r in results.items():
        per_run = [(f"{name} {algo}", g) for algo, g in r["algos"].items()]
        if name == "multi" or "per_tag" in r["algos"].get("grpo", {}):
            per_run = [(f"{name} grpo {t}", g) for t, g in r["algos"]["grpo"]["per_tag"].items()]
        for label, g in per_run:
            c = g["curves"]
            greedy, sampled = dict(c["val_greedy"]), dict(c["val_sampled"])
            pts = ", ".join(f"{s}: {100 * greedy.get(s, float('nan')):.0f} / {100 * sampled.get(s, float('nan')):.0f}"
                            for s in sorted(greedy))
            lines.append(f"- {label}: {pts}")
            inv_g, inv_s = dict(c.get("val_greedy_invalid", [])), dict(c.get("val_sampled_invalid", []))
            if inv_g:
                inv = ", ".join(f"{s}: {100 * inv_g[s]:.0f} / {100 * inv_s.get(s, float('nan')):.0f}" for s in sorted(inv_g))
                lines.append(f"  (invalid-answer rate, greedy / sampled, %: {inv})")
    lines += ["", "Curves: " + ", ".join(f"`{curves_dir}/{n}.png`" for n in results), "",
              "Commands (seed in each):", "", "```"] + commands + ["```", "", "```", result_line, "```", ""]
    return "\n".join(lines)


def merge_earlier(results: dict[str, dict[str, Any]], out_root: Path, order: list[str],
                  kept: Optional[Path] = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """This invocation's results plus those an earlier one left in ``out_root/<env>/result.json``
    or, on a checkout without that run's outputs, in ``kept/<env>.json`` (docs/learning_curves/,
    written with the section), for the envs not run now (``--envs multi`` alone keeps the other
    envs' rows in the section), in ``order``; and all their commands."""
    merged: dict[str, dict[str, Any]] = {}
    for name in order:
        paths = [p for p in (out_root / name / "result.json", *([kept / f"{name}.json"] if kept else []))
                 if p.exists()]
        if name in results:
            merged[name] = results[name]
        elif paths:
            merged[name] = json.loads(paths[0].read_text())
    return merged, [c for r in merged.values() for c in r.get("commands", [])]


def result_figures(results: dict[str, dict[str, Any]]) -> list[str]:
    """The RESULT line's ``name=value`` figures: each env's GRPO gain (WebShop: the easier split's,
    then the full benchmark's) and the multi-env run's per validation env."""
    figures = [f"{n}_gain_pp={results[n]['algos']['grpo']['gain']:.1f}" for n in ("sokoban", "frozenlake") if n in results]
    if "multi" in results:
        figures += [f"multi_{t}_gain_pp={g['gain']:.1f}" for t, g in results["multi"]["algos"]["grpo"]["per_tag"].items()]
    if "webshop" in results:
        ws = results["webshop"]["algos"]["grpo"]
        figures += [f"webshop_gain_pp={ws['gain']:.1f}", f"webshop_full_gain_pp={ws['per_tag']['WebShopFull']['gain']:.1f}"]
    return figures


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the same chain, tiny (does not touch docs/)")
    p.add_argument("--envs", nargs="+", default=["frozenlake", "sokoban"],
                   choices=["frozenlake", "sokoban", "multi", "webshop"],
                   help="multi: GRPO on both envs, validated on FrozenLake and two unseen Sokoban variants; "
                        "webshop: GRPO on an easier WebShop split, validated on it and on the full benchmark")
    p.add_argument("--ppo", nargs="*", default=None, choices=["frozenlake", "sokoban"],
                   help="also run PPO with a critic from the same SFT model (for these envs; all when none named)")
    p.add_argument("--ppo-steps", type=int, default=None,
                   help="RL steps of the PPO run (default: the GRPO run's); a multiple of eval_steps")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--jobs", type=int, default=1,
                   help="run up to this many stages at once (the envs' chains and an env's RL runs side by side); "
                        "wall times then include the sharing of the CPU")
    p.add_argument("--reuse", action="store_true",
                   help="skip stages already completed with the same command, configs and inputs (see run_cmd)")
    p.add_argument("--out", default="output/learning/bench", help="run directory (demos, SFT and RL outputs)")
    p.add_argument("--docs", default=None,
                   help="where the section and curves go (default docs/, or nowhere with --quick)")
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    specs = env_specs(args.quick)
    out_root = (ROOT / args.out / ("quick" if args.quick else "full")).resolve()
    docs = Path(args.docs) if args.docs else (None if args.quick else ROOT / "docs")
    ppo_envs = set() if args.ppo is None else set(args.ppo or args.envs)
    global _SLOTS
    _SLOTS = threading.BoundedSemaphore(args.jobs) if args.jobs > 1 else None
    env_cmds: dict[str, list[str]] = {name: [] for name in args.envs}

    def chain(name: str) -> dict[str, Any]:
        algos = ["grpo", "ppo"] if name in ppo_envs else ["grpo"]
        return run_env(specs[name], algos, out_root, args.seed, env_cmds[name], args.reuse, args.ppo_steps)

    # each env's chain is sequential (demos -> SFT -> RL); with --jobs > 1 the chains run side by side
    with ThreadPoolExecutor(max_workers=len(args.envs) if _SLOTS else 1) as pool:
        done = dict(zip(args.envs, pool.map(chain, args.envs)))
    results = {}
    for name in args.envs:
        r = results[name] = done[name]
        curve_dir = docs / "learning_curves" if docs else out_root / "curves"
        runs = r.pop("runs")
        per_tag = r["algos"]["grpo"].get("per_tag")
        if per_tag:  # one line set per validation env
            runs = {t: g["curves"] for t, g in per_tag.items()}
        plot(runs, f"{name}: validation success (held-out seeds)", curve_dir / f"{name}.png")
        for algo, g in r["algos"].items():
            print(f"{name} {algo}: greedy {g['greedy_start']:.1f} -> {g['greedy_end']:.1f}, "
                  f"sampled {g['sampled_start']:.1f} -> {g['sampled_end']:.1f} (gain {g['gain']:+.1f} pp)", flush=True)
        r["commands"] = env_cmds[name]
        (out_root / name / "result.json").write_text(json.dumps(r, indent=1))
        if docs is not None:  # the section's record of this env, kept for runs of other envs
            (docs / "learning_curves" / f"{name}.json").write_text(json.dumps(r, indent=1))
    results, commands = merge_earlier(results, out_root, list(specs), docs / "learning_curves" if docs else None)
    (out_root / "results.json").write_text(json.dumps(results, indent=1))
    result_line = "RESULT " + " ".join(result_figures(results))
    if docs is not None:
        write_section(doc=docs / "benchmarks.md", quick=False, text=section_text(results, commands, result_line, "docs/learning_curves",
                                                             shlex.join(["python", "bench/learning.py", *(argv if argv is not None else sys.argv[1:])])))
    print(result_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
