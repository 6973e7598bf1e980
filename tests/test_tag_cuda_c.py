"""tag_continuous on the cuda-c target: envs/tag_continuous.cu against envs/tag_continuous.py.

Without a GPU: the registry attaches the .cu, it compiles with NVRTC (when NVRTC loads), and the
g++ host build of the generated program (real threads for the lanes, real atomics, barriers
between phases; see test_cuda_c.py) runs random play and hand-placed scenes step by step
against the cpu target, array by array: positions and rewards to float32 rounding, everything
discrete (tags, in_game flags, k-NN ids, counters, the grid) exactly. On a GPU: check_env
against the cpu target, and with more agents than a replica has lanes (1100), against both the
cpu and the cuda target.
"""
import subprocess

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.compiler import codegen_c, envdef, envdef_c
from workbench.runtime import registry
from workbench.compiler.codegen import Layout, gpu_layout
from workbench.runtime.env import Env
from workbench.compiler.targets import cuda_c

from conftest import gpu_only
from test_cuda_c import _HOST_CUDA, GXX, _build, _host_run, _kernel_arrays

needs_gxx = pytest.mark.skipif(GXX is None, reason="needs g++ for the host build of the C runtime")

# radius = tagging_distance * grid_length = 2.0 (exact in float32 and float64); reward terms chosen so
# every sum is distinct. A 3 x 3 neighbour grid (rather than the automatic 1 x 1) so that the k-NN
# search walks rings of cells.
TAG = dict(num_taggers=2, num_runners=5, grid_length=10.0, episode_length=9, tagging_distance=0.2,
           max_speed_tagger=1.0, max_speed_runner=0.5, edge_hit_penalty=-0.125, tag_reward_for_tagger=10.0,
           step_penalty_for_tagger=-0.25, tag_penalty_for_runner=-3.0, step_reward_for_runner=0.5,
           end_of_game_reward_for_runner=7.0, num_other_agents_observed=3, knn_cells_per_side=3,
           knn_cell_capacity=2)
# every other agent observed, in id order; tagged runners stay visible with in_game 0. A radius of
# 3.75 is large enough for random play to tag every runner of a replica (a termination) now and then.
FULL = dict(TAG, full_observation=1, tagging_distance=0.375, episode_length=30)
# enough taggers that the tag check reads the grid's cells (not only the scan of all taggers), and
# 16 agents in 16 cells of room 3: some cells overflow (the cpu target's k-NN search then falls back
# to its scan; the C one scans every agent in replicas this small, RINGS below walks the rings)
GRID = dict(TAG, num_taggers=6, num_runners=10, tagging_distance=0.1, num_other_agents_observed=4,
            knn_cells_per_side=4, knn_cell_capacity=3, episode_length=15)

NOOP = 0
ACC_UP = 9  # +1.0, the last of 9 levels over [-1, 1]
TURN_LEFT = 20  # +pi/2, the last of 20 levels over [-pi/2, pi/2]


def definition(**params):
    return registry.definition("tag_continuous", **params)


def random_actions(defn, n_envs, steps, seed):
    rng = np.random.default_rng(seed)
    shape = (n_envs, defn.num_agents)
    if not hasattr(defn.action, "nvec"):  # Discrete: [E, A]
        return [rng.integers(0, defn.action.n, size=shape, dtype=np.int32) for _ in range(steps)]
    return [np.stack([rng.integers(0, n, size=shape, dtype=np.int32) for n in defn.action.nvec], axis=-1)
            for _ in range(steps)]


def snapshot(env):
    return {name: tensor.numpy().copy() for name, tensor in env.store.items()}


