"""The %%warpenv cell magic in a real IPython shell: it registers, compiles, checks and caches a
cell, and its errors raise with a short message naming the cell's own line.

Numba compiles are few on purpose (each costs seconds on a CPU runner): the walker cell is
compiled once, its edited version once, and the rest reuses those kernels or fails before compiling.
"""
import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import workbench as wb
from workbench.notebook import magic
from workbench.runtime import registry
from workbench.errors import EnvCompileError, EnvDefinitionError
from workbench.compiler.targets import all_targets

# Agents on a line: agent a starts at a, moves by action - 1 and earns scale * its position, so
# after k steps of action 2 agent a is at a + k and earns scale * (a + k).
WALK = '''from workbench.compiler.envdef import Box, Discrete, per_agent, per_env

PARAMS = dict(num_agents=3, max_steps=5, scale=0.5)
NUM_AGENTS = "num_agents"
MAX_STEPS = "max_steps"
OBSERVATION = Box(shape=(2,))
ACTION = Discrete(3)
STATE = dict(pos=per_agent(), moved=per_env("int32"))


def reset(env, agent, pos, moved):
    pos[env, agent] = agent
    if agent == 0:
        moved[env] = 0


def step(env, agent, action, pos, moved, reward):
    pos[env, agent] += action[env, agent] - 1
    atomic_add(moved, env, 1)
    reward[env, agent] = scale * pos[env, agent]


def observe(env, agent, pos, obs):
    obs[env, agent, 0] = pos[env, agent]
    obs[env, agent, 1] = agent
'''

# The same env in CUDA C (what a `%%warpenv NAME --lang cuda` cell holds).
WALK_C = '''/*@workbench
PARAMS = dict(num_agents=3, max_steps=5, scale=0.5)
NUM_AGENTS = "num_agents"
MAX_STEPS = "max_steps"
OBSERVATION = Box(shape=(2,))
ACTION = Discrete(3)
STATE = dict(pos=per_agent(), moved=per_env("int32"))
*/
__device__ void reset(int env, int agent, pos_view pos, int* moved)
{
    pos(env, agent) = agent;
    if (agent == 0)
        moved[env] = 0;
}

__device__ void step(int env, int agent, action_view action, pos_view pos, int* moved, reward_view reward)
{
    pos(env, agent) += action(env, agent) - 1;
    wb_atomic_add(moved, env, 1);
    reward(env, agent) = scale * pos(env, agent);
}

__device__ void observe(int env, int agent, pos_view pos, obs_view obs)
{
    obs(env, agent, 0) = pos(env, agent);
    obs(env, agent, 1) = agent;
}
'''


def cell_line(cell: str, text: str) -> int:
    """The line of `text` in a notebook cell holding `%%warpenv ...` and then `cell` (the magic's line is 1)."""
    return next(k for k, line in enumerate(cell.splitlines()) if text in line) + 2


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    return shell


@pytest.fixture(scope="module")
def compiles():
    """Names of the envs the cpu target compiled while this module ran."""
    target = all_targets()["cpu"]
    calls = []
    original = target.compile
    # the plain kernels only: check_env compiles bounds-checked ones besides
    target.compile = lambda defn, *a, **k: (calls.append(defn.name) if not k.get("boundscheck") else None) \
        or original(defn, *a, **k)
    yield calls
    del target.compile


@pytest.fixture(scope="module")
def walk(ip, compiles):
    """The walker cell run once, with 4 agents instead of its default 3."""
    magic.clear_cache()
    ip.run_cell_magic("warpenv", "magic_walk --agents 4", WALK)
    return magic.last_result("magic_walk")


def rendered(exc) -> str:
    lines = exc._render_traceback_()
    assert len(lines) <= 20, lines
    return "\n".join(lines)


def test_load_ext_registers_the_cell_magic(ip):
    assert "warpenv" in ip.magics_manager.magics["cell"]
    assert "--agents" in ip.find_cell_magic("warpenv").__doc__


def test_python_cell_registers_compiles_and_checks(walk, compiles, capsys):
    assert compiles == ["magic_walk"]
    assert not walk.cached and walk.targets[0] == "cpu" and walk.compile_seconds > 0
    assert walk.report is not None and walk.report.num_envs == magic.DEFAULT_REPLICAS
    summary = walk.summary
    assert "\n" not in summary and summary.startswith("warpenv magic_walk: 4 agents")
    assert "obs (2,)" in summary and "Discrete(3)" in summary
    assert ("compiled for cpu" in summary or "loaded from cache for cpu" in summary) and "check passed on cpu" in summary
    if "cuda" in walk.targets:  # a GPU machine: the check compares cpu and cuda
        assert walk.targets == ("cpu", "cuda") and "check passed on cpu vs cuda" in summary
    assert "magic_walk" in wb.env_names()


