"""The cuda-c target: C env sources, the generated C drivers, NVRTC compilation and the C runtime.

Without a GPU: the programs compile with NVRTC (needs libnvrtc: pip install nvidia-cuda-nvrtc), and
the same programs also build with g++ against a small host emulation of CUDA threads, blocks and
__syncthreads() and are run there against the cpu target (a real check of the driver semantics,
the C phases and the C random numbers). Launches on a device are marked gpu_only.
"""
import dataclasses
import math
import shutil
import subprocess
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.compiler import codegen_c, envdef, envdef_c
from workbench.runtime import registry
from workbench.compiler.codegen import Layout, gpu_layout
from workbench.runtime.env import Env
from workbench.errors import EnvCompileError, EnvDefinitionError, TargetUnavailableError
from workbench.compiler.targets import cuda_c

from conftest import gpu_only

RUNTIME_DIR = Path(cuda_c.INCLUDE_DIR)
GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="needs g++ for the host build of the C runtime")

# A 3-agent env that uses what the cartpole does not: several step phases reading other agents'
# data (barriers), multi-dim per-agent state and observations, Box actions, atomics, every dtype,
# every random-number function and a tuple parameter.
PROBE_PY = '''
from workbench.compiler.envdef import Box, per_agent, per_env
from workbench.compiler.rng import normal, randint, uniform, uniform_range

PARAMS = dict(num_agents=3, speed=0.5, wall=1.5, max_steps=9, gains=(1.0, 0.5))
NUM_AGENTS = "num_agents"
MAX_STEPS = "max_steps"
OBSERVATION = Box(shape=(2, 2))
ACTION = Box(low=-1.0, high=1.0, shape=(2,))
STATE = dict(pos=per_agent(shape=(2,)), hits=per_env("int32"), energy=per_agent("float64"),
             tag=per_agent("uint8"), ticks=per_env("int64"))


def reset(env, agent, key, pos, energy, tag, hits, ticks):
    pos[env, agent, 0] = uniform_range(key, 0, -1.0, 1.0)
    pos[env, agent, 1] = normal(key, 1)
    energy[env, agent] = randint(key, 2, 5)
    tag[env, agent] = 0
    hits[env] = 0
    ticks[env] = 0


def move(env, agent, key, action, pos, energy, hits, tag):
    for i in range(2):
        pos[env, agent, i] += speed * gains[i] * action[env, agent, i] + 0.01 * uniform(key, i)
    if abs(pos[env, agent, 0]) > wall:
        atomic_add(hits, env, 1)
        tag[env, agent] = 1
    energy[env, agent] -= 0.25


def score(env, agent, pos, hits, energy, reward, terminated, ticks):
    other = (agent + 1) % NUM_AGENTS
    reward[env, agent] = pos[env, other, 0] - 0.1 * hits[env] + energy[env, agent]
    if agent == 0:
        ticks[env] += 1
        if hits[env] >= 2:
            terminated[env] = 1


STEP = [move, score]


def observe(env, agent, pos, obs):
    other = (agent + 1) % NUM_AGENTS
    for i in range(2):
        obs[env, agent, 0, i] = pos[env, agent, i]
        obs[env, agent, 1, i] = pos[env, other, i]
'''

PROBE_C = r'''// probe's phases in CUDA C
__device__ void reset(int env, int agent, wb_key key, pos_view pos, energy_view energy, tag_view tag, int* hits,
                      long long* ticks)
{
    pos(env, agent, 0) = wb_uniform_range(key, 0, -1.0, 1.0);
    pos(env, agent, 1) = wb_normal(key, 1);
    energy(env, agent) = wb_randint(key, 2, 5);
    tag(env, agent) = 0;
    hits[env] = 0;
    ticks[env] = 0;
}

__device__ void move(int env, int agent, wb_key key, action_view action, pos_view pos, energy_view energy, int* hits,
                     tag_view tag)
{
    for (int i = 0; i < 2; ++i)
        pos(env, agent, i) += speed * gains[i] * action(env, agent, i) + 0.01 * wb_uniform(key, i);
    if (fabsf(pos(env, agent, 0)) > wall) {
        wb_atomic_add(hits, env, 1);
        tag(env, agent) = 1;
    }
    energy(env, agent) -= 0.25;
}

__device__ void score(int env, int agent, const pos_view pos, const int* hits, energy_view energy, reward_view reward,
                      unsigned char* terminated, long long* ticks)
{
    const int other = (agent + 1) % NUM_AGENTS;
    reward(env, agent) = pos(env, other, 0) - 0.1 * hits[env] + energy(env, agent);
    if (agent == 0) {
        ticks[env] += 1;
        if (hits[env] >= 2)
            terminated[env] = 1;
    }
}

__device__ void observe(int env, int agent, pos_view pos, obs_view obs)
{
    const int other = (agent + 1) % NUM_AGENTS;
    for (int i = 0; i < 2; ++i) {
        obs(env, agent, 0, i) = pos(env, agent, i);
        obs(env, agent, 1, i) = pos(env, other, i);
    }
}
'''

