"""Phase code that compiled on every target and meant something else on one of them (or something
other than the Python it reads as) is refused at parse, at its line, with the fix; the forms next to
each refused one still compile and run."""
import textwrap

import pytest

import workbench as wb

BASE = textwrap.dedent('''
    import random
    import numpy as np
    from workbench.compiler.envdef import Box, Discrete, per_agent, per_env
    from workbench.rng import randint, uniform
    NUM_AGENTS = 3
    MAX_STEPS = 20
    PARAMS = dict(speed=0.5)
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(total=per_env(), x=per_agent())

    def scaled(a):
        return speed * a

    def reset(env, agent, x):
        x[env, agent] = 0.0

    def step(env, agent, key, action, total, x, reward, t, terminated):
        x[env, agent] = x[env, agent] + scaled(float(action[env, agent])) + uniform(key, 0)
        reward[env, agent] = x[env, agent]
        total[env] = 1.0
        terminated[env] = 0

    def observe(env, agent, x, obs):
        obs[env, agent, 0] = x[env, agent]
''')
STEP_LINE = "        terminated[env] = 0"


def refused(name, old, new) -> str:
    assert old in BASE, old
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.register(name, BASE.replace(old, new))
    return str(info.value)


RACE_FIX = ("on a GPU every agent runs at once and updates are lost (the cpu target and the CUDA simulator run them "
            "one after another, so check_env passes); {fix}guard it with `if agent == 0:`, or compute it in a "
            "per-replica phase (no `agent` argument) that loops over them")


@pytest.mark.parametrize("old, new, line, text", [
    ("terminated[env] = 0", "terminated[env] = 0\n    if action[env, agent] == 1:\n        speed = 1.0\n"
                            "    reward[env, agent] = speed",
     "line 25: speed = 1.0",
     "'speed' is a parameter (PARAMS): assigning it inside step() makes 'speed' a local for the whole function "
     "(Python's rule), so the parameter is not read there (the cpu target reads 0 where the assignment has not run); "
     "use another name (speed_now = ...)"),
    ("total[env] = 1.0", "total[env] += x[env, agent]", "line 22: total[env] += x[env, agent]",
     "every agent of the replica updates total[env] in step(), a per-agent phase: "
     + RACE_FIX.format(fix="use atomic_add(total, env, value), ")),
    ("total[env] = 1.0", "total[env] = total[env] * 0.5", "line 22: total[env] = total[env] * 0.5",
     "every agent of the replica updates total[env] in step(), a per-agent phase: " + RACE_FIX.format(fix="")),
    ("total[env] = 1.0", "total[env] = max(total[env], x[env, agent])",
     "line 22: total[env] = max(total[env], x[env, agent])",
     "every agent of the replica updates total[env] in step(), a per-agent phase: "
     + RACE_FIX.format(fix="use atomic_max(total, env, value), ")),
    ("total[env] = 1.0", "reward[env, 0] += 1.0", "line 22: reward[env, 0] += 1.0",
     "every agent of the replica updates reward[env, 0] in step(), a per-agent phase: "
     + RACE_FIX.format(fix="use atomic_add(reward, (env, 0), value), ")),
    ("uniform(key, 0)", "uniform(key + agent, 0)",
     "line 20: x[env, agent] = x[env, agent] + scaled(float(action[env, agent])) + uniform(key + agent, 0)",
     "arithmetic on the random key 'key' (a 64-bit unsigned integer): numba makes uint64 + int64 a float64, so the "
     "stream differs between targets; draw distinct numbers with distinct indices (uniform(key, i)), or make "
     "another stream with make_key(...)"),
    ("uniform(key, 0)", "randint(key, 0, 2.5)",
     "line 20: x[env, agent] = x[env, agent] + scaled(float(action[env, agent])) + randint(key, 0, 2.5)",
     "randint(): randint's bound n is an integer, given 2.5: the targets round it differently; write an int"),
    ("uniform(key, 0)", "random.random()",
     "line 20: x[env, agent] = x[env, agent] + scaled(float(action[env, agent])) + random.random()",
     "random.random: Python's random module draws from one host stream no seed of the env controls (and a GPU has "
     "none); use workbench.rng's draws, e.g. `from workbench.rng import uniform` and uniform(key, i) with `key` a "
     "phase argument"),
    ("terminated[env] = 0", "t[env] = 0", "line 23: t[env] = 0",
     "'t' is the step counter of the replica's episode, which the framework advances: a phase reads it and may not "
     "store into it; keep your own value in a STATE array"),
    ("terminated[env] = 0", "terminated[env] = 0\n    return x[env, agent]", "line 24: return x[env, agent]",
     "step() is a phase, and the kernels drop what a phase returns: store the value into an array (a STATE array, "
     "reward, obs, done) and return nothing"),
    ("reward[env, agent] = x[env, agent]", "reward[env, agent] = x[env, (agent + 1) % 3]",
     "line 21: reward[env, agent] = x[env, (agent + 1) % 3]",
     "step() reads x[env, (agent + 1) % 3], another agent's entry, and stores its own x[env, agent] (line 20): on a "
     "GPU the agents run at once, so the read sees the other agent's entry before or after this step's store (the "
     "cpu target and the CUDA simulator: in agent order); store it in a later phase (STEP = [..., the phase that "
     "stores it]) or keep this step's value in another array"),
    ("uniform(key, 0)", "round(uniform(key, 0), 2)",
     "line 20: x[env, agent] = x[env, agent] + scaled(float(action[env, agent])) + round(uniform(key, 0), 2)",
     "round(x, ndigits) rounds by the decimal text in Python (round(2.675, 2) is 2.67) and by scaling in the "
     "compiled targets (2.68); scale around one argument: round(x * 100.0) / 100.0"),
    ("    x[env, agent] = 0.0", "    global speed\n    x[env, agent] = 0.0", "line 17: global speed",
     "`global` does not compile in a kernel: read parameters as globals without it, and keep what changes in a "
     "STATE array"),
])
def test_code_that_meant_something_else_on_a_target_is_refused_at_its_line(old, new, line, text):
    assert refused("same_meaning", old, new) == f"same_meaning: {line}\n    {text}"