def test_registered_env_steps_with_closed_form_rewards(walk, compiles):
    env = wb.make("magic_walk", num_envs=3, target="cpu")  # --agents is the default of later makes
    assert env.num_agents == 4 and env.definition.filename == "<warpenv magic_walk>"
    agent = torch.arange(4, dtype=torch.float32)
    assert torch.equal(env.reset()[:, :, 0], agent.expand(3, 4))
    right = torch.full((3, 4), 2, dtype=torch.int32)
    for k in range(1, 5):
        obs, reward, done, info = env.step(right)
        assert torch.equal(reward, (0.5 * (agent + k)).expand(3, 4))
        assert not done.any()
    obs, reward, done, info = env.step(right)  # MAX_STEPS = 5: truncated, reset in the same step
    assert torch.equal(reward, (0.5 * (agent + 5)).expand(3, 4)) and done.all() and info["truncated"].all()
    assert torch.equal(info["episode_return"], (0.5 * (5 * agent + 15)).expand(3, 4))
    assert torch.equal(obs[:, :, 0], agent.expand(3, 4))
    assert env.data["moved"].tolist() == [0, 0, 0]
    assert compiles == ["magic_walk"]  # the magic's kernels, not a second compile
    assert registry.definition("magic_walk", num_agents=2).num_agents == 2  # make()'s parameters still win


def test_rerunning_the_same_cell_is_cached(ip, walk, compiles, capsys):
    wb.register("magic_walk", WALK.replace("scale=0.5", "scale=9.0"))  # replaced meanwhile
    ip.run_cell_magic("warpenv", "magic_walk --agents 4", WALK)
    out = capsys.readouterr().out
    assert "(cached)" in out and "4 agents" in out
    result = magic.last_result("magic_walk")
    assert result.cached and result.definition is walk.definition
    assert compiles == ["magic_walk"]
    # the cell's env is registered again
    assert registry.definition("magic_walk").params == {"num_agents": 4, "max_steps": 5, "scale": 0.5}


def test_options_are_part_of_the_cache_key(ip, walk, compiles, capsys):
    ip.run_cell_magic("warpenv", "magic_walk --agents 4 --replicas 2 --no-check", WALK)
    out = capsys.readouterr().out
    result = magic.last_result("magic_walk")
    assert not result.cached and result.report is None
    assert "(kernels reused)" in out and "check skipped" in out
    assert compiles == ["magic_walk"]  # same source and parameters: the kernels were reused


def test_changing_the_source_recompiles(ip, walk, compiles):
    edited = WALK.replace("scale=0.5", "scale=2.0")
    ip.run_cell_magic("warpenv", "magic_walk --agents 4", edited)
    assert compiles == ["magic_walk", "magic_walk"]
    assert not magic.last_result("magic_walk").cached
    env = wb.make("magic_walk", num_envs=2, target="cpu")
    obs, reward, done, info = env.step(torch.full((2, 4), 2, dtype=torch.int32))
    assert torch.equal(reward, (2.0 * (torch.arange(4.0) + 1)).expand(2, 4))
    ip.run_cell_magic("warpenv", "magic_walk --agents 4", WALK)  # back: cached again
    assert magic.last_result("magic_walk").cached and len(compiles) == 2


def test_syntax_error_names_the_cell_line(ip, capsys):
    bad = WALK.replace("ACTION = Discrete(3)", "ACTION = Discrete(3))")
    result = ip.run_cell("%%warpenv magic_syntax\n" + bad)
    exc = result.error_in_exec
    assert isinstance(exc, EnvDefinitionError)
    line = cell_line(bad, "ACTION = Discrete(3))")
    assert exc.line == line == 8
    text = rendered(exc)
    assert f"syntax error at line {line}" in text and "ACTION = Discrete(3))" in text
    out = capsys.readouterr().out
    assert f"line {line}" in out and "Traceback" not in out and "site-packages" not in out
    with pytest.raises(EnvDefinitionError):  # raised, so a notebook executed in CI fails
        ip.run_cell_magic("warpenv", "magic_syntax", bad)
    assert "magic_syntax" not in wb.env_names()