# The same env as one pure CUDA C source (what `%%warpenv probe --lang cuda` holds).
PROBE_PURE = '''/*@workbench
PARAMS = dict(num_agents=3, speed=0.5, wall=1.5, max_steps=9, gains=(1.0, 0.5))
NUM_AGENTS = "num_agents"
MAX_STEPS = "max_steps"
OBSERVATION = Box(shape=(2, 2))
ACTION = Box(low=-1.0, high=1.0, shape=(2,))
STATE = dict(pos=per_agent(shape=(2,)), hits=per_env("int32"), energy=per_agent("float64"),
             tag=per_agent("uint8"), ticks=per_env("int64"))
STEP = ["move", "score"]
*/
''' + PROBE_C


def probe_definition(**params):
    return envdef_c.attach_c(envdef.parse("probe", PROBE_PY, "probe.py", params), PROBE_C, "probe.cu")



# ---- the /*@workbench*/ declaration block and the C phase scan ---------------------------------

def test_workbench_block_parses():
    defn = envdef_c.parse_c("probe_pure", PROBE_PURE, overrides={"num_agents": 4})
    assert defn.language == "cuda-c" and defn.c_source == PROBE_PURE
    assert defn.num_agents == 4 and defn.max_steps == 9 and defn.obs_shape == (2, 2)
    assert defn.params["gains"] == (1.0, 0.5)
    assert defn.arrays["pos"].shape == (2,) and defn.arrays["ticks"].dtype == np.int64
    phases = envdef_c.c_phases(defn)
    assert [p.name for p in phases["step"]] == ["move", "score"]
    assert phases["observe"][0].args == ("env", "agent", "pos", "obs")
    lines = PROBE_PURE.splitlines()
    assert all(lines[p.line - 1].startswith("__device__ void " + p.name) for ps in phases.values() for p in ps)
    # the same arrays, in the same order, as the Python twin
    assert list(defn.arrays) == list(probe_definition().arrays)


def test_workbench_block_errors_name_the_line():
    bad = PROBE_PURE.replace('MAX_STEPS = "max_steps"', "MAX_STEPS = max_steps + ")
    with pytest.raises(EnvDefinitionError) as info:
        envdef_c.parse_c("bad", bad)
    assert info.value.line == 4
    with pytest.raises(EnvDefinitionError, match=r"takes 'speedz'"):
        envdef_c.parse_c("bad", PROBE_PURE.replace("energy_view energy, int* hits,\n                     tag_view tag",
                                                 "energy_view energy, int* hits,\n                     float speedz"))
    with pytest.raises(EnvDefinitionError, match=r"no `__device__ void score"):
        envdef_c.parse_c("bad", PROBE_PURE.replace("void score(", "void scored("))
    with pytest.raises(EnvDefinitionError, match=r"/\*@workbench"):
        envdef_c.parse_c("bad", PROBE_C)


def test_workbench_block_offers_check_ranges_and_names_unquoted_phases_and_close_misses():
    ranged = PROBE_PURE.replace('STEP = ["move", "score"]',
                                'STEP = ["move", "score"]\nvalidate_params = lambda p: check_ranges(p, {"speed": "(0, 1]"})')
    defn = envdef_c.parse_c("ranged", ranged)
    with pytest.raises(EnvDefinitionError, match="speed"):
        envdef_c.parse_c("ranged", ranged, overrides={"speed": 5.0})
    assert defn.num_agents == 3
    with pytest.raises(EnvDefinitionError) as info:
        envdef_c.parse_c("bad", PROBE_PURE.replace('STEP = ["move", "score"]', "STEP = [move, score]"))
    assert "move is a C function" in str(info.value) and 'STEP = ["move"]' in str(info.value)
    assert info.value.line == PROBE_PURE.splitlines().index('STEP = ["move", "score"]') + 1
    with pytest.raises(EnvDefinitionError, match=r"\(a step phase, named in STEP\); did you mean score\?"):
        envdef_c.parse_c("bad", PROBE_PURE.replace('STEP = ["move", "score"]', 'STEP = ["move", "scor"]'))
    with pytest.raises(EnvDefinitionError, match=r"\(an observe phase, named in OBSERVE\)"):
        envdef_c.parse_c("bad", PROBE_PURE.replace("void observe(", "void watch("))


def test_a_c_env_asks_for_cuda_c_by_name_and_a_python_twin_registers_with_its_c_source():
    wb.register("probe_pure_only", PROBE_PURE, language="cuda")
    with pytest.raises(TargetUnavailableError) as info:
        wb.make("probe_pure_only", num_envs=4, target="cpu")
    for words in ("written in CUDA C alone", "target 'cuda-c'", "not on 'cpu'", "c_source=c_source"):
        assert words in str(info.value)
    with pytest.raises(EnvDefinitionError, match="a CUDA C env holds its phases itself: drop c_source"):
        wb.register("probe_both", PROBE_PURE, language="cuda", c_source=PROBE_C)
    wb.register("probe_twin", PROBE_PY, c_source=PROBE_C, c_filename="probe.cu")
    twin = registry.definition("probe_twin")
    assert twin.language == "python" and twin.c_source == PROBE_C and twin.c_filename == "probe.cu"
    assert [p.name for p in envdef_c.c_phases(twin)["step"]] == ["move", "score"]
    assert wb.make("probe_twin", num_envs=4, target="cpu").num_agents == 3  # (cpu runs the Python phases)


