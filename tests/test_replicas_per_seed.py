"""replicas_per_seed: an env of B blocks of E replicas whose block k is exactly a separate env of E
replicas made with seed + k (a population's members side by side in one env)."""
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.compiler import codegen, codegen_c, envdef, envdef_c
from workbench.errors import WorkbenchError
from workbench.runtime import registry

from conftest import HAS_GPU
from test_entities import PATCHES, PATCHES_C

TAG = dict(num_taggers=2, num_runners=1, grid_length=3, episode_length=6)  # time limits within a few steps
ENVS = {"cartpole": {}, "tag_grid": TAG, "patches": {}}


def _make(name, num_envs, target, seed, **kwargs):
    if name == "patches":
        wb.register("patches", PATCHES)
    return wb.make(name, num_envs=num_envs, target=target, seed=seed, **kwargs, **ENVS[name])


def _sizes(name, target):
    """(replicas per block, steps): tiny under the CUDA simulator, which runs a Python thread per lane
    (multi-agent envs have 32 lanes a replica)."""
    if target == "cuda" and not HAS_GPU and name != "cartpole":
        return 2, 14 if name == "patches" else 8  # past the first time limit (12 and 6 steps)
    return 3, 30


def _random_actions(env, steps, seed):
    draws = np.random.default_rng(seed)
    shape = tuple(env.data["action"].shape)
    return [torch.from_numpy(draws.integers(0, env.action_space.n, size=shape, dtype=np.int32)) for _ in range(steps)]


def _step(env, action):
    env.data["action"].copy_(action)
    env.step()


def _assert_equal_stores(got, want, where):
    """Every array of the store (state, obs, reward, done, flags, episode bookkeeping) bit for bit."""
    for name, tensor in want.store.items():
        assert torch.equal(got(name), tensor), f"'{name}' differs {where}"


@pytest.mark.parametrize("name", list(ENVS))
def test_each_block_is_the_env_seeded_seed_plus_its_index(target, name):
    span, steps = _sizes(name, target)
    seed = 41
    population = _make(name, 2 * span, target, seed, replicas_per_seed=span)
    alone = [_make(name, span, target, seed + k) for k in range(2)]
    assert population.replicas_per_seed == span and alone[0].replicas_per_seed == span

    def block(k):
        return lambda array: population.store[array][k * span:(k + 1) * span]

    for k, env in enumerate(alone):
        _assert_equal_stores(block(k), env, f"in block {k} after reset")
    assert not torch.equal(block(0)("obs"), block(1)("obs"))  # the blocks draw different starts
    for n, action in enumerate(_random_actions(population, steps, seed=5)):
        _step(population, action)
        for k, env in enumerate(alone):
            _step(env, action[k * span:(k + 1) * span])
            _assert_equal_stores(block(k), env, f"in block {k} after step {n + 1}")
    assert int(population.data["episode"].max()) >= 2  # through at least one auto-reset
    # a reset with a new seed moves every block to seed + k (final_obs and the last episode's
    # statistics are kept from before, so the arrays compared are those a reset writes)
    population.reset(seed=seed + 1)
    alone[1].reset(seed=seed + 1)
    state = [name for name, spec in population.definition.arrays.items() if spec.owner == "env"]
    for array in ["obs", "t", "episode", "reward"] + state:
        assert torch.equal(block(0)(array), alone[1].store[array]), f"'{array}' differs after reset(seed + 1)"


@pytest.mark.parametrize("name", ["cartpole", "tag_grid"])
def test_default_is_one_seed_for_all_replicas(target, name):
    num_envs, steps = (4, 20) if target == "cpu" or HAS_GPU or name == "cartpole" else (2, 8)
    envs = [_make(name, num_envs, target, 9), _make(name, num_envs, target, 9, replicas_per_seed=None),
            _make(name, num_envs, target, 9, replicas_per_seed=num_envs)]
    assert [env.replicas_per_seed for env in envs] == [num_envs] * 3
    for n, action in enumerate([None] + _random_actions(envs[0], steps, seed=2)):
        for env in envs:
            if action is not None:
                _step(env, action)
        for env in envs[1:]:
            _assert_equal_stores(lambda array: envs[0].store[array], env, f"after {n} step(s)")


@pytest.mark.parametrize("value, message", [
    (5, "replicas_per_seed must divide num_envs=12, got 5"),
    (24, "replicas_per_seed must divide num_envs=12, got 24"),
    (0, "replicas_per_seed must be an int >= 1 that divides num_envs=12"),
    (-3, "replicas_per_seed must be an int >= 1 that divides num_envs=12"),
    (2.0, "replicas_per_seed must be an int >= 1 that divides num_envs=12 (or None for one seed), got 2.0"),
    (True, "replicas_per_seed must be an int >= 1"),
    ("4", "replicas_per_seed must be an int >= 1"),
])
def test_a_bad_replicas_per_seed_says_what_to_pass(value, message):
    with pytest.raises(WorkbenchError) as info:
        wb.make("cartpole", num_envs=12, target="cpu", replicas_per_seed=value)
    assert message in str(info.value)


def test_drivers_take_span_after_seed():
    defn = registry.definition("cartpole")
    assert codegen.kernel_args(defn)[:5] == ["n_envs", "seed", "span", "draw", "obs"]
    numba = codegen.numba_drivers(defn, gpu=True, layout=codegen.gpu_layout(1))
    assert "def _wb_step(n_envs, seed, span, draw, obs," in numba
    assert "    _wb_seed = seed + e // span\n    _wb_e = e % span\n" in numba
    assert "key = make_key(_wb_seed, _wb_e, 0, episode[e] + 1, RESET_STEP)" in numba
    source = codegen_c.c_program(defn, codegen.gpu_layout(1))
    assert "void WB_REGISTER_CAP wb_step(\n    int n_envs,\n    wb_u64 seed,\n    int span,\n    int draw,\n    float* __restrict__ obs," in source
    assert "wb_seed += (wb_u64)(e / span);" in source and "wb_e = e % span;" in source
    assert "const wb_key key = wb_make_key(wb_seed, wb_e, 0, (long long)episode[e] + 1, WB_RESET_STEP);" in source
    assert "wb_make_key(seed," not in source


@pytest.mark.parametrize("name", ["cartpole", "patches"])
def test_host_build_of_the_c_drivers_splits_seeds_as_the_cpu_target(tmp_path, name):
    test_cuda_c = pytest.importorskip("test_cuda_c")
    if test_cuda_c.GXX is None:
        pytest.skip("needs g++ for the host build of the C runtime")
    if name == "patches":
        defn = envdef_c.attach_c(envdef.parse("patches", PATCHES), PATCHES_C, "patches.cu")
    else:
        defn = registry.definition(name)
    frames = test_cuda_c._compare_with_cpu(tmp_path, defn, codegen.gpu_layout(defn.num_agents), n_envs=6, steps=25,
                                           replicas_per_seed=3)
    assert max(f["episode"].max() for f in frames) >= 2
