"""Phases over other entities than agents (ENTITIES, per_entity), per-replica phases and the
PRECISION of float parameters (issue 13, item 4), each against a reference."""
import textwrap

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.compiler import codegen, codegen_c, envdef, envdef_c, rng

# Agents on a ring of `size` cells eat from food patches; an eaten patch regrows after
# `regrow_time` steps at a random cell. Per-patch counts are cleared by a patch phase, filled by an
# agent phase with atomics, read by a patch phase and summed by a per-replica phase: a barrier must
# separate each from the next.
PATCHES = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_agent, per_entity, per_env
    from workbench.compiler.rng import randint

    PARAMS = dict(num_agents=3, num_patches=4, size=7, regrow_time=2, goal=6, max_steps=12)
    NUM_AGENTS = "num_agents"
    MAX_STEPS = "max_steps"
    ENTITIES = dict(patch="num_patches")
    OBSERVATION = Box(shape=(2,))
    ACTION = Discrete(3)
    STATE = dict(pos=per_agent("int32"), spot=per_entity("patch", "int32"), timer=per_entity("patch", "int32"),
                 eaten=per_entity("patch", "int32"), total=per_env("int32"), ticks=per_env("int32"))


    def reset(env, agent, key, pos):
        pos[env, agent] = randint(key, 0, size)


    def grow(env, patch, key, spot, timer, eaten):
        spot[env, patch] = randint(key, 0, size)
        timer[env, patch] = 0
        eaten[env, patch] = 0


    def start(env, total, ticks):
        total[env] = 0
        ticks[env] = 0


    RESET = [reset, grow, start]


    def clear(env, patch, eaten):
        eaten[env, patch] = 0


    def move(env, agent, action, pos):
        pos[env, agent] = (pos[env, agent] + action[env, agent] - 1 + size) % size


    def eat(env, agent, pos, spot, timer, eaten, reward):
        for p in range(num_patches):
            if timer[env, p] == 0 and spot[env, p] == pos[env, agent]:
                atomic_add(eaten, (env, p), 1)
                reward[env, agent] += 1.0


    def regrow(env, patch, key, spot, timer, eaten):
        if eaten[env, patch] > 0:
            timer[env, patch] = regrow_time
        elif timer[env, patch] > 0:
            timer[env, patch] -= 1
            if timer[env, patch] == 0:
                spot[env, patch] = randint(key, 0, size)


    def tally(env, eaten, total, ticks, terminated):
        for p in range(num_patches):
            total[env] += eaten[env, p]
        ticks[env] += 1
        if total[env] >= goal:
            terminated[env] = 1


    STEP = [clear, move, eat, regrow, tally]


    def observe(env, agent, pos, timer, obs):
        live = 0
        for p in range(num_patches):
            if timer[env, p] == 0:
                live += 1
        obs[env, agent, 0] = pos[env, agent]
        obs[env, agent, 1] = live
''')

# The same phases in CUDA C, for the cuda-c target's generated drivers.
PATCHES_C = r'''
__device__ void reset(int env, int agent, wb_key key, pos_view pos) { pos(env, agent) = wb_randint(key, 0, size); }

__device__ void grow(int env, int patch, wb_key key, spot_view spot, timer_view timer, eaten_view eaten)
{
    spot(env, patch) = wb_randint(key, 0, size);
    timer(env, patch) = 0;
    eaten(env, patch) = 0;
}

__device__ void start(int env, int* total, int* ticks) { total[env] = 0; ticks[env] = 0; }

__device__ void clear(int env, int patch, eaten_view eaten) { eaten(env, patch) = 0; }

__device__ void move(int env, int agent, action_view action, pos_view pos)
{
    pos(env, agent) = (pos(env, agent) + action(env, agent) - 1 + size) % size;
}

__device__ void eat(int env, int agent, pos_view pos, spot_view spot, timer_view timer, eaten_view eaten,
                    reward_view reward)
{
    for (int p = 0; p < num_patches; ++p)
        if (timer(env, p) == 0 && spot(env, p) == pos(env, agent)) {
            wb_atomic_add(&eaten(env, p), 1);
            reward(env, agent) += 1.0f;
        }
}

__device__ void regrow(int env, int patch, wb_key key, spot_view spot, timer_view timer, eaten_view eaten)
{
    if (eaten(env, patch) > 0) {
        timer(env, patch) = regrow_time;
    } else if (timer(env, patch) > 0) {
        timer(env, patch) -= 1;
        if (timer(env, patch) == 0)
            spot(env, patch) = wb_randint(key, 0, size);
    }
}

__device__ void tally(int env, eaten_view eaten, int* total, int* ticks, unsigned char* terminated)
{
    for (int p = 0; p < num_patches; ++p)
        total[env] += eaten(env, p);
    ticks[env] += 1;
    if (total[env] >= goal)
        terminated[env] = 1;
}