def test_a_parameter_assigned_in_a_function_the_phases_call_is_refused_too():
    message = refused("param_in_helper", "    return speed * a",
                      "    if a > 0.0:\n        speed = 2.0\n    return speed * a")
    assert message.startswith("param_in_helper: line 15: speed = 2.0\n    'speed' is a parameter (PARAMS): assigning "
                              "it inside scaled()"), message


def test_the_forms_beside_the_refused_ones_compile_and_mean_what_they_say():
    """One agent's update under `if agent == 0:` (or after `if agent != 0: return`), an atomic, the same value stored by every agent, a
    helper's return value, a parameter's value copied into another name, draws by distinct indices."""
    source = BASE.replace("    total[env] = 1.0\n", (
        "    speed_now = speed * 2.0\n"
        "    if agent == 0:\n"
        "        total[env] += speed_now\n"
        "    atomic_add(total, env, 1.0 + uniform(key, 1) * 0.0 + randint(key, 2, 3) * 0.0)\n"
        "    terminated[env] = 1 if total[env] > 100.0 else 0\n"))
    wb.register("same_meaning_ok", source)
    env = wb.make("same_meaning_ok", num_envs=2, target="cpu")
    env.reset()
    env.step()
    assert env.data["total"].tolist() == [4.0, 4.0]  # agent 0's 2 x speed, then 1.0 from each of 3 agents
    wb.register("early_return", BASE.replace("    total[env] = 1.0\n", "    if agent != 1:\n        return\n"
                                                                        "    total[env] = total[env] + 2.0\n"))
    env = wb.make("early_return", num_envs=2, target="cpu")
    env.step()
    assert env.data["total"].tolist() == [2.0, 2.0]


@pytest.mark.parametrize("body", [
    "    if agent == 0 and t[env] >= 0:\n        total[env] += 1.0\n",
    "    if agent > 0:\n        return\n    total[env] += 1.0\n",
    "    if agent != 0:\n        x[env, agent] = x[env, agent] * 1.0\n        return\n    total[env] += 1.0\n",
    "    if agent != 0:\n        pass\n    else:\n        total[env] += 1.0\n",
    "    me = agent\n    x[env, me] += 0.0\n    if me == 0:\n        total[env] += 1.0\n",
    "    for speed in range(1):\n        x[env, agent] += speed * 0.0\n    if agent == 0:\n        total[env] += 1.0\n",
    "    if agent == 0:\n        total[env] += 1.0\n    return None\n",
])
def test_one_agents_update_in_the_forms_people_write_it_compiles(body):
    """An `and` with the agent test, an early return for all but one agent, the else of `agent != 0`, a
    name bound to the agent, a loop variable named like a parameter (assigned before every read), an
    explicit `return None`: each compiles, and agent 0 alone adds 1.0."""
    wb.register("one_agent_forms", BASE.replace("    total[env] = 1.0\n", body))
    env = wb.make("one_agent_forms", num_envs=2, target="cpu")
    before = env.data["total"].clone()
    env.step()
    assert (env.data["total"] - before).tolist() == [1.0, 1.0]


def test_a_helpers_argument_named_key_is_not_taken_for_a_random_key():
    source = BASE.replace("def scaled(a):\n    return speed * a", "def scaled(a):\n    return speed * pick(a)\n\n"
                          "def pick(key):\n    return key + 1.0")
    wb.register("helper_key", source)
    wb.make("helper_key", num_envs=2, target="cpu").step()


def test_pythons_random_imported_by_name_is_refused_too():
    source = BASE.replace("import random\n", "from random import random\n").replace("uniform(key, 0)", "random()")
    with pytest.raises(wb.EnvDefinitionError, match=r"line 20: .*random\(\)\n    random: Python's random "
                                                    r"module draws from one host stream"):
        wb.register("random_by_name", source)


def test_a_per_entity_phase_updating_a_shared_entry_and_key_arithmetic_through_a_name_are_refused():
    from test_entities import PATCHES
    clear = "def clear(env, patch, eaten):\n    eaten[env, patch] = 0\n"
    assert clear in PATCHES
    with pytest.raises(wb.EnvDefinitionError, match=r"every patch of the replica updates total\[env\] in clear\(\), "
                                                    r"a per-patch phase: on a GPU every patch runs at once"):
        wb.register("entity_race", PATCHES.replace(clear, clear.replace("eaten)", "eaten, total)")
                                                   + "    total[env] += 1\n"))
    wb.register("entity_guarded", PATCHES.replace(clear, clear.replace("eaten)", "eaten, total)")
                                                  + "    if patch == 0:\n        total[env] += 1\n"))
    aliased = BASE.replace("    x[env, agent] = x[env, agent] + scaled", "    k = key\n    x[env, agent] = x[env, agent] "
                           "+ scaled").replace("uniform(key, 0)", "uniform(k + agent, 0)")
    with pytest.raises(wb.EnvDefinitionError, match=r"arithmetic on the random key 'k'"):
        wb.register("key_alias", aliased)
