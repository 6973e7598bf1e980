"""Bad input reaches a clear error naming the field and the fix."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import workbench as wb


def test_unknown_env_lists_known_and_suggests_the_closest():
    with pytest.raises(wb.UnknownEnvError, match="unknown env 'cartpol'; did you mean 'cartpole'\\?; known envs: "):
        wb.make("cartpol", num_envs=2, target="cpu")
    with pytest.raises(wb.UnknownEnvError, match="unknown env 'zzz'; known envs: acrobot"):
        wb.make("zzz", num_envs=2, target="cpu")
    from workbench.learn.config import ConfigError
    with pytest.raises(ConfigError, match="no config file 'tag_continous'; did you mean 'tag_continuous'\\?"):
        wb.train("tag_continous")


def test_cuda_without_gpu_names_available_targets():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code = "import workbench as wb\ntry:\n    wb.make('cartpole', num_envs=2, target='cuda')\nexcept wb.TargetUnavailableError as e:\n    print(e)"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "target 'cuda' is not available: no CUDA GPU" in out.stdout
    assert "Available here: ['cpu']" in out.stdout and "set NUMBA_ENABLE_CUDASIM=1" in out.stdout


def test_unknown_target():
    with pytest.raises(wb.TargetUnavailableError, match="unknown target 'tpu'"):
        wb.make("cartpole", num_envs=2, target="tpu")


@pytest.mark.parametrize("bad", [0, -3, 2**31, 1.5, "8"])
def test_num_envs_out_of_range(bad):
    with pytest.raises(wb.WorkbenchError, match="num_envs must be an int in"):
        wb.make("cartpole", num_envs=bad, target="cpu")


def test_unknown_parameter():
    with pytest.raises(wb.EnvDefinitionError, match="unknown parameter.*'gravty'\\]; did you mean 'gravity' for "
                                                    "'gravty'\\?; this env takes"):
        wb.make("cartpole", num_envs=2, target="cpu", gravty=3.0)


@pytest.fixture(scope="module")
def cartpole():
    return wb.make("cartpole", num_envs=4, target="cpu")


def test_actions_wrong_shape(cartpole):
    with pytest.raises(wb.ActionError, match=r"shape \(3,\); this env takes \(4, 1\)"):
        cartpole.step(torch.zeros(3, dtype=torch.int32))


def test_actions_wrong_dtype(cartpole):
    with pytest.raises(wb.ActionError, match="dtype torch.float32; this env takes integer actions"):
        cartpole.step(torch.zeros(4, 1))


def test_actions_not_a_tensor(cartpole):
    with pytest.raises(wb.ActionError, match="must be a torch.Tensor"):
        cartpole.step([0, 1, 0, 1])


def test_actions_out_of_range_in_debug_mode():
    env = wb.make("cartpole", num_envs=4, target="cpu", debug=True)
    with pytest.raises(wb.ActionError, match=r"action 5 of agent 0 in replica 2 is out of range: .* \[0, 1\]"):
        env.step(torch.tensor([0, 1, 5, 0], dtype=torch.int32))


BROKEN = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_env
    NUM_AGENTS = 1
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(x=per_env())

    def reset(env, x):
        x[env] = 0.0

    def step(env, agent, action, x, reward):
        x[env] = x[env] + undefined_name
        reward[env, agent] = 1.0

    def observe(env, agent, x, obs):
        obs[env, agent, 0] = x[env]
''')


def test_undefined_name_names_the_source_line():
    with pytest.raises(wb.EnvDefinitionError) as info:  # found when the source is registered, before compiling
        wb.register("broken_env", BROKEN)
    text = str(info.value)
    assert "broken_env: line 12:" in text
    assert "x[env] = x[env] + undefined_name" in text
    assert "undefined_name" in text


def test_missing_step_function():
    with pytest.raises(wb.EnvDefinitionError, match="defines no step function"):
        wb.register("no_step_env", BROKEN.replace("def step(", "def stop("))


def test_syntax_error_names_line():
    with pytest.raises(wb.EnvDefinitionError, match="syntax error at line 9"):
        wb.register("syntax_env", BROKEN.replace("x[env] = 0.0", "x[env] = = 0.0"))


def test_phase_argument_that_is_no_array():
    with pytest.raises(wb.EnvDefinitionError, match="observe\\(\\) .* takes 'y', which is neither"):
        wb.register("bad_arg_env", BROKEN.replace("def observe(env, agent, x, obs)", "def observe(env, agent, y, obs)"))
    typo = (BROKEN.replace("STATE = dict(x=per_env())", "STATE = dict(position=per_env())")
            .replace("x[env]", "position[env]").replace("def observe(env, agent, x, obs)",
                                                        "def observe(env, agent, positon, obs)")
            .replace("def reset(env, x)", "def reset(env, position)")
            .replace("def step(env, agent, action, x, reward)", "def step(env, agent, action, position, reward)"))
    with pytest.raises(wb.EnvDefinitionError, match="takes 'positon', .*; did you mean 'position'\\?"):
        wb.register("typo_arg_env", typo)


def test_a_state_array_takes_numpy_dtypes_and_names_the_ones_it_takes():
    import numpy as np
    from workbench.compiler.envdef import per_agent, per_env
    assert per_env(np.int32).dtype == "int32" and per_agent(np.dtype("uint8")).dtype == "uint8"
    with pytest.raises(wb.EnvDefinitionError, match="dtype 'float16' is not one a state array takes: write one of"):
        wb.register("half_env", BROKEN.replace("x=per_env()", "x=per_env(np.float16)").replace(
            "from workbench.compiler.envdef", "import numpy as np\nfrom workbench.compiler.envdef"))


NAN_ENV = BROKEN.replace("x[env] + undefined_name", "x[env] + 1.0").replace(
    "obs[env, agent, 0] = x[env]", "obs[env, agent, 0] = math.log(-x[env]) if x[env] > 2.5 else x[env]").replace(
    "from workbench.compiler.envdef", "import math\nfrom workbench.compiler.envdef")


def test_nan_detected_in_debug_mode():
    wb.register("nan_env", NAN_ENV)
    quiet = wb.make("nan_env", num_envs=2, target="cpu")
    for _ in range(3):
        quiet.step(torch.zeros(2, 1, dtype=torch.int32))  # without debug: no check, no error
    env = wb.make("nan_env", num_envs=2, target="cpu", debug=True)
    env.step(torch.zeros(2, 1, dtype=torch.int32))
    env.step(torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(wb.NonFiniteError, match="non-finite value in 'obs' of replica 0"):
        env.step(torch.zeros(2, 1, dtype=torch.int32))


HELPER_ERROR = textwrap.dedent('''
    from workbench.envdef import Box, Discrete, per_agent

    NUM_AGENTS = 1
    MAX_STEPS = 10
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(x=per_agent())

    def bonus(v):
        return v + (1, 2)

    def reset(env, agent, x):
        x[env, agent] = 0.0

    def step(env, agent, x, reward):
        reward[env, agent] = bonus(x[env, agent])

    def observe(env, agent, obs):
        obs[env, agent, 0] = 0.0
''')


def test_compile_error_in_a_helper_names_the_helper_line_with_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.chdir(tmp_path)  # numba shows the kernel module's path relative to the working directory
    with pytest.raises(wb.EnvCompileError) as info:
        wb.register("helper_error_env", HELPER_ERROR)
        wb.make("helper_error_env", num_envs=1, target="cpu")
    assert info.value.line == 11, str(info.value)  # the helper's line, not its caller's (line 17)
    assert "at line 11:\n    return v + (1, 2)" in str(info.value)
    assert (tmp_path / "kernels").is_dir()


def test_numba_ir_error_is_a_one_line_env_compile_error():
    wb.register("del_in_phase_env", HELPER_ERROR.replace("reward[env, agent] = bonus(x[env, agent])", textwrap.dedent('''
        spare = x[env, agent]
            del spare''').strip()))
    with pytest.raises(wb.EnvCompileError) as info:  # numba's UnsupportedError, no typing error
        wb.make("del_in_phase_env", num_envs=1, target="cpu")
    lines = str(info.value).splitlines()
    assert info.value.line == 18 and lines[1].strip() == "del spare", str(info.value)
    assert len(lines) == 3 and "del found" in lines[2]
    assert "Illegal IR" in info.value.details and "nopython" in info.value.details  # numba's whole text


NVRTC_LOG = '''

<warpenv walk_c>(21): error: identifier "scael" is undefined
      reward(env, agent) = scael * pos(env, agent);
                           ^

<workbench driver>(95): warning #550-D: variable "wb_e" was set but never used
      int wb_e = e;
          ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

<workbench driver>(199): warning #177-D: variable "wb_next_t" was declared but never referenced
      const int wb_next_t = wb_done ? 0 : wb_t + 1;  // the clock that the next observation sees
                ^

default_program(7): warning #177-D: variable "wb_params::scale" was declared but never referenced
  constexpr double scale = 0.5;
                   ^

1 error detected in the compilation of "default_program".
'''


def test_cuda_c_error_keeps_only_the_env_errors_and_the_log_in_details():
    from types import SimpleNamespace
    from workbench.compiler.targets.cuda_c import _compile_error
    source = "\n" * 20 + "    reward(env, agent) = scael * pos(env, agent);\n"
    defn = SimpleNamespace(name="walk_c", c_filename="<warpenv walk_c>", c_source=source)
    error = _compile_error(defn, NVRTC_LOG)
    assert error.line == 21
    assert str(error).splitlines() == [
        "env 'walk_c' failed to compile for target 'cuda-c' at line 21 of <warpenv walk_c>:",
        "    reward(env, agent) = scael * pos(env, agent);",
        '  <warpenv walk_c>(21): error: identifier "scael" is undefined']
    assert "warning #550-D" in error.details and "-diag-suppress" in error.details
    driver_only = _compile_error(defn, NVRTC_LOG.replace("<warpenv walk_c>(21): error", "<workbench driver>(40): error"))
    assert driver_only.line is None
    assert str(driver_only).splitlines()[1:] == ['  <workbench driver>(40): error: identifier "scael" is undefined']


def test_a_broken_source_is_refused_when_registered_and_replaces_nothing():
    """Before, wb.register stored any text and the error came at the next make, after the working
    source of that name had been replaced."""
    good = BROKEN.replace("x[env] + undefined_name", "x[env] + 1.0")
    wb.register("kept_env", good)
    with pytest.raises(wb.EnvDefinitionError, match="syntax error at line 9"):
        wb.register("kept_env", good.replace("x[env] = 0.0", "x[env] = = 0.0"))
    env = wb.make("kept_env", num_envs=2, target="cpu")
    env.step()
    assert env.data["x"].tolist() == [1.0, 1.0]