def cpu_frames(defn, n_envs, seed, actions, state=None):
    """The store after reset (or after loading `state`) and after each step on the cpu target."""
    env = Env(defn, num_envs=n_envs, target="cpu", seed=seed)
    if state is not None:
        env.store.load_snapshot({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    frames = [snapshot(env)]
    for act in actions:
        env.step(torch.from_numpy(act))
        frames.append(snapshot(env))
    return frames


def host_run_from(tmp_path, defn, layout, n_envs, seed, state, actions):
    """As test_cuda_c._host_run, but the host build starts from `state` (every array) instead of a reset."""
    specs = list(defn.arrays.values())
    grid = (n_envs + layout.envs_per_block - 1) // layout.envs_per_block
    arrays, flags = _kernel_arrays(defn, n_envs)  # none recorded, final observations kept at every end
    extra = arrays[len(specs):]  # the slot array and terminal copies
    args = ", ".join(["n_envs", "seed", "n_envs", "0"] + [f"{s.name}.data()" for s in specs]
                     + [f"{name}.data()" for name, _, _ in extra])
    sizes = [state[s.name].size for s in specs]

    def io(call, s, stream):  # read or write one whole array; a short count fails the program
        n = f"{s.name}.size()"
        return f"        if ({call}({s.name}.data(), sizeof({s.name}[0]), {n}, {stream}) != {n}) return 1;"

    main = ["int main(int argc, char** argv)", "{", f"    const int n_envs = {n_envs};",
            "    const wb_u64 seed = strtoull(argv[1], 0, 10);", "    const int steps = atoi(argv[2]);",
            "    FILE* acts = fopen(argv[3], \"rb\");", "    FILE* out = fopen(argv[4], \"wb\");",
            "    FILE* init = fopen(argv[5], \"rb\");"]
    main += [f"    std::vector<{codegen_c.c_type(s.dtype)}> {s.name}({n});" for s, n in zip(specs, sizes)]
    main += [f"    std::vector<{codegen_c.c_type(dtype)}> {name}({n});" for name, dtype, n in extra] + flags
    main += ["    {", *[io("fread", s, "init") for s in specs], "    }",
             "    for (int k = 0; k < steps; ++k) {",
             "        if (fread(action.data(), sizeof(action[0]), action.size(), acts) != action.size()) return 1;",
             f"        wb_launch([&] {{ wb_step({args}); }}, {grid}, {layout.block});",
             *[io("fwrite", s, "out") for s in specs], "    }", "    fclose(out);", "    return 0;", "}"]
    (tmp_path / "program.cu").write_text(codegen_c.c_program(defn, layout))
    exe = _build(tmp_path, defn.name + "_from", _HOST_CUDA + "\n#include \"program.cu\"\n" + "\n".join(main))
    (tmp_path / "init.bin").write_bytes(b"".join(np.ascontiguousarray(state[s.name]).tobytes() for s in specs))
    (tmp_path / "actions.bin").write_bytes(b"".join(np.ascontiguousarray(a, dtype=defn.arrays["action"].dtype).tobytes()
                                                    for a in actions))
    subprocess.run([str(exe), str(seed), str(len(actions)), str(tmp_path / "actions.bin"), str(tmp_path / "out.bin"),
                    str(tmp_path / "init.bin")], check=True, timeout=300)
    raw = (tmp_path / "out.bin").read_bytes()
    frames, offset = [state], 0
    for _ in actions:
        frame = {}
        for s, n in zip(specs, sizes):
            frame[s.name] = np.frombuffer(raw, dtype=s.dtype, count=n, offset=offset)
            offset += n * s.dtype.itemsize
        frames.append(frame)
    assert offset == len(raw)
    return frames


def random_play_matches(tmp_path, defn, n_envs, seed, steps, layout=None):
    """The host build and the cpu target over `steps` random steps, array by array; the cpu frames."""
    actions = random_actions(defn, n_envs, steps, seed)
    want = cpu_frames(defn, n_envs, seed, actions)
    got = _host_run(tmp_path, defn, layout or gpu_layout(defn.num_agents), n_envs, seed, actions)
    assert_frames_match(want, got)
    return want


def assert_frames_match(want_frames, got_frames):
    assert len(want_frames) == len(got_frames)
    for k, (want, got) in enumerate(zip(want_frames, got_frames)):
        stage = "reset" if k == 0 else f"step {k}"
        for name, expected in want.items():
            actual = np.asarray(got[name]).reshape(expected.shape)
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=f"'{name}' after {stage}")
            else:
                np.testing.assert_array_equal(actual, expected, err_msg=f"'{name}' after {stage}")


def brute_knn(frame, n_agents, k):
    """Per (replica, agent) in the game: the ids of the k nearest other agents in the game (float32
    squared distances, ties to the lower id), for comparison with knn_id."""
    x, y, in_game = (frame[n].reshape(-1, n_agents) for n in ("x", "y", "in_game"))
    result = np.full((x.shape[0], n_agents, k), -1, np.int64)
    for e in range(x.shape[0]):
        for a in range(n_agents):
            if not in_game[e, a]:
                continue
            dx = x[e] - x[e, a]
            dy = y[e] - y[e, a]
            d2 = dx * dx + dy * dy
            others = [j for j in range(n_agents) if j != a and in_game[e, j]]
            ranked = sorted(others, key=lambda j: (d2[j], j))[:k]
            result[e, a, :len(ranked)] = ranked
    return result


# ---- the .cu is attached and compiles ------------------------------------------------------------

def test_registry_attaches_the_cu_with_every_phase():
    defn = definition(**TAG)
    assert defn.c_source is not None and defn.c_filename.endswith("tag_continuous.cu")
    phases = envdef_c.c_phases(defn)
    for stage, fns in (("reset", defn.reset_phases), ("step", defn.step_phases), ("observe", defn.observe_phases)):
        assert [p.name for p in phases[stage]] == [fn.__name__ for fn in fns]
        # the C phases take the arrays their Python twins take, in the same order
        for phase, fn in zip(phases[stage], fns):
            assert list(phase.args) == defn.phase_args(fn), phase.name



@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("params", [TAG, FULL, dict(num_taggers=100, num_runners=1000)],
                         ids=["partial", "full", "1100"])
def test_compiles_with_nvrtc(nvrtc, arch, params):
    defn = definition(**params)
    code, source = cuda_c.compile_program(defn, arch)
    assert len(code.code) > 1000 and "wb_step" in source
    assert "__syncthreads();" in source  # several lanes per replica: barriers between the phases


def test_register_cap_reaches_both_kernels():
    source = codegen_c.c_program(definition(**TAG), gpu_layout(7))
    assert "#define WB_MAX_REGISTERS 64" in source  # the env's own line, before the driver
    assert source.index("#define WB_MAX_REGISTERS 64") < source.index("#ifdef WB_MAX_REGISTERS")
    for kernel in ("wb_reset", "wb_step"):
        assert f'extern "C" __global__ void WB_REGISTER_CAP {kernel}(' in source
    assert "#define WB_REGISTER_CAP __maxnreg__(WB_MAX_REGISTERS)" in source


# ---- the host build against the cpu target -------------------------------------------------------

@needs_gxx
@pytest.mark.parametrize("layout", [None, Layout(2, 2)], ids=["gpu_layout", "strided_lanes"])
def test_host_build_matches_cpu_in_random_play(tmp_path, layout):
    defn = definition(**TAG)
    n_envs, seed = 2, 11
    want = random_play_matches(tmp_path, defn, n_envs, seed, 24, layout)
    # the run holds what the test is for: tags, runners leaving, the end of episodes
    assert any((f["in_game"] == 0).any() for f in want)
    assert any(f["runners_left"].min() < TAG["num_runners"] for f in want)
    assert any(f["truncated"].any() for f in want)
    assert any((f["knn_id"] == -1).any() and (f["knn_id"] >= 0).any() for f in want)
    for f in want:  # the grid is left empty after every launch
        assert not f["cell_count"].any() and not f["cell_members"].any() and (f["grid_slot"] == -1).all()
        np.testing.assert_array_equal(f["knn_id"].reshape(n_envs, defn.num_agents, -1),
                                      brute_knn(f, defn.num_agents, TAG["num_other_agents_observed"]))


@needs_gxx
def test_host_build_matches_cpu_with_full_observation(tmp_path):
    defn = definition(**FULL)
    n_envs, seed = 2, 2
    want = random_play_matches(tmp_path, defn, n_envs, seed, 30)
    assert defn.obs_shape == (7 * 6 + 8,)
    assert any((f["in_game"] == 0).any() for f in want)
    assert any(f["terminated"].any() for f in want) and any(f["truncated"].any() for f in want)
    # an agent out of the game shows with in_game 0 in the others' observations
    flags = [f["obs"].reshape(n_envs, defn.num_agents, -1)[..., 6:42:7] for f in want]
    assert any(((fl == 0) & (f["in_game"].reshape(n_envs, -1, 1) != 0)).any() for fl, f in zip(flags, want))


@needs_gxx
def test_host_build_matches_cpu_when_the_tag_check_reads_the_grid(tmp_path):
    defn = definition(**GRID)
    n_envs, seed = 3, 2
    want = random_play_matches(tmp_path, defn, n_envs, seed, 20, Layout(4, 3))
    assert any((f["in_game"] == 0).any() for f in want)
    for f in want:
        np.testing.assert_array_equal(f["knn_id"].reshape(n_envs, defn.num_agents, -1),
                                      brute_knn(f, defn.num_agents, GRID["num_other_agents_observed"]))


# more agents than TC_SCAN_MAX (128): the k-NN search walks the grid's rings (smaller replicas scan
# every agent); 140 agents in 36 cells of room 4, so some searches also fall back to their scan
RINGS = dict(TAG, num_taggers=10, num_runners=130, tagging_distance=0.05, num_other_agents_observed=4,
             knn_cells_per_side=6, knn_cell_capacity=4, episode_length=12)


@needs_gxx
def test_host_build_matches_cpu_when_the_search_walks_rings(tmp_path):
    defn = definition(**RINGS)
    n_envs, seed = 2, 5
    source = codegen_c.c_program(defn, gpu_layout(defn.num_agents))
    assert defn.num_agents > int(source.split("constexpr int TC_SCAN_MAX = ")[1].split(";")[0])
    want = random_play_matches(tmp_path, defn, n_envs, seed, 14)
    assert any(f["truncated"].any() for f in want) and any((f["in_game"] == 0).any() for f in want)
    for f in want:
        np.testing.assert_array_equal(f["knn_id"].reshape(n_envs, defn.num_agents, -1),
                                      brute_knn(f, defn.num_agents, RINGS["num_other_agents_observed"]))


def placed(defn, n_envs, seed, pos, speed=None, heading=None, in_game=None, t=0):
    """The store after a cpu reset with replica 0 overwritten by the given scene."""
    env = Env(defn, num_envs=n_envs, target="cpu", seed=seed)
    state = snapshot(env)
    n = defn.num_agents
    nt = defn.params["num_taggers"]
    state["x"][0] = [p[0] for p in pos]
    state["y"][0] = [p[1] for p in pos]
    state["speed"][0] = speed or [0.0] * n
    state["heading"][0] = heading or [0.0] * n
    state["accel"][0] = 0.0
    state["in_game"][0] = in_game or [1] * n
    state["runners_left"][0] = int(np.sum(state["in_game"][0][nt:]))
    state["t"][0] = t
    return state


@needs_gxx
def test_host_build_matches_cpu_in_placed_scenes(tmp_path):
    """Tags at exactly the radius (and not a float32 step beyond), ties to the lower tagger id, one
    tagger collecting several tags, walls with their penalty, speed caps, an agent out of the game
    staying put, the end-of-game bonus, termination with the same-step reset."""
    defn = definition(**TAG)
    n_envs, seed = 2, 3
    beyond = float(np.nextafter(np.float32(8.0), np.float32(9.0)))  # 2.0 from tagger 1, plus one float32 step
    scenes = [
        # runner 2 at exactly 2.0 from tagger 0, runner 3 just beyond; runner 4 at 2.0 from both
        # taggers (tie: tagger 0); runner 5 at the wall heading out at full speed; runner 6 out of the game
        dict(pos=[(2.0, 2.0), (2.0, 6.0), (4.0, 2.0), (2.0, beyond), (2.0, 4.0), (9.8, 9.0), (5.0, 5.0)],
             speed=[0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0], in_game=[1, 1, 1, 1, 1, 1, 0],
             acts={5: (ACC_UP, NOOP), 6: (ACC_UP, TURN_LEFT)}, t=0),
        # the last step: runners still in the game get the end bonus, a tagged one does not
        dict(pos=[(2.0, 2.0), (8.0, 8.0), (2.5, 2.0), (5.0, 5.0), (5.0, 6.0), (1.0, 9.0), (9.0, 1.0)],
             acts={}, t=TAG["episode_length"] - 1),
        # every runner within reach: terminated, and the replica starts over in the same step
        dict(pos=[(2.0, 2.0), (8.0, 8.0), (2.5, 2.0), (2.0, 3.5), (8.0, 7.0), (9.0, 9.0), (7.0, 8.0)],
             acts={}, t=3),
    ]
    for k, scene in enumerate(scenes):
        state = placed(defn, n_envs, seed, scene["pos"], scene.get("speed"), scene.get("heading"),
                       scene.get("in_game"), scene["t"])
        first = np.zeros(tuple(state["action"].shape), np.int32)
        for agent, act in scene["acts"].items():
            first[0, agent] = act
        actions = [first] + random_actions(defn, n_envs, 2, seed + k)
        want = cpu_frames(defn, n_envs, seed, actions, state)
        sub = tmp_path / f"scene{k}"
        sub.mkdir()
        got = host_run_from(sub, defn, gpu_layout(defn.num_agents), n_envs, seed, state, actions)
        assert_frames_match(want, got)
        after = want[1]
        reward = after["reward"][0]
        if k == 0:
            assert after["in_game"][0].tolist() == [1, 1, 0, 1, 0, 1, 0]
            assert after["runners_left"][0] == 2
            np.testing.assert_allclose(reward, [-0.25 + 20.0, -0.25, 0.5 - 3.0, 0.5, 0.5 - 3.0, 0.5 - 0.125, 0.0])
            assert after["x"][0, 5] == 10.0 and after["speed"][0, 5] == 0.5
            assert (after["x"][0, 6], after["y"][0, 6], after["speed"][0, 6]) == (5.0, 5.0, 0.0)
        elif k == 1:
            assert after["truncated"][0] and not after["terminated"][0]
            np.testing.assert_allclose(after["last_return"][0], [-0.25 + 10.0, -0.25, 0.5 - 3.0] + [7.5] * 4)
        else:
            assert after["terminated"][0] and after["t"][0] == 0 and after["in_game"][0].all()
            assert after["runners_left"][0] == TAG["num_runners"] and after["last_length"][0] == 4


# ---- on a GPU ------------------------------------------------------------------------------------

MODERATE = dict(num_taggers=4, num_runners=60, grid_length=20.0, episode_length=40, tagging_distance=0.05,
                max_speed_runner=0.8, num_other_agents_observed=5, edge_hit_penalty=-0.1, step_penalty_for_tagger=-0.01,
                step_reward_for_runner=0.01)


@gpu_only
def test_cuda_c_agrees_with_cpu_on_the_gpu():
    report = wb.check_env("tag_continuous", targets=["cpu", "cuda-c"], num_envs=128, steps=100, seed=1, **MODERATE)
    assert report.episodes_finished > 0


@gpu_only
def test_cuda_c_agrees_with_cpu_with_full_observation():
    report = wb.check_env("tag_continuous", targets=["cpu", "cuda-c"], num_envs=64, steps=50, seed=2, **FULL)
    assert report.episodes_finished > 0


@gpu_only
def test_cuda_c_agrees_with_cuda_beyond_one_block():
    # 1100 agents: more than the lanes of a replica's block, so each lane loops over several agents
    # and the barriers between phases must cover them all
    params = dict(num_taggers=100, num_runners=1000, grid_length=100.0, episode_length=30, tagging_distance=0.02,
                  num_other_agents_observed=8)
    layout = gpu_layout(1100)
    assert layout.envs_per_block == 1 and layout.threads_per_env < 1100
    for targets in (["cuda", "cuda-c"], ["cpu", "cuda-c"]):
        report = wb.check_env("tag_continuous", targets=targets, num_envs=6, steps=30, seed=3, **params)
        assert report.episodes_finished == 6  # each replica reached its time limit


@gpu_only
def test_numba_cuda_matches_cpu_on_near_ties():
    """Squared distances that tie in float32: with fused multiply-adds the GPU ordered agents 86
    and 95 differently from the cpu target; env kernels now compile without contraction."""
    params = dict(num_taggers=8, num_runners=100, grid_length=30.0, episode_length=25, tagging_distance=0.04,
                  num_other_agents_observed=6, knn_cell_capacity=2)
    report = wb.check_env("tag_continuous", targets=["cpu", "cuda", "cuda-c"], num_envs=256, steps=80, seed=9,
                          **params)
    assert report.episodes_finished > 0