def test_c_functions_ignore_comments_and_read_parameter_names():
    source = '''
// __device__ void fake(int env) {
/* __device__ void fake2(int env) { */
__device__ static __forceinline__ float helper(float a) { return a; }
__device__ void step(int env, int agent, wb_view<float, 3, 4> obs, const float* const x, unsigned char done[]) {}
'''
    found = envdef_c.c_functions(source)
    assert sorted(found) == ["helper", "step"]
    assert found["step"][0] == envdef_c.CPhase("step", ("env", "agent", "obs", "x", "done"), 5)


def test_registry_attaches_the_sibling_cu():
    defn = registry.definition("cartpole")
    assert defn.c_source is not None and defn.c_filename.endswith("cartpole.cu")
    assert defn.language == "python" and defn.reset_phases[0].__name__ == "reset"
    assert [p.name for p in envdef_c.c_phases(defn)["step"]] == ["step"]
    wb.register("probe_pure_reg", PROBE_PURE, language="cuda")
    assert registry.definition("probe_pure_reg", speed=1.0).params["speed"] == 1.0


# ---- generated driver ------------------------------------------------------------------------

def test_gpu_layout_shapes():
    assert gpu_layout(1) == Layout(1, 128)  # one replica a thread
    assert gpu_layout(3) == Layout(32, 4)  # a warp a replica, blocks of 128 lanes
    assert gpu_layout(110) == Layout(128, 1)  # a replica a block: its barriers hold back no other replica
    assert gpu_layout(1000) == Layout(256, 1)  # agents strided over at most 256 lanes
    assert gpu_layout(64, multi_agent_block=256) == Layout(64, 4)


def test_driver_mirrors_the_gpu_layout():
    defn = probe_definition()
    layout = gpu_layout(defn.num_agents)
    source = codegen_c.c_program(defn, layout)
    assert f"constexpr int TPE = {layout.threads_per_env};" in source
    assert "for (int a = lane; a < NUM_AGENTS; a += TPE)" in source
    assert source.count("__syncthreads();") > 0
    assert "__device__ constexpr double gains[2] = {1.0, 0.5};" in source
    assert "typedef wb_view<float, NUM_AGENTS, 2, 2> obs_view;" in source
    assert "typedef wb_view<long long> ticks_view;" in source
    single = codegen_c.c_program(registry.definition("cartpole"), gpu_layout(1))
    assert "__syncthreads" not in single.split('#line 1 "')[-1].split("wb_reset")[-1]
    # every generated #line directive names the physical line that follows it
    for k, line in enumerate(single.splitlines()):
        if line.startswith('#line ') and line.endswith('"<workbench driver>"'):
            assert int(line.split()[1]) == k + 2


# ---- NVRTC -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cartpole_compiles_with_nvrtc(nvrtc, arch):
    code, source = cuda_c.compile_program(registry.definition("cartpole"), arch)
    assert len(code.code) > 1000 and "wb_step" in source


def test_compile_cache_keeps_the_cubin(nvrtc, tmp_path, monkeypatch):
    """A second compile of the same program loads NVRTC's cubin from the cache; another program (a
    parameter changed) compiles anew; WORKBENCH_CACHE_DIR=off bypasses the cache."""
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    defn = registry.definition("cartpole")
    first, _ = cuda_c.compile_program(defn, "sm_90")
    cubins = sorted(tmp_path.glob("*/" + cuda_c.CUBIN_FILE))
    assert len(cubins) == 1 and cubins[0].read_bytes() == bytes(first.code)
    import cuda.core

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again instead of loading the cached cubin")

    with monkeypatch.context() as patched:
        patched.setattr(cuda.core, "Program", no_compile)
        again, _ = cuda_c.compile_program(defn, "sm_90")
    assert bytes(again.code) == bytes(first.code)
    cuda_c.compile_program(registry.definition("cartpole", force_mag=11.0), "sm_90")
    cuda_c.compile_program(defn, "sm_80")
    assert len(list(tmp_path.glob("*/" + cuda_c.CUBIN_FILE))) == 3
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", "off")
    cuda_c.compile_program(registry.definition("cartpole", force_mag=12.0), "sm_90")
    assert len(list(tmp_path.glob("*/" + cuda_c.CUBIN_FILE))) == 3