def test_name_error_at_module_level_names_the_cell_line(ip):
    bad = WALK.replace("ACTION = Discrete(3)", "ACTION = Discrte(3)")
    with pytest.raises(EnvDefinitionError) as info:
        ip.run_cell_magic("warpenv", "magic_name", bad)
    assert info.value.line == cell_line(bad, "Discrte")
    assert f"NameError at line {info.value.line}: name 'Discrte' is not defined" in rendered(info.value)


def test_name_error_in_a_phase_names_the_cell_line_and_keeps_the_old_env(ip, walk):
    bad = WALK.replace("reward[env, agent] = scale *", "reward[env, agent] = scael *")
    with pytest.raises(EnvDefinitionError) as info:  # found when the cell is parsed, before any compile
        ip.run_cell_magic("warpenv", "magic_walk --agents 4", bad)
    line = cell_line(bad, "scael")
    assert info.value.line == line
    text = rendered(info.value)
    assert f"magic_walk: line {line}:" in text and "name 'scael' is not defined" in text
    # the failed cell left the working env registered
    assert "scale * pos" in registry.lookup("magic_walk").source


@pytest.mark.parametrize("options, message", [
    ("--target tpu", r"--target 'tpu' is not a target; choose cpu, cuda or cuda-c"),
    ("--target cuda-c", r"a Python cell compiles for the cpu and cuda targets"),
    ("--lang fortran", r"--lang 'fortran' is not a cell language"),
    ("--replicas 0", r"--replicas must be >= 1"),
    ("--agents 0", r"--agents must be >= 1"),
])
def test_option_errors_are_clear(ip, options, message):
    with pytest.raises(magic.WarpenvOptionError, match=message) as info:
        ip.run_cell_magic("warpenv", f"magic_options {options}", WALK)
    assert rendered(info.value).startswith("WarpenvOptionError: %%warpenv")


def test_usage_errors(ip):
    with pytest.raises(UsageError, match="unrecognized arguments: --frobnicate"):
        ip.run_cell_magic("warpenv", "magic_options --frobnicate", WALK)
    with pytest.raises(UsageError, match="required: name"):
        ip.run_cell_magic("warpenv", "", WALK)
    with pytest.raises(magic.WarpenvOptionError, match="must be a Python identifier"):
        ip.run_cell_magic("warpenv", "my-env", WALK)
    with pytest.raises(magic.WarpenvOptionError, match="the cell is empty"):
        ip.run_cell_magic("warpenv", "magic_empty", "\n  \n")


def test_agents_needs_a_parameter(ip):
    fixed = WALK.replace('NUM_AGENTS = "num_agents"', "NUM_AGENTS = 3")
    with pytest.raises(magic.WarpenvOptionError, match="--agents needs NUM_AGENTS to name a parameter"):
        ip.run_cell_magic("warpenv", "magic_fixed --agents 5", fixed)
    assert "magic_fixed" not in wb.env_names()


# ---- --lang cuda -----------------------------------------------------------------------------


def test_cuda_c_cell_compiles(ip, nvrtc, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))  # (compiled here, not found in the cache)
    ip.run_cell_magic("warpenv", "magic_walk_c --lang cuda --agents 4", WALK_C)
    out = capsys.readouterr().out
    result = magic.last_result("magic_walk_c")
    assert result.language == "cuda" and result.definition.num_agents == 4
    assert "warpenv magic_walk_c: 4 agents" in out
    if "cuda-c" in wb.available_targets():
        assert "check passed on cuda-c" in out
        env = wb.make("magic_walk_c", num_envs=2, target="cuda-c")
        obs, reward, done, info = env.step(torch.full((2, 4), 2, dtype=torch.int32, device="cuda"))
        assert torch.equal(reward.cpu(), (0.5 * (torch.arange(4.0) + 1)).expand(2, 4))
    else:
        assert result.nvrtc_arch == magic.DEFAULT_ARCH
        assert f"compiled with NVRTC for {magic.DEFAULT_ARCH}" in out and "running it needs a GPU" in out
    ip.run_cell_magic("warpenv", "magic_walk_c --lang cuda --agents 4", WALK_C)
    assert magic.last_result("magic_walk_c").cached


def test_cuda_c_cell_without_a_gpu_says_when_its_cubin_came_from_the_compile_cache(ip, nvrtc, capsys, tmp_path,
                                                                                   monkeypatch):
    """(not "compiled with NVRTC in 0.0 s")"""
    if "cuda-c" in wb.available_targets():
        pytest.skip("a GPU runs the cell: the kernel cache's own lines apply")
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    for first in (True, False):
        ip.run_cell_magic("warpenv", "magic_walk_cubin --lang cuda --agents 3", WALK_C)
        out = capsys.readouterr().out
        if first:
            assert f"CUDA C compiled with NVRTC for {magic.DEFAULT_ARCH} in " in out
        else:
            assert f"CUDA C for {magic.DEFAULT_ARCH} loaded from the compile cache" in out and " in 0.0 s" not in out
        magic.clear_cache()  # (a cell's own cache would answer the second run)