__device__ void observe(int env, int agent, pos_view pos, timer_view timer, obs_view obs)
{
    int live = 0;
    for (int p = 0; p < num_patches; ++p)
        if (timer(env, p) == 0)
            live += 1;
    obs(env, agent, 0) = pos(env, agent);
    obs(env, agent, 1) = live;
}
'''


def reference(seed, n_envs, actions, A=3, P=4, size=7, regrow_time=2, goal=6, max_steps=12):
    """The patches env in numpy, replica by replica: the store after reset and after each step."""
    s = dict(pos=np.zeros((n_envs, A), np.int32), spot=np.zeros((n_envs, P), np.int32),
             timer=np.zeros((n_envs, P), np.int32), eaten=np.zeros((n_envs, P), np.int32),
             total=np.zeros(n_envs, np.int32), ticks=np.zeros(n_envs, np.int32), t=np.zeros(n_envs, np.int32),
             episode=np.zeros(n_envs, np.int32), reward=np.zeros((n_envs, A), np.float32),
             terminated=np.zeros(n_envs, np.uint8), obs=np.zeros((n_envs, A, 2), np.float32))
    patch = codegen.ENTITY_STREAM  # the first entity's stream

    def draw(e, stream, episode, step):
        with np.errstate(over="ignore"):
            return int(rng.randint(rng.make_key(seed, e, stream, episode, step), 0, size))

    def reset(e):
        ep = int(s["episode"][e]) + 1
        for a in range(A):
            s["pos"][e, a] = draw(e, a, ep, rng.RESET_STEP)
        for p in range(P):
            s["spot"][e, p], s["timer"][e, p], s["eaten"][e, p] = draw(e, patch + p, ep, rng.RESET_STEP), 0, 0
        s["total"][e] = s["ticks"][e] = s["t"][e] = 0
        s["episode"][e] += 1

    def observe(e):
        s["obs"][e, :, 0] = s["pos"][e]
        s["obs"][e, :, 1] = np.sum(s["timer"][e] == 0)

    for e in range(n_envs):
        reset(e)
        observe(e)
    frames = [{k: v.copy() for k, v in s.items()}]
    for act in actions:
        for e in range(n_envs):
            s["reward"][e] = 0
            s["terminated"][e] = 0
            s["eaten"][e] = 0
            s["pos"][e] = (s["pos"][e] + act[e] - 1 + size) % size
            for a in range(A):
                for p in range(P):
                    if s["timer"][e, p] == 0 and s["spot"][e, p] == s["pos"][e, a]:
                        s["eaten"][e, p] += 1
                        s["reward"][e, a] += 1
            for p in range(P):
                if s["eaten"][e, p] > 0:
                    s["timer"][e, p] = regrow_time
                elif s["timer"][e, p] > 0:
                    s["timer"][e, p] -= 1
                    if s["timer"][e, p] == 0:
                        s["spot"][e, p] = draw(e, patch + p, int(s["episode"][e]), int(s["t"][e]))
            s["total"][e] += s["eaten"][e].sum()
            s["ticks"][e] += 1
            s["terminated"][e] = s["total"][e] >= goal
            s["t"][e] += 1
            observe(e)
            if s["terminated"][e] or s["t"][e] >= max_steps:
                reset(e)
                observe(e)
        frames.append({k: v.copy() for k, v in s.items()})
    return frames


def test_patch_phases_match_a_numpy_reference(target):
    wb.register("patches", PATCHES)
    n_envs, steps = (16, 30) if target == "cpu" else (2, 14)  # the simulator runs a Python thread per lane
    env = wb.make("patches", num_envs=n_envs, target=target, seed=11)
    assert tuple(env.data["spot"].shape) == (n_envs, 4) and env.definition.entities == {"patch": 4}
    draws = np.random.default_rng(5)
    actions = [draws.integers(0, 3, size=(n_envs, 3), dtype=np.int32) for _ in range(steps)]
    want = reference(11, n_envs, actions)
    got = [{k: env.data[k].numpy().copy() for k in want[0]}]
    for act in actions:
        env.step(torch.from_numpy(act))
        got.append({k: env.data[k].numpy().copy() for k in want[0]})
    for k, (w, g) in enumerate(zip(want, got)):
        for name in w:
            np.testing.assert_array_equal(g[name], w[name], err_msg=f"'{name}' after {k} step(s)")
    # the run went through regrowths, terminations and truncations
    assert max(f["timer"].max() for f in want) == 2 and max(f["episode"].max() for f in want) >= 2
    assert any(f["terminated"].any() for f in want[1:]) or target != "cpu"


def test_a_per_replica_phase_runs_once_per_replica(target):
    # `tally` takes neither agent nor patch: with 3 agents, run per agent it would count each step 3 times
    wb.register("patches", PATCHES)
    env = wb.make("patches", num_envs=2, target=target)
    for _ in range(15):  # past terminations and truncations: both restart at 0 with the episode
        env.step(torch.zeros((2, 3), dtype=torch.int32))
        assert env.data["ticks"].tolist() == env.data["t"].tolist()
    assert env.data["episode"].min().item() >= 2


def test_entity_definition_errors_say_what_to_do():
    def fails(old, new):
        assert old in PATCHES
        with pytest.raises(wb.EnvDefinitionError) as info:
            envdef.parse("bad", PATCHES.replace(old, new))
        return str(info.value)

    text = fails("def clear(env, patch, eaten):", "def clear(env, agent, patch, eaten):")
    assert "clear() (line" in text and "takes 'agent' and 'patch'" in text and "once per replica" in text
    assert "which ENTITIES does not declare" in fails('spot=per_entity("patch"', 'spot=per_entity("patches"')
    assert "is a parameter" in fails('ENTITIES = dict(patch=', 'ENTITIES = dict(size=')
    assert "PRECISION must be" in fails('ENTITIES =', 'PRECISION = "float16"\nENTITIES =')
    text = fails("def eat(env, agent, pos, spot, timer, eaten, reward):", "def eat(env, agent, pos, spat):")
    assert "takes 'spat'" in text and "an entity of ENTITIES" in text
    # a constant index past the entity count is caught when the source is parsed
    text = fails("obs[env, agent, 1] = live", "obs[env, agent, 1] = timer[env, 4]")
    assert "index 4 is out of bounds for axis 1 of 'timer' (per patch, shape [E, 4] (int32))" in text


def test_cuda_c_driver_runs_entity_and_per_replica_phases():
    defn = envdef_c.attach_c(envdef.parse("patches", PATCHES), PATCHES_C, "patches.cu")
    source = codegen_c.c_program(defn, codegen.gpu_layout(3))
    assert "for (int a = lane; a < 4; a += TPE)" in source  # the patch phases
    assert "wb_make_key(wb_seed, wb_e, 4294967296ULL + (wb_u64)a, " in source
    assert "tally(e, eaten, total, ticks, terminated);" in source


def test_cuda_c_entity_phases_match_the_cpu_target_in_a_host_build(tmp_path):
    test_cuda_c = pytest.importorskip("test_cuda_c")
    if test_cuda_c.GXX is None:
        pytest.skip("needs g++ for the host build of the C runtime")
    defn = envdef_c.attach_c(envdef.parse("patches", PATCHES), PATCHES_C, "patches.cu")
    frames = test_cuda_c._compare_with_cpu(tmp_path, defn, codegen.gpu_layout(3), n_envs=3, steps=25)
    assert max(f["episode"].max() for f in frames) >= 2


PRECISE = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_env
    PARAMS = dict(scale=0.1, pair=(0.1, 0.3), count=3)
    NUM_AGENTS = 1
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(square=per_env("float64"), product=per_env("float64"), counted=per_env("float64"))

    def reset(env, square, product, counted):
        square[env] = scale * scale
        product[env] = pair[0] * pair[1]
        counted[env] = count

    def step(env, agent, reward):
        reward[env, agent] = 0.0

    def observe(env, agent, obs):
        obs[env, agent, 0] = 0.0
''')