def test_best_target_prefers_c_phases_on_a_gpu(monkeypatch):
    """With a GPU (availability faked here), auto picks cuda-c for an env that ships CUDA C phases
    and NVRTC loads, cuda for the others or without NVRTC; without a GPU, cpu."""
    from workbench.compiler import targets
    from workbench.compiler.targets import cuda as numba_cuda
    monkeypatch.setattr(numba_cuda, "simulator_enabled", lambda: False)
    monkeypatch.setattr(targets.target_named("cuda"), "availability", lambda: None)
    c_target = targets.target_named("cuda-c")
    monkeypatch.setattr(c_target, "availability", lambda: None)
    assert [wb.best_target(n) for n in ("cartpole", "tag_grid", "tag_continuous", "pendulum")] == \
        ["cuda-c", "cuda-c", "cuda-c", "cuda"]
    assert targets.best_target(registry.definition("tag_grid")) == "cuda-c"
    assert targets.best_target(registry.definition("acrobot")) == "cuda"
    assert wb.best_target() == "cuda" and wb.best_target("no_such_env") == "cuda"
    monkeypatch.setattr(c_target, "availability", lambda: "NVRTC cannot be loaded")
    assert wb.best_target("cartpole") == "cuda"
    monkeypatch.setattr(targets.target_named("cuda"), "availability", lambda: "no GPU")
    assert wb.best_target("cartpole") == "cpu"


def test_probe_and_pure_c_compile_with_nvrtc(nvrtc):
    for defn in (probe_definition(), envdef_c.parse_c("probe_pure", PROBE_PURE)):
        code, _ = cuda_c.compile_program(defn, "sm_90")
        assert len(code.code) > 1000


def test_math_helpers_compile_in_device_code_with_nvrtc(nvrtc):
    """clip of a float between double bounds and sign, as a CUDA C phase writes them (clip did not
    compile with mixed float and double arguments)."""
    cu = (Path(__file__).resolve().parent.parent / "envs" / "cartpole.cu").read_text()
    old = "const float theta_dot_sq = theta_dot0 * theta_dot0;"
    assert old in cu
    defn = envdef_c.attach_c(registry.definition("cartpole"), cu.replace(old, "const float theta_dot_sq = clip("
                             "theta_dot0 * theta_dot0, 0.0, 1e30) * sign(theta_dot0) * sign(theta_dot0);"))
    code, _ = cuda_c.compile_program(defn, "sm_90")
    assert len(code.code) > 1000


def test_c_syntax_error_names_the_cu_line(nvrtc):
    cu = (Path(__file__).resolve().parent.parent / "envs" / "cartpole.cu").read_text()
    broken = cu.replace("    reward(env, agent) = 1.0f;", "    reward(env, agent) = 1.0f")
    line = broken.splitlines().index("    reward(env, agent) = 1.0f") + 1
    defn = envdef_c.attach_c(registry.definition("cartpole"), broken, "/somewhere/cartpole.cu")
    with pytest.raises(EnvCompileError) as info:
        cuda_c.compile_program(defn, "sm_90")
    # NVRTC reports a missing ';' at the next token: this line or the next
    assert info.value.line in (line, line + 1)
    assert f"at line {info.value.line} of cartpole.cu" in str(info.value)
    assert "error" in str(info.value)


@pytest.mark.parametrize("old, new, words", [
    ("    obs(env, agent, 0) = x[env];", "    obs(env, agent) = x[env];", "a view takes the replica index and one"),
    ("    obs(env, agent, 1) = x_dot[env];", "    wb_atomic_add(x, env, 1.0f);", "wb_atomic_add"),  # (x: const)
])
def test_an_error_inside_the_runtime_header_names_the_env_line_that_made_it(nvrtc, old, new, words):
    """A wrong view index count or an atomic on a read-only array fails in wb_runtime.cuh's templates:
    the message points at the env's line that instantiated them."""
    cu = (Path(__file__).resolve().parent.parent / "envs" / "cartpole.cu").read_text()
    assert old in cu
    broken = cu.replace(old, new)
    line = broken.splitlines().index(new) + 1
    defn = envdef_c.attach_c(registry.definition("cartpole"), broken, "/somewhere/cartpole.cu")
    with pytest.raises(EnvCompileError) as info:
        cuda_c.compile_program(defn, "sm_90")
    assert info.value.line == line
    assert f"at line {line} of cartpole.cu:\n    {new.strip()}" in str(info.value)
    assert "wb_runtime.cuh" in str(info.value) and words in str(info.value)


def test_an_array_taken_as_another_type_names_the_array_and_the_type_before_nvrtc():
    score_line = next(p.line for p in envdef_c.c_phases(envdef_c.parse_c("probe_pure", PROBE_PURE))["step"]
                      if p.name == "score")
    broken = PROBE_PURE.replace("unsigned char* terminated, long long* ticks", "int* terminated, long long* ticks")
    with pytest.raises(EnvDefinitionError) as info:
        envdef_c.parse_c("probe_pure", broken, filename="<warpenv probe_pure>")
    assert info.value.line == score_line
    assert ("score() (line %d of <warpenv probe_pure>) takes 'terminated' as int*, but 'terminated' holds uint8 "
            "(unsigned char): write `unsigned char* terminated`" % score_line) in str(info.value)
    swapped = PROBE_PURE.replace("tag_view tag", "energy_view tag")
    assert swapped != PROBE_PURE
    with pytest.raises(EnvDefinitionError, match="takes 'tag' as energy_view, another array's view: write `tag_view"):
        envdef_c.parse_c("probe_pure", swapped)


