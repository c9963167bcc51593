"""Sokoban: mechanics and rewards on fixed levels, the generator, the solver, the variants."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest
import roll.envs  # noqa: F401
from roll.envs.sokoban.env import SokobanEnv
from roll.envs.sokoban.generator import GenerationError, generate_room
from roll.envs.sokoban.room import DEFAULT_SYMBOLS, XSB_SYMBOLS, Layout, parse_level
from roll.envs.sokoban.solver import solve

# Player left of a box, target two cells right of the box; a second target-free row below.
LEVEL = """\
#######
#P_X_O#
#_____#
#######"""


def answer(*actions: str) -> str:
    return f"<answer>{', '.join(actions)}</answer>"


def test_push_rewards_and_solve_bonus():
    env = SokobanEnv(max_steps=20)
    obs, info = env.reset(seed=0, options={"level": LEVEL})
    assert obs == LEVEL
    assert "Up, Down, Left, Right" in info["instruction"] and "<answer>" in info["instruction"]
    obs, r, term, trunc, info = env.step(answer("Right"))  # walk next to the box
    assert (r, term, info["action_is_effective"]) == (pytest.approx(-0.1), False, True)
    obs, r, term, trunc, info = env.step(answer("Right"))  # push the box next to the target
    assert obs.splitlines()[1] == "#__PXO#" and r == pytest.approx(-0.1)
    obs, r, term, trunc, info = env.step(answer("Right"))  # onto the target: +1 and +10
    assert obs.splitlines()[1] == "#___P√#"
    assert r == pytest.approx(-0.1 + 1 + 10)
    assert term and not trunc and info["success"]


def test_pushing_off_a_target_costs_and_walls_block():
    level = "#######\n#P√___#\n#_____#\n#######"
    env = SokobanEnv(max_steps=20)
    env.reset(seed=0, options={"level": level})
    obs, r, *_ = env.step(answer("Right"))
    assert obs.splitlines()[1] == "#_SX__#" and r == pytest.approx(-0.1 - 1)
    obs, r, term, trunc, info = env.step(answer("Up"))  # into a wall
    assert r == pytest.approx(-0.1) and not info["action_is_effective"] and info["action_is_valid"]
    # A box against a wall cannot be pushed.
    level = "######\n#_PX##\n#___O#\n######"
    env.reset(seed=0, options={"level": level})
    obs, r, term, trunc, info = env.step(answer("Right"))
    assert obs == level and not info["action_is_effective"] and r == pytest.approx(-0.1)


def test_player_on_target_symbol_and_box_chain_blocked():
    env = SokobanEnv(max_steps=20)
    env.reset(seed=0, options={"level": "#######\n#PXX_O#\n#_O___#\n#######"})
    obs, r, term, trunc, info = env.step(answer("Right"))  # two boxes in a row do not move
    assert not info["action_is_effective"]
    env.step(answer("Down"))
    obs, *_ = env.step(answer("Right"))
    assert obs.splitlines()[2] == "#_S___#"


def test_several_actions_per_turn_and_truncation():
    env = SokobanEnv(max_steps=3, max_actions_per_turn=2)
    env.reset(seed=0, options={"level": LEVEL})
    obs, r, term, trunc, info = env.step(answer("Down", "Up"))
    assert info["actions"] == ["Down", "Up"] and info["steps"] == 2 and r == pytest.approx(-0.2)
    obs, r, term, trunc, info = env.step(answer("Down", "Up"))  # only one step left: one action runs
    assert info["actions"] == ["Down"] and trunc and not term and info["steps_left"] == 0
    assert "up to 2 actions" in env.instruction()


def test_invalid_text_is_a_penalised_noop():
    env = SokobanEnv(max_steps=5, format_penalty=-0.7)
    obs0, _ = env.reset(seed=0, options={"level": LEVEL})
    obs, r, term, trunc, info = env.step("I will move right")
    assert (obs, r, term, trunc) == (obs0, -0.7, False, False)
    assert not info["action_is_valid"] and not info["action_is_effective"] and info["parse_error"]
    assert info["steps"] == 1


def test_stepping_a_finished_episode_does_not_crash():
    env = SokobanEnv(max_steps=1)
    env.reset(seed=0, options={"level": LEVEL})
    env.step(answer("Down"))
    obs, r, term, trunc, info = env.step(answer("Up"))
    assert r == 0.0 and not info["action_is_valid"] and "reset" in info["parse_error"]