def test_cuda_c_syntax_error_names_the_cell_line(ip, nvrtc, capsys):
    bad = WALK_C.replace("wb_atomic_add(moved, env, 1);", "wb_atomic_add(moved, env, 1)")
    line = cell_line(bad, "wb_atomic_add(moved, env, 1)")
    result = ip.run_cell("%%warpenv magic_bad_c --lang cuda\n" + bad)
    exc = result.error_in_exec
    assert isinstance(exc, EnvCompileError)
    assert exc.line in (line, line + 1)  # NVRTC reports a missing ';' at the next token
    text = rendered(exc)
    assert f"at line {exc.line} of <warpenv magic_bad_c>" in text and "error" in text
    out = capsys.readouterr().out
    assert "Traceback" not in out and "magic_bad_c" not in wb.env_names()


def test_cuda_c_declaration_error_names_the_cell_line(ip):
    bad = WALK_C.replace('MAX_STEPS = "max_steps"', "MAX_STEPS = max_steps +")
    with pytest.raises(EnvDefinitionError) as info:
        ip.run_cell_magic("warpenv", "magic_bad_block --lang cuda", bad)
    assert info.value.line == cell_line(bad, "MAX_STEPS = max_steps +") == 5


def test_a_python_cell_takes_its_c_twin_from_a_file(ip, capsys, tmp_path):
    twin = tmp_path / "walk.cu"
    twin.write_text(WALK_C.split("*/\n", 1)[1])  # (the C phases alone: the cell declares the rest)
    ip.run_cell_magic("warpenv", f"magic_twin --agents 4 --c-source {twin}", WALK)
    out = capsys.readouterr().out
    result = magic.last_result("magic_twin")
    assert result.definition.c_source == twin.read_text() and result.entry.c_filename == str(twin.resolve())
    if "cuda-c" in wb.available_targets():
        assert result.targets[-1] == "cuda-c" and " vs cuda-c (" in out  # (checked against the Python)
    else:
        assert result.targets == ("cpu",) and "running the C twin (cuda-c) needs a GPU" in out
    broken = tmp_path / "broken.cu"
    broken.write_text(twin.read_text().replace("void observe(", "void watch("))
    with pytest.raises(EnvDefinitionError, match=r"defines no `__device__ void observe\(...\)` \(an observe phase\)"):
        ip.run_cell_magic("warpenv", f"magic_twin_bad --c-source {broken}", WALK)
    assert "magic_twin_bad" not in wb.env_names()
    with pytest.raises(magic.WarpenvOptionError, match="--c-source .*none.cu: cannot read it"):
        ip.run_cell_magic("warpenv", f"magic_twin_none --c-source {tmp_path / 'none.cu'}", WALK)
    with pytest.raises(magic.WarpenvOptionError, match="a --lang cuda cell holds its C phases itself"):
        ip.run_cell_magic("warpenv", f"magic_twin_c --lang cuda --c-source {twin}", WALK_C)


def test_cuda_c_cell_refuses_python_targets(ip):
    with pytest.raises(magic.WarpenvOptionError, match="runs only on target cuda-c"):
        ip.run_cell_magic("warpenv", "magic_walk_c --lang cuda --target cpu", WALK_C)


def test_first_compile_is_announced_and_a_cached_one_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    cell = WALK.replace("scale=0.5", "scale=0.25")
    heard = []
    first = magic.warpenv("magic_progress", cell, target="cpu", check=False, progress=heard.append)
    assert heard == ["compiling (first time)..."] and "compiled for cpu" in first.summary
    from workbench.runtime import env as env_module
    for key in [k for k in env_module._KERNEL_CACHE if k[0] == first.definition.digest]:
        del env_module._KERNEL_CACHE[key]  # as a restarted kernel: only the on-disk cache is left
    magic.clear_cache()
    heard.clear()
    second = magic.warpenv("magic_progress", cell, target="cpu", check=False, progress=heard.append)
    assert heard == [] and second.loaded_from_cache == ["cpu"] and "loaded from cache for cpu" in second.summary