# ---- host build of the C runtime and drivers (g++) -------------------------------------------

_HOST_CUDA = r'''
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

// Just enough CUDA to run the generated kernels on the host: one std::thread per CUDA thread,
// blocks one after another, __syncthreads() a barrier over the block's threads.
struct wb_dim3 { unsigned x, y, z; };
static thread_local wb_dim3 threadIdx, blockIdx;
static std::barrier<>* wb_block_barrier;
static void __syncthreads() { wb_block_barrier->arrive_and_wait(); }

template <typename Kernel>
static void wb_launch(Kernel kernel, int grid, int block)
{
    for (int b = 0; b < grid; ++b) {
        std::barrier<> barrier(block);
        wb_block_barrier = &barrier;
        std::vector<std::thread> threads;
        for (int t = 0; t < block; ++t)
            threads.emplace_back([&, b, t] {
                threadIdx = {unsigned(t), 0, 0};
                blockIdx = {unsigned(b), 0, 0};
                kernel();
            });
        for (auto& thread : threads)
            thread.join();
    }
}
'''


def _build(tmp_path, name, text):
    src = tmp_path / f"{name}.cpp"
    src.write_text(text)
    exe = tmp_path / name
    result = subprocess.run([GXX, "-std=c++20", "-O1", "-pthread", "-w", f"-I{RUNTIME_DIR}", str(src), "-o", str(exe)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[:4000]
    return exe


def _kernel_arrays(defn, n_envs, recorded=(), keep_final_obs=True):
    """(name, dtype, element count) of every pointer the kernels take, in order: the store's arrays, then
    the slot array and the terminal copies (one row per replica of `recorded`, at least one); and
    the C lines that mark `recorded` (replica recorded[k] copies into row k) and set the flag of
    `keep_final_obs` (recorder.TerminalCopies)."""
    def size(s, lead):
        return lead * (defn.num_agents if s.layout == "agent" else 1) * int(np.prod(s.shape, dtype=np.int64))

    arrays = [(s.name, s.dtype, size(s, n_envs)) for s in defn.arrays.values()]
    arrays.append(("wb_slot", np.dtype(np.int32), n_envs + 2))  # then: recording, final obs at every end
    arrays += [(arg, s.dtype, size(s, max(1, len(recorded)))) for arg, s in codegen_c.c_terminal_arrays(defn)]
    marks = [f"    wb_slot[{r}] = {k + 1};" for k, r in enumerate(recorded)]
    marks += [f"    wb_slot[{n_envs}] = 1;"] if recorded else []
    marks += [f"    wb_slot[{n_envs + 1}] = 1;"] if keep_final_obs else []
    return arrays, marks


def _host_run(tmp_path, defn, layout, n_envs, seed, actions, recorded=(), span=None, draw=0, keep_final_obs=True):
    """Reset then one step per entry of `actions` in the host build (`span` replicas per seed, default
    n_envs); every kernel array (the store's, the slot array and the terminal copies, `recorded`
    marked) after each launch."""
    arrays, marks = _kernel_arrays(defn, n_envs, recorded, keep_final_obs)
    grid = (n_envs + layout.envs_per_block - 1) // layout.envs_per_block
    args = ", ".join(["n_envs", "seed", "span", "0"] + [f"{name}.data()" for name, _, _ in arrays])
    step_args = args.replace("span, 0,", f"span, {int(draw)},", 1)
    main = [codegen_c.c_program(defn, layout), "int main(int argc, char** argv)", "{",
            f"    const int n_envs = {n_envs};", "    const wb_u64 seed = strtoull(argv[1], 0, 10);",
            f"    const int span = {span or n_envs};",
            "    const int steps = atoi(argv[2]);", "    FILE* acts = fopen(argv[3], \"rb\");",
            "    FILE* out = fopen(argv[4], \"wb\");"]
    main += [f"    std::vector<{codegen_c.c_type(dtype)}> {name}({n});" for name, dtype, n in arrays] + marks
    dump = [f"        fwrite({name}.data(), sizeof({name}[0]), {name}.size(), out);" for name, _, _ in arrays]
    main += [f"    wb_launch([&] {{ wb_reset({args}); }}, {grid}, {layout.block});", "    {", *dump, "    }",
             "    for (int k = 0; k < steps; ++k) {",
             "        if (fread(action.data(), sizeof(action[0]), action.size(), acts) != action.size()) return 1;",
             f"        wb_launch([&] {{ wb_step({step_args}); }}, {grid}, {layout.block});", *dump, "    }",
             "    fclose(out);", "    return 0;", "}"]
    (tmp_path / "program.cu").write_text(main[0])
    exe = _build(tmp_path, defn.name, _HOST_CUDA + "\n#include \"program.cu\"\n" + "\n".join(main[1:]))
    action_dtype = {name: dtype for name, dtype, _ in arrays}["action"]  # the store's (int8 for CartPole)
    (tmp_path / "actions.bin").write_bytes(b"".join(np.ascontiguousarray(a, dtype=action_dtype).tobytes()
                                                    for a in actions))
    subprocess.run([str(exe), str(seed), str(len(actions)), str(tmp_path / "actions.bin"), str(tmp_path / "out.bin")],
                   check=True, timeout=300)
    raw = (tmp_path / "out.bin").read_bytes()
    frames, offset = [], 0
    for _ in range(len(actions) + 1):
        frame = {}
        for name, dtype, n in arrays:
            frame[name] = np.frombuffer(raw, dtype=dtype, count=n, offset=offset)
            offset += n * dtype.itemsize
        if defn.obs_state:  # the store's obs is a view of these arrays (no kernel writes it), as here
            frame["obs"] = np.stack([frame[column] for column in defn.obs_state], -1).reshape(-1)
        frames.append(frame)
    assert offset == len(raw)
    return frames


def _compare_with_cpu(tmp_path, defn, layout, n_envs=5, steps=40, seed=3, recorded=(), replicas_per_seed=None,
                      draw=False, keep_final_obs=True):
    """The host build of `defn`'s C program against the cpu target on the same actions (with `recorded`
    replicas recorded on both: their terminal copies too; `replicas_per_seed` and `keep_final_obs` on
    both); draw: the steps draw their own actions on both (random_steps), the given ones overwritten."""
    env = Env(defn, num_envs=n_envs, target="cpu", seed=seed, replicas_per_seed=replicas_per_seed)
    env.keep_final_obs = keep_final_obs
    if recorded:
        env.record(replicas=recorded)
    copies = {arg: env.terminal.buffers[spec.name] for arg, spec in codegen_c.c_terminal_arrays(defn)}

    def snapshot():
        return {k: v.numpy().copy() for k, v in list(env.store.items()) + (list(copies.items()) if recorded else [])}

    rng = np.random.default_rng(seed)
    shape = tuple(env.store["action"].shape)
    actions, frames = [], [snapshot()]
    for _ in range(steps):
        if isinstance(defn.action, wb.Discrete):
            act = rng.integers(0, defn.action.n, size=shape, dtype=np.int32)
        else:
            act = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        actions.append(act)
        if draw:
            env._advance(draw=True)
        else:
            env.step(torch.from_numpy(act))
        frames.append(snapshot())
    host = _host_run(tmp_path, defn, layout, n_envs, seed, actions, recorded, replicas_per_seed, draw, keep_final_obs)
    for k, (want, got) in enumerate(zip(frames, host)):
        for name, expected in want.items():
            actual = got[name].reshape(expected.shape)
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6,
                                           err_msg=f"'{name}' after {'reset' if k == 0 else f'step {k}'}")
            else:
                np.testing.assert_array_equal(actual, expected,
                                              err_msg=f"'{name}' after {'reset' if k == 0 else f'step {k}'}")
    return frames


@needs_gxx
def test_c_rng_equals_python_rng(tmp_path):
    from workbench.compiler import rng  # imported here: alone in a worker, nothing has imported it yet
    from workbench.compiler.targets._numba import _RNG_SOURCE
    ns = {}
    exec(compile(_RNG_SOURCE, "<rng>", "exec"), ns)
    for fn in ("mix64", "make_key", "uniform", "uniform_range", "randint", "normal"):
        ns[fn] = numba.njit(ns[fn])
    draw = np.random.default_rng(0)
    cases = [(int(draw.choice([0, 1, 12345, 2**63 - 1])), int(draw.integers(0, 2**31 - 1)), int(draw.integers(0, 1000)),
              int(draw.choice([0, 1, 2**31 - 1])), int(draw.choice([0, 7, 0xFFFFFFFF])), int(draw.integers(0, 300)),
              int(draw.integers(1, 2**31 - 1)), float(np.float32(draw.uniform(-5, 0))), float(np.float32(draw.uniform(0, 5))))
             for _ in range(300)]
    program = r'''
#include <cstdio>
#include "wb_runtime.cuh"
int main()
{
    unsigned long long seed, env, agent, episode, step, i;
    long long n;
    float low, high;
    while (scanf("%llu %llu %llu %llu %llu %llu %lld %a %a", &seed, &env, &agent, &episode, &step, &i, &n, &low,
                 &high) == 9) {
        const wb_key key = wb_make_key(seed, env, agent, episode, step);
        printf("%llu %a %a %d %a\n", key, wb_uniform(key, i), wb_uniform_range(key, i, low, high),
               wb_randint(key, i, n), wb_normal(key, i));
    }
    return 0;
}
'''
    exe = _build(tmp_path, "rng", program)
    stdin = "\n".join(" ".join([*map(str, c[:7]), float.hex(c[7]), float.hex(c[8])]) for c in cases)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout.split("\n")
    for case, line in zip(cases, out):
        seed, env, agent, episode, step, i, n, low, high = case
        key, u, ur, ri, nrm = line.split()
        want_key = np.uint64(ns["make_key"](seed, env, agent, episode, step))  # a uint64, as in the kernels
        assert int(key) == int(want_key)
        assert float.fromhex(u) == rng.reference_uniform(seed, env, agent, episode, step, i) \
            == float(ns["uniform"](want_key, i))
        assert float.fromhex(ur) == float(ns["uniform_range"](want_key, i, low, high))
        assert int(ri) == int(ns["randint"](want_key, i, n))
        assert math.isclose(float.fromhex(nrm), float(ns["normal"](want_key, i)), rel_tol=1e-6, abs_tol=1e-6)
    assert len([ln for ln in out if ln]) == len(cases)


@needs_gxx
def test_c_math_helpers_equal_the_python_helpers(tmp_path):
    """clip, sign and round_half_even of wb_runtime.cuh against workbench.helpers (numpy's meaning):
    before, the C clip gave low for reversed bounds and dropped a NaN bound, sign(NaN) gave 0, and
    clip(x_float, 0.0, 1.0) did not compile."""
    from workbench.compiler.helpers import clip, round_half_even, sign
    program = r'''
#include <cstdio>
#include "wb_runtime.cuh"
int main()
{
    double x, low, high;
    while (scanf("%la %la %la", &x, &low, &high) == 3) {
        const float xf = (float)x;
        printf("%a %a %a %a %a\n", clip(x, low, high), clip(xf, 0.0, 1.0), sign(x), sign(xf), round_half_even(x));
    }
    return 0;
}
'''
    nan, inf = float("nan"), float("inf")
    values = [-2.5, -0.5, -0.0, 0.0, 0.25, 0.5, 1.5, 2.5, nan, inf, -inf]
    cases = [(x, low, high) for x in values for low, high in [(-1.0, 1.2), (1.0, -1.0), (nan, 1.0), (0.0, nan)]]
    exe = _build(tmp_path, "helpers", program)
    stdin = "\n".join(" ".join(float.hex(v) for v in case) for case in cases)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout.split("\n")
    for (x, low, high), line in zip(cases, out):
        got = [float.fromhex(v) if "x" in v else float(v) for v in line.split()]  # printf's %a: inf, -nan
        xf = float(np.float32(x))
        want = [clip(x, low, high), clip(xf, 0.0, 1.0), sign(x), sign(xf), round_half_even(x)]
        assert np.array_equal(got, want, equal_nan=True), (x, low, high, got, want)
        assert np.array_equal(np.signbit(got[-1]), np.signbit(want[-1])), (x, got[-1], want[-1])
    assert len([ln for ln in out if ln]) == len(cases)


@needs_gxx
def test_host_build_of_cartpole_matches_cpu(tmp_path):
    defn = registry.definition("cartpole")  # (the probe below reaches its time limit)
    frames = _compare_with_cpu(tmp_path, defn, gpu_layout(defn.num_agents), steps=60)
    assert frames[-1]["episode"].min() > 1


@needs_gxx
@pytest.mark.parametrize("name,params", [("cartpole", {}), ("tag_continuous", dict(num_taggers=2, num_runners=3))])
def test_host_build_draws_the_actions_the_cpu_target_draws(tmp_path, name, params):
    """random_steps' draw in the step kernel (Discrete; MultiDiscrete for continuous Tag) is the cpu target's."""
    defn = registry.definition(name, **params)
    frames = _compare_with_cpu(tmp_path, defn, gpu_layout(defn.num_agents), steps=30, draw=True)
    assert len({f["action"].tobytes() for f in frames[1:]}) > 1


@needs_gxx
@pytest.mark.parametrize("layout", [None, Layout(2, 3)], ids=["gpu_layout", "strided_lanes"])
def test_host_build_of_multi_agent_probe_matches_cpu(tmp_path, layout):
    defn = probe_definition()
    frames = _compare_with_cpu(tmp_path, defn, layout or gpu_layout(defn.num_agents), n_envs=5, steps=30)
    assert any(f["tag"].any() for f in frames) and any(f["terminated"].any() for f in frames)
    assert any(f["truncated"].any() for f in frames)


@needs_gxx
def test_host_build_of_pure_c_probe_matches_python_probe(tmp_path):
    pure = envdef_c.parse_c("probe_pure", PROBE_PURE)
    python = probe_definition()
    frames = _host_run(tmp_path, pure, gpu_layout(3), 4, 7, [np.full((4, 3, 2), 0.5, np.float32)] * 12)
    env = Env(python, num_envs=4, target="cpu", seed=7)
    for _ in range(12):
        env.step(torch.full((4, 3, 2), 0.5))
    for name, tensor in env.store.items():
        np.testing.assert_allclose(frames[-1][name].reshape(tensor.shape), tensor.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


# ---- on a GPU --------------------------------------------------------------------------------

@gpu_only
def test_cartpole_agrees_on_every_target():
    report = wb.check_env("cartpole", targets=("cpu", "cuda", "cuda-c"), num_envs=512, steps=200)
    assert report.episodes_finished > 0


@gpu_only
def test_probe_agrees_with_cpu_on_the_gpu():
    wb.register("probe_gpu", PROBE_PY, c_source=PROBE_C, c_filename="probe.cu")
    report = wb.check_env("probe_gpu", targets=("cpu", "cuda", "cuda-c"), num_envs=300, steps=40)
    assert report.episodes_finished > 0


@gpu_only
def test_pure_c_env_runs_on_the_gpu_and_matches_python():
    wb.register("probe_pure_gpu", PROBE_PURE, language="cuda")
    c_env = wb.make("probe_pure_gpu", num_envs=64, target="cuda-c", seed=5)
    py_env = Env(probe_definition(), num_envs=64, target="cpu", seed=5)
    for _ in range(20):
        actions = torch.rand(64, 3, 2) * 2 - 1
        c_env.step(actions.cuda())
        py_env.step(actions)
    for name in py_env.store:
        torch.testing.assert_close(c_env.store[name].cpu(), py_env.store[name], rtol=1e-4, atol=1e-4)


@gpu_only
def test_launches_follow_torchs_current_stream():
    env = wb.make("cartpole", num_envs=1000, target="cuda-c")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(10):
            obs, reward, done, info = env.step(env.sample_actions())
        total = reward.sum()
    stream.synchronize()
    assert float(total) == 1000.0 and env.store["t"].max().item() <= 10


@gpu_only
def test_a_captured_cuda_graph_replays_the_step():
    env = wb.make("cartpole", num_envs=256, target="cuda-c", seed=1)
    ref = wb.make("cartpole", num_envs=256, target="cuda-c", seed=1)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        env.step()
    for k in range(30):
        actions = torch.randint(0, 2, (256, 1), dtype=torch.int32, device="cuda")
        env.store["action"].copy_(actions)
        graph.replay()
        ref.step(actions)
        for name in ref.store:
            assert torch.equal(env.store[name], ref.store[name]), (name, k)


# A one-agent env whose observation shows the clock: the final observation sees t one past the step
# (the episode's length), the next one t = 0 (the drivers store t early only for such an env).
CLOCK_PY = '''
from workbench.compiler.envdef import Box, Discrete, per_env
from workbench.compiler.rng import uniform

NUM_AGENTS = 1
MAX_STEPS = 6
OBSERVATION = Box(shape=(2,))
ACTION = Discrete(3)
STATE = dict(level=per_env())


def reset(env, key, level):
    level[env] = uniform(key, 0)


def step(env, agent, action, level, reward, terminated):
    level[env] += action[env, agent]
    reward[env, agent] = level[env]
    if level[env] > 7.0:
        terminated[env] = 1


def observe(env, agent, t, level, obs):
    obs[env, agent, 0] = t[env]
    obs[env, agent, 1] = level[env]
'''

CLOCK_C = '''
__device__ void reset(int env, wb_key key, float* level) { level[env] = wb_uniform(key, 0); }

__device__ void step(int env, int agent, action_view action, float* level, reward_view reward,
                     unsigned char* terminated)
{
    level[env] += action(env, agent);
    reward(env, agent) = level[env];
    if (level[env] > 7.0f)
        terminated[env] = 1;
}

__device__ void observe(int env, int agent, const int* t, const float* level, obs_view obs)
{
    obs(env, agent, 0) = t[env];
    obs(env, agent, 1) = level[env];
}
'''


def clock_definition():
    return envdef_c.attach_c(envdef.parse("clock", CLOCK_PY, "clock.py", {}), CLOCK_C, "clock.cu")


def check_clock_frames(frames):
    """Where a replica's episode ended, its final observation shows the episode's length and its next one 0."""
    ended = 0
    for f in frames[1:]:
        done = f["done"].astype(bool)
        np.testing.assert_array_equal(f["final_obs"][done, 0, 0], f["last_length"][done])
        np.testing.assert_array_equal(f["obs"][done, 0, 0], 0)
        np.testing.assert_array_equal(f["obs"][:, 0, 0], f["t"])
        ended += int(done.sum())
    return ended


@needs_gxx
def test_host_build_shows_the_clock_to_the_final_observation(tmp_path):
    defn = clock_definition()
    frames = _compare_with_cpu(tmp_path, defn, gpu_layout(1), n_envs=6, steps=20)
    assert check_clock_frames(frames) > 6
    assert any((f["done"] & ~f["truncated"]).any() for f in frames[1:])  # terminations and time limits
    assert any(f["truncated"].any() for f in frames[1:])