@pytest.mark.parametrize("kwargs", [dict(), dict(width=8, height=8, num_boxes=2), dict(width=7, height=9, num_boxes=3)])
def test_generated_rooms_are_solvable_and_optimal(kwargs):
    for seed in range(40 if kwargs.get("num_boxes", 1) <= 2 else 10):
        room = generate_room(seed, **kwargs)
        plan = solve(room.layout, room.player, room.boxes)
        assert plan is not None and len(plan) == room.optimal_length
        assert 1 <= room.optimal_length <= 100
        assert room.boxes & room.layout.target_mask == 0  # no box starts on a target
        assert bin(room.boxes).count("1") == kwargs.get("num_boxes", 1)


def test_generation_is_deterministic_and_thread_safe():
    def render(seed):
        r = generate_room(np.random.default_rng(seed), width=8, height=8, num_boxes=2)
        return r.layout.render(r.player, r.boxes, DEFAULT_SYMBOLS)

    sequential = [render(s) for s in range(16)]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(render, range(16))) == sequential
    assert len(set(sequential)) > 10


def test_min_solution_length_and_search_depth_bound_difficulty():
    lengths = [generate_room(s, min_solution_length=6, search_depth=9).optimal_length for s in range(30)]
    assert min(lengths) >= 6 and max(lengths) <= 9
    short = [generate_room(s, max_steps=3).optimal_length for s in range(30)]
    assert max(short) <= 3


def test_bad_parameters_fail_clearly():
    with pytest.raises(ValueError, match="min_solution_length"):
        SokobanEnv(min_solution_length=200)
    with pytest.raises(ValueError, match="too few"):
        generate_room(0, width=3, height=3, num_boxes=2)
    with pytest.raises(GenerationError, match="lower min_solution_length"):
        generate_room(0, width=4, height=4, num_boxes=1, min_solution_length=30, max_tries=5)
    with pytest.raises(ValueError, match="distinct"):
        SokobanEnv(symbols={"wall": "_"})
    with pytest.raises(ValueError, match="enclosed"):
        parse_level("P_X_O", DEFAULT_SYMBOLS)


def test_solver_on_unsolvable_and_solved_states():
    layout, player, boxes = parse_level("######\n#PX_O#\n######")
    assert solve(layout, player, boxes) == ["Right", "Right"]
    layout, player, boxes = parse_level("#####\n#OPX#\n#####")  # box stuck against a wall
    assert solve(layout, player, boxes) is None
    layout, player, boxes = parse_level("####\n#P√#\n####")
    assert solve(layout, player, boxes) == []


def test_expert_plan_follows_the_state():
    env = gym.make("roll/Sokoban8x8-v0")
    env.reset(seed=5)
    plan = env.unwrapped.expert_plan()
    assert plan and len(plan) == env.unwrapped.optimal_length
    env.step(answer(plan[0]))
    assert env.unwrapped.expert_plan() == plan[1:]
    # A detour invalidates the cached plan; the new plan is re-solved from the new state.
    layout, p, b = env.unwrapped.layout, env.unwrapped.player, env.unwrapped.boxes
    assert env.unwrapped.expert_plan() == solve(layout, p, b)


def test_xsb_variant_renders_the_same_rooms_in_other_symbols():
    a, b = gym.make("roll/Sokoban-v0"), gym.make("roll/SokobanXSB-v0")
    for seed in range(10):
        oa, _ = a.reset(seed=seed)
        ob, info = b.reset(seed=seed)
        table = {DEFAULT_SYMBOLS[k]: XSB_SYMBOLS[k] for k in DEFAULT_SYMBOLS}
        assert ob == "".join(table.get(ch, ch) for ch in oa)
        assert "$ box" in info["instruction"]


def test_layout_dead_cells():
    layout, _, _ = parse_level("######\n#P_XO#\n#____#\n######")
    w = layout.width
    # Corners away from the target are dead: a box there can never be pushed out.
    assert not layout.live[2 * w + 1] and layout.live[1 * w + 4]
    assert isinstance(layout, Layout)


