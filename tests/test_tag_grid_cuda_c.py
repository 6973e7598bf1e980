"""tag_grid on the cuda-c target: envs/tag_grid.cu against envs/tag_grid.py.

Without a GPU: the registry attaches the .cu, it compiles with NVRTC (when NVRTC loads), and the
g++ host build of the generated program (real threads for the lanes, real atomics, barriers between
phases; see test_cuda_c.py) runs random play and a crowded scene step by step against the cpu
target, array by array: rewards to float32 rounding, everything else (positions, in_game, the
tag counters, the block lists, observations of integer ratios) exactly. On a GPU: check_env
against the cpu target, and with more agents than a replica has lanes (WarpDrive's 999 + 1),
against both the cpu and the cuda target.
"""
import numpy as np
import pytest

import workbench as wb
from workbench.compiler import codegen_c, envdef_c
from workbench.compiler.codegen import Layout, gpu_layout
from workbench.compiler.targets import cuda_c
from workbench.runtime import registry
from workbench.runtime.env import Env

from conftest import gpu_only
from test_tag_cuda_c import (assert_frames_match, cpu_frames, host_run_from, needs_gxx, random_actions,
                             random_play_matches, snapshot)

# 5 x 5 cells: taggers' blocks one cell a side (block_width(12, 5) = 1), runners' two; 20 agents on 25
# cells tag often, so runners leave the game, replicas terminate and reset within the same step
SMALL = dict(num_taggers=12, num_runners=8, grid_length=4, episode_length=12, wall_hit_penalty=0.5,
             tag_reward_for_tagger=10.0, tag_penalty_for_runner=3.0, step_cost_for_tagger=0.25)
SHARED = dict(SMALL, shared_tag_reward=1)
# 15 x 15 cells, blocks of 4 and 2 cells a side: the ring search walks several rings and stops early
WIDE = dict(SMALL, num_taggers=10, num_runners=40, grid_length=14, episode_length=10, shared_tag_reward=0)
# every agent observes every agent: 5 * 10 + 1 values
FULL = dict(SMALL, num_taggers=8, num_runners=2, full_observation=1, episode_length=15)


def definition(**params):
    return registry.definition("tag_grid", **params)


def test_registry_attaches_the_cu_with_every_phase():
    defn = definition(**SMALL)
    assert defn.c_source is not None and defn.c_filename.endswith("tag_grid.cu")
    phases = envdef_c.c_phases(defn)
    for stage, fns in (("reset", defn.reset_phases), ("step", defn.step_phases), ("observe", defn.observe_phases)):
        assert [p.name for p in phases[stage]] == [fn.__name__ for fn in fns]
        for phase, fn in zip(phases[stage], fns):  # the arrays of the Python twin, in the same order
            assert list(phase.args) == defn.phase_args(fn), phase.name


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("params", [SMALL, FULL, dict(num_taggers=999, num_runners=1, grid_length=100)],
                         ids=["partial", "full", "999+1"])
def test_compiles_with_nvrtc(nvrtc, arch, params):
    code, source = cuda_c.compile_program(definition(**params), arch)
    assert len(code.code) > 1000 and "wb_step" in source


@pytest.mark.parametrize("params", [SMALL, WIDE, dict(num_taggers=999, num_runners=1, grid_length=100),
                                    dict(num_taggers=1, num_runners=1, grid_length=1)],
                         ids=["small", "wide", "999+1", "two"])
def test_block_layout_is_the_pythons(params):
    """The C source derives the blocks' widths from the parameters; its static_assert holds them to the
    size of the state's `blocks`, which the Python's block_width sets. Here both sides, in numbers."""
    from workbench.envs import tag_grid
    defn = definition(**params)
    side = params["grid_length"] + 1
    for count in (params["num_taggers"], params["num_runners"]):
        want = tag_grid.block_width(count, side)
        w = 1
        while (w + 1) ** 2 * count <= 2 * side * side:  # the C's integer form
            w += 1
        assert min(w, side) == want
    source = codegen_c.c_program(defn, gpu_layout(defn.num_agents))
    assert "static_assert(blocks_view::size == (long long)TG_BLOCKS * (TG_CAP + 1)" in source