@pytest.mark.parametrize("precision", [None, "float32"])
def test_float_parameters_enter_phases_at_the_declared_precision(target, precision):
    source = PRECISE if precision is None else PRECISE.replace("NUM_AGENTS = 1", f'PRECISION = "{precision}"\nNUM_AGENTS = 1')
    wb.register(f"precise_{precision}", source)
    env = wb.make(f"precise_{precision}", num_envs=2, target=target)
    f32 = np.float32
    if precision == "float32":
        want = [float(f32(0.1) * f32(0.1)), float(f32(0.1) * f32(0.3)), 3.0]
    else:  # the default: float64, as before PRECISION existed
        want = [0.1 * 0.1, 0.1 * 0.3, 3.0]
    assert [env.data[k][0].item() for k in ("square", "product", "counted")] == want
    assert env.definition.params["scale"] == 0.1  # the host keeps the declared value
    explicit = envdef.parse("precise", PRECISE.replace("NUM_AGENTS = 1", 'PRECISION = "float64"\nNUM_AGENTS = 1'))
    assert explicit.precision == "float64" and explicit.kernel_params() == explicit.params  # the default, spelled out


def test_cuda_c_parameters_follow_precision():
    source = PRECISE.replace("NUM_AGENTS = 1", 'PRECISION = "float32"\nNUM_AGENTS = 1')
    c = "__device__ void reset(int env) {}\n__device__ void step(int env) {}\n__device__ void observe(int env) {}\n"
    single = codegen_c.c_program(envdef_c.attach_c(envdef.parse("precise", source), c), codegen.gpu_layout(1))
    assert "constexpr float scale = 0.10000000149011612f;" in single
    assert "__device__ constexpr float pair[2] = {0.10000000149011612f, 0.30000001192092896f};" in single
    assert "constexpr int count = 3;" in single
    double = codegen_c.c_program(envdef_c.attach_c(envdef.parse("precise", PRECISE), c), codegen.gpu_layout(1))
    assert "constexpr double scale = 0.1;" in double