def test_push_distance_and_box_distance_shaping():
    layout, player, boxes = parse_level(LEVEL)
    w = layout.width
    # row 1 is a corridor ending in the target; row 2 is against the bottom wall (dead)
    # (column 1 is dead too: pushing from it needs the player inside the wall)
    assert [layout.push_distance[w + c] for c in range(1, 6)] == [-1, 3, 2, 1, 0]
    assert all(layout.push_distance[2 * w + c] == -1 for c in range(1, 6))
    assert layout.live == [d >= 0 for d in layout.push_distance]
    assert layout.box_distance(boxes) == 2
    assert layout.box_distance(1 << (2 * w + 3)) == 4  # a dead box: farthest live cell + 1

    env = SokobanEnv(max_steps=20, box_distance_reward=0.5)
    env.reset(seed=0, options={"level": LEVEL})
    assert "+0.5 per push" in env.instruction()
    _, r, *_ = env.step(answer("Right"))  # a walk: no shaping
    assert r == pytest.approx(-0.1)
    _, r, *_ = env.step(answer("Right"))  # a push one cell closer
    assert r == pytest.approx(-0.1 + 0.5)
    _, r, term, _, info = env.step(answer("Right"))  # onto the target
    assert r == pytest.approx(-0.1 + 0.5 + 1 + 10) and term and info["success"]
    # pushed away from the target onto a dead cell: the whole distance is lost at once
    env.reset(seed=0, options={"level": "#######\n#__P__#\n#__X_O#\n#_____#\n#######"})
    dead = max(env.layout.push_distance) + 1
    _, r, *_ = env.step(answer("Down"))
    assert r == pytest.approx(-0.1 + 0.5 * (2 - dead)) and dead > 2
    env.reset(seed=0, options={"level": "#######\n#P√___#\n#_____#\n#######"})
    _, r, *_ = env.step(answer("Right"))  # box off the target into a corridor cell 1 away
    assert r == pytest.approx(-0.1 - 1 - 0.5)
    # shaping and the blocked-move penalty are off by default
    assert SokobanEnv(max_steps=20).rewards["distance"] == 0.0 == SokobanEnv(max_steps=20).rewards["blocked"]


def test_blocked_move_penalty():
    env = SokobanEnv(max_steps=20, blocked_move_penalty=-1.0)
    env.reset(seed=0, options={"level": LEVEL})
    assert "-1 more for a move into a wall" in env.instruction()
    obs, r, _, _, info = env.step(answer("Up"))  # into the wall: nothing changes
    assert obs == LEVEL and r == pytest.approx(-1.1) and not info["action_is_effective"]
    _, r, _, _, info = env.step(answer("Right"))
    assert r == pytest.approx(-0.1) and info["action_is_effective"]


def test_canvas_pads_the_room_with_walls_and_keeps_the_game():
    plain = SokobanEnv(max_steps=20)
    padded = SokobanEnv(max_steps=20, canvas=[9, 6])  # LEVEL is 7 columns by 4 rows
    padded.reset(seed=0, options={"level": LEVEL})
    plain.reset(seed=0, options={"level": LEVEL})
    obs = padded._render_text()
    rows = obs.split("\n")
    assert len(rows) == 6 and all(len(r) == 9 for r in rows)
    # the room at the top left, walls to the right and below
    assert [r[:7] for r in rows[:4]] == LEVEL.split("\n") and all(r[7:] == "##" for r in rows[:4])
    assert rows[4] == rows[5] == "#" * 9
    # the same moves give the same rewards and rooms, only drawn wider
    for a in ("Up", "Right", "Down"):
        o1, r1, *_ = plain.step(answer(a))
        o2, r2, *_ = padded.step(answer(a))
        assert r1 == r2 and [r[:7] for r in o2.split("\n")[:4]] == o1.split("\n")
    # generated rooms of two sizes share one row length on one canvas (same upper-neighbour stride)
    small = SokobanEnv(canvas=8, search_depth=6, min_solution_length=2, max_steps=8)
    large = SokobanEnv(width=8, height=8, canvas=8, search_depth=6, min_solution_length=2, max_steps=8)
    for env in (small, large):
        o, _ = env.reset(seed=3)
        assert [len(r) for r in o.split("\n")] == [8] * 8
    assert small.observation_space.contains(small.reset(seed=4)[0])


def test_canvas_rejects_what_does_not_fit():
    with pytest.raises(ValueError, match="smaller than the 6x6 room"):
        SokobanEnv(canvas=5)
    for bad in ("8", [8], [8, 8, 8], True, [8.0, 8]):
        with pytest.raises(ValueError, match="canvas must be"):
            SokobanEnv(canvas=bad)
    env = SokobanEnv(width=3, height=3, canvas=6, max_steps=20)
    with pytest.raises(ValueError, match="does not fit the canvas 6x6"):
        env.reset(seed=0, options={"level": LEVEL})