@needs_gxx
@pytest.mark.parametrize("params,layout", [(SHARED, None), (WIDE, Layout(4, 2))],
                         ids=["shared_reward", "per_tagger_wide_blocks_strided_lanes"])
def test_host_build_matches_cpu_in_random_play(tmp_path, params, layout):
    defn = definition(**params)
    n_envs, seed = 3, 7
    want = random_play_matches(tmp_path, defn, n_envs, seed, 24, layout)
    # the run holds what the test is for: tags, runners leaving, both ends of an episode, walls
    assert any((f["in_game"] == 0).any() for f in want) and any(f["truncated"].any() for f in want)
    assert params is WIDE or any(f["terminated"].any() for f in want)
    wall_no_tag = np.float32(-params["wall_hit_penalty"] - params["step_cost_for_tagger"])  # a tagger's only
    assert any((f["reward"] == wall_no_tag).any() for f in want)
    for f in want:  # the lists are empty after every launch
        assert not f["blocks"].any()


@needs_gxx
def test_host_build_matches_cpu_with_full_observation(tmp_path):
    defn = definition(**FULL)
    assert defn.obs_shape == (5 * 10 + 1,)
    want = random_play_matches(tmp_path, defn, 2, 3, 30)
    assert any((f["in_game"] == 0).any() for f in want) and any(f["terminated"].any() for f in want)


@needs_gxx
def test_host_build_matches_cpu_in_a_crowded_scene(tmp_path):
    """Every tagger on one cell (its block's list overflows: the tag check and the runners' search
    scan all taggers), two runners on that cell (both tagged, each crediting every tagger), one
    runner beside it and one in a corner walking into the wall."""
    defn = definition(**WIDE)
    n_envs, seed = 2, 5
    env = Env(defn, num_envs=n_envs, target="cpu", seed=seed)
    state = snapshot(env)
    state["x"][0, :14] = [2] * 10 + [2, 2, 3, 0]
    state["y"][0, :14] = [2] * 10 + [2, 2, 2, 0]
    state["in_game"][0] = [1] * 14 + [0] * 36  # the other runners already tagged
    state["runners_left"][0] = 4
    first = np.zeros(tuple(state["action"].shape), np.int32)
    first[0, 13] = 2  # -x from x = 0: the wall
    actions = [first] + random_actions(defn, n_envs, 3, seed)
    want = cpu_frames(defn, n_envs, seed, actions, state)
    got = host_run_from(tmp_path, defn, gpu_layout(defn.num_agents), n_envs, seed, state, actions)
    assert_frames_match(want, got)
    after = want[1]
    assert after["in_game"][0].tolist() == [1] * 10 + [0, 0, 1, 1] + [0] * 36
    assert after["runners_left"][0] == 2
    np.testing.assert_allclose(after["reward"][0], [20.0] * 10 + [-3.0, -3.0, 0.25, 0.25 - 0.5] + [0.0] * 36)
    assert after["tags_made"][0].tolist() == [2] * 10 + [0] * 40


# ---- on a GPU ------------------------------------------------------------------------------------

MODERATE = dict(num_taggers=30, num_runners=270, grid_length=30, episode_length=60)


@gpu_only
def test_cuda_c_agrees_with_cpu_on_the_gpu():
    # SHARED's 20 agents: several replicas a block, each with its own copy of the lists in shared memory
    assert gpu_layout(20).envs_per_block > 1
    for params in (MODERATE, dict(MODERATE, shared_tag_reward=0), FULL, SHARED):
        report = wb.check_env("tag_grid", targets=["cpu", "cuda-c"], num_envs=64, steps=80, seed=1, **params)
        assert report.episodes_finished > 0


@gpu_only
def test_cuda_c_agrees_with_cuda_beyond_one_block():
    # WarpDrive's split, 999 taggers + 1 runner: more agents than a replica has lanes
    params = dict(num_taggers=999, num_runners=1, grid_length=100, episode_length=40)
    assert gpu_layout(1000).threads_per_env < 1000
    for targets in (["cuda", "cuda-c"], ["cpu", "cuda-c"]):
        report = wb.check_env("tag_grid", targets=targets, num_envs=8, steps=60, seed=3, **params)
        assert report.episodes_finished >= 8