def test_verbose_says_where_kernels_came_from_and_what_the_check_saw(ip, walk, capsys):
    capsys.readouterr()
    ip.run_cell_magic("warpenv", "magic_walk --agents 4 --replicas 3 --verbose", WALK)
    out = capsys.readouterr().out.splitlines()
    targets = magic.last_result("magic_walk").targets
    assert out[0].startswith("warpenv magic_walk: 4 agents") and len(out) == 2 + len(targets)
    for target, said in zip(targets, out[1:]):
        assert said.startswith(f"  {target}: kernels compiled earlier in this session, make "), said
    if len(targets) > 1:
        assert out[-1].startswith("  check: largest difference between targets per array: ") and "pos " in out[-1]
    else:
        assert out[-1] == "  check: the runner's contract on cpu (one target here: no other to compare with)"
    ip.run_cell_magic("warpenv", "magic_walk --agents 4 --replicas 3 --verbose", WALK)
    assert "this cell ran unchanged before" in capsys.readouterr().out


def test_compiler_errors_are_condensed_and_verbose_prints_the_full_text(ip, capsys):
    bad = WALK.replace("reward[env, agent] = scale * pos[env, agent]",
                       "reward[env, agent] = scale * pos[env, agent] + (1.0, 2.0)")
    line = cell_line(bad, "(1.0, 2.0)")
    capsys.readouterr()
    with pytest.raises(EnvCompileError) as info:
        ip.run_cell_magic("warpenv", "magic_typing --target cpu --no-check", bad)
    assert info.value.line == line and f"at line {line}" in rendered(info.value)
    assert len(rendered(info.value).splitlines()) <= 5
    err = capsys.readouterr().err
    assert "%%warpenv magic_typing --target cpu --no-check --verbose" in err
    assert info.value.details not in err
    with pytest.raises(EnvCompileError) as info:
        ip.run_cell_magic("warpenv", "magic_typing --target cpu --no-check --verbose", bad)
    err = capsys.readouterr().err
    assert "No implementation of function" in err and info.value.details.strip() in err
    assert "magic_typing" not in wb.env_names()


def test_register_takes_the_language_spellings_of_the_magic():
    assert {spelling: magic._language(spelling) for spelling in registry.LANGUAGES} == registry.LANGUAGES
    wb.register("walk_c_alias", WALK_C, language="c")  # parsed as CUDA C, not as Python
    defn = registry.definition("walk_c_alias")
    assert defn.language == "cuda-c" and defn.num_agents == 3 and registry.lookup("walk_c_alias").language == "cuda"
    wb.register("walk_py_alias", WALK, language="PY")
    assert registry.definition("walk_py_alias").language == "python"


def test_a_broken_agent_groups_fails_the_cell_at_its_line_before_compiling(ip, compiles):
    bad = WALK + "\nAGENT_GROUPS = lambda p: {'hunters': range(p.num_hunters)}\n"
    before = list(compiles)
    with pytest.raises(EnvDefinitionError) as info:
        ip.run_cell_magic("warpenv", "magic_groups --target cpu", bad)
    line = cell_line(bad, "AGENT_GROUPS")
    assert info.value.line == line
    text = rendered(info.value)
    assert f"line {line}: AGENT_GROUPS = lambda p" in text and "AGENT_GROUPS raised AttributeError" in text
    assert "num_hunters" in text and "the parameters are ['max_steps', 'num_agents', 'scale']" in text
    assert compiles == before and "magic_groups" not in wb.env_names()


def test_a_render_that_is_no_drawer_fails_the_cell_at_its_line(ip):
    bad = WALK + "\nRENDER = 5\n"
    with pytest.raises(EnvDefinitionError) as info:
        ip.run_cell_magic("warpenv", "magic_render --target cpu", bad)
    assert info.value.line == cell_line(bad, "RENDER = 5")
    assert "RENDER must be a drawer class" in str(info.value) and "got 5" in str(info.value)


def test_the_misspelt_name_example_of_the_docs_is_what_the_cell_gives(ip):
    """docs/notebooks.md shows the error of its chase cell with `action` misspelt `acton`."""
    import pathlib
    import re
    doc = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "notebooks.md").read_text()
    cell = re.search(r"```python\n%%warpenv chase --agents 16\n(.*?)```", doc, re.S).group(1)
    shown = re.search(r"misspelt in `step` gives, before anything compiles:\n\n```\n(.*?)\n```", doc, re.S).group(1)
    bad = cell.replace("+= action[env, agent]", "+= acton[env, agent]")
    assert bad != cell
    before = registry._REGISTRY.get("chase")
    with pytest.raises(EnvDefinitionError) as info:
        ip.run_cell_magic("warpenv", "chase --agents 16", bad)
    assert rendered(info.value) == shown
    assert registry._REGISTRY.get("chase") is before
