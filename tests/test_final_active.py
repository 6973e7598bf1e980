"""An agent that leaves the game in the step that ends its replica's episode by the time limit: the
kernels keep its ACTIVE flag from before the auto-reset (final_active), and GAE bootstraps nothing
for it (its own episode ended there), while the agents still in the game bootstrap V(final
observation), on every target (the C driver in its host build on any machine). DDPG's replay keeps whether each transition's agent was in the game, ends the agent's
episode where it leaves, and learns from the agents in the game only. An ACTIVE that names no
per-agent flag is refused at parse."""
import textwrap

import pytest
import torch

import workbench as wb
from workbench.compiler import envdef, envdef_c
from workbench.compiler.codegen import gpu_layout
from workbench.errors import EnvDefinitionError

from conftest import HAS_GPU, gpu_only
from test_cuda_c import GXX, _compare_with_cpu

# agent 1 leaves the game in the episode's last step, agent 2 in its first; agent 0 plays throughout
LEAVER = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_agent
    NUM_AGENTS = 3
    MAX_STEPS = 4
    OBSERVATION = Box(shape=(2,))
    ACTION = Discrete(2)
    STATE = dict(playing=per_agent("int32"))
    ACTIVE = "playing"

    def reset(env, agent, playing):
        playing[env, agent] = 1

    def step(env, agent, t, playing, reward):
        if playing[env, agent] != 0:
            reward[env, agent] = 1.0
            if (agent == 1 and t[env] + 1 == MAX_STEPS) or (agent == 2 and t[env] == 0):
                playing[env, agent] = 0

    def observe(env, agent, t, playing, obs):
        obs[env, agent, 0] = 0.25 * t[env] + 0.5
        obs[env, agent, 1] = playing[env, agent] * 1.0
''')



LEAVER_C = r'''
__device__ void reset(int env, int agent, playing_view playing)
{
    playing(env, agent) = 1;
}

__device__ void step(int env, int agent, const int* t, playing_view playing, reward_view reward)
{
    if (playing(env, agent) != 0) {
        reward(env, agent) = 1.0f;
        if ((agent == 1 && t[env] + 1 == MAX_STEPS) || (agent == 2 && t[env] == 0))
            playing(env, agent) = 0;
    }
}

__device__ void observe(int env, int agent, const int* t, playing_view playing, obs_view obs)
{
    obs(env, agent, 0) = 0.25f * t[env] + 0.5f;
    obs(env, agent, 1) = playing(env, agent) * 1.0f;
}
'''


def leaver_definition():
    return envdef_c.attach_c(envdef.parse("leaver", LEAVER, "leaver.py", {}), LEAVER_C, "leaver.cu")


@pytest.fixture(scope="module", autouse=True)
def leaver():
    wb.register("leaver", LEAVER)
    wb.register("leaver_box", LEAVER.replace("ACTION = Discrete(2)", "ACTION = Box(-1.0, 1.0, (1,))"))


def test_the_step_keeps_each_agents_flag_from_before_the_reset(target):
    env = wb.make("leaver", num_envs=2, target=target)
    env.reset()
    for step in range(4):
        env.step(torch.zeros(2, 3, dtype=torch.int64, device=env.device))
        final = env.store["final_active"].cpu()
        if step < 3:  # no episode ended: nothing written
            assert final.eq(0).all(), (step, final)
    assert env.store["truncated"].cpu().eq(1).all()
    assert final.tolist() == [[1, 0, 0], [1, 0, 0]]
    assert env.store["playing"].cpu().eq(1).all()  # the auto-reset put everyone back


@pytest.mark.skipif(GXX is None, reason="needs g++ for the host build of the C runtime")
def test_the_c_driver_keeps_the_same_flags(tmp_path):
    """The cuda-c target's driver (its host build: threads for lanes, barriers) against the cpu target,
    every array after every step, final_active included."""
    frames = _compare_with_cpu(tmp_path, leaver_definition(), gpu_layout(3), n_envs=3, steps=9)
    assert frames[4]["final_active"].tolist() == [[1, 0, 0]] * 3 and frames[4]["truncated"].all()


@gpu_only
def test_every_target_keeps_the_same_flags_on_the_gpu():
    import dataclasses
    from workbench.runtime import registry
    registry._REGISTRY["leaver_gpu"] = dataclasses.replace(wb.register("leaver_gpu", LEAVER), c_source=LEAVER_C,
                                                           c_filename="leaver.cu")
    envs = [wb.make("leaver_gpu", num_envs=300, target=target) for target in ("cpu", "cuda", "cuda-c")]
    for step in range(9):
        for env in envs:
            env.step(torch.zeros(300, 3, dtype=torch.int64, device=env.device))
        for env in envs[1:]:
            for name in ("final_active", "playing", "truncated", "reward"):
                assert torch.equal(env.store[name].cpu(), envs[0].store[name]), (env.target, step, name)


@pytest.mark.parametrize("per_step", [False, True], ids=["batched", "per-step"])
def test_a_time_limit_bootstraps_nothing_for_an_agent_that_left_in_the_last_step(per_step, monkeypatch):
    from workbench.learn import collection
    if per_step:
        monkeypatch.setattr(collection, "FINAL_OBS_BUFFER_BYTES", 0)
    config = wb.PPOConfig(env="leaver", num_envs=4, rollout_length=8, num_minibatches=1, update_epochs=1,
                          target="cuda" if HAS_GPU else "cpu", log_every=1)
    trainer = wb.make_trainer(config)
    assert (trainer.collector.final_obs is None) == per_step
    trainer.train(num_iterations=1)
    buf = trainer.buffers["shared"]
    final, values, adv = buf.final_values.cpu(), buf.values.cpu(), buf.advantages.cpu()
    for t in (3, 7):  # the time limit's steps
        assert final[t, :, 0].ne(0).all(), "agent 0 is in the game at the end: V(final observation)"
        assert final[t, :, 1].eq(0).all(), "agent 1 left the game in that step: its episode ended, no bootstrap"
        torch.testing.assert_close(adv[t, :, 1], buf.rewards.cpu()[t, :, 1] - values[t, :, 1])
        torch.testing.assert_close(adv[t, :, 0], buf.rewards.cpu()[t, :, 0] + config.gamma * final[t, :, 0]
                                   - values[t, :, 0])
    assert final[[0, 1, 2, 4, 5, 6]].eq(0).all()  # no episode ended there


@pytest.mark.parametrize("declared, message, hint", [
    ('"plying"', "names no STATE array; did you mean 'playing'?", "(this env's: playing)"),
    ('"score"', "must name a per_agent integer array", "got a per_agent float32 array"),
    ('"flag"', "must name a per_agent integer array", "got a per_env int32 array"),
    ("1", "names no STATE array.", "(this env's: playing)"),
])
def test_an_active_that_names_no_per_agent_flag_is_refused(declared, message, hint):
    source = LEAVER.replace('ACTIVE = "playing"', f"ACTIVE = {declared}").replace(
        'STATE = dict(playing=per_agent("int32"))',
        'STATE = dict(playing=per_agent("int32"), score=per_agent(), flag=per_env("int32"))').replace(
        "import Box, Discrete, per_agent", "import Box, Discrete, per_agent, per_env")
    with pytest.raises(EnvDefinitionError) as err:
        wb.register("bad_active", source)
        wb.make("bad_active", target="cpu")
    assert message in str(err.value) and "ACTIVE" in str(err.value)
    assert hint in str(err.value)


def test_ddpg_replay_keeps_who_was_in_the_game_and_ends_an_agents_episode_where_it_leaves():
    config = wb.DDPGConfig(env="leaver_box", num_envs=2, rollout_length=8, learning_starts=64,
                           buffer_size=64, batch_size=8, target="cpu", log_every=1)
    trainer = wb.make_trainer(config)
    trainer.train(num_iterations=1)  # 8 steps of random actions: two episodes of 4
    rb = trainer.buffers["shared"]
    live = rb.live[:rb.size].reshape(8, 2, 3)  # [step, replica, agent]
    term = rb.terminated[:rb.size].reshape(8, 2, 3)
    assert live[:, :, 0].eq(1).all() and live[:, :, 1].eq(1).all()
    assert live[:, :, 2].tolist() == [[1, 1], [0, 0], [0, 0], [0, 0]] * 2  # out from its episode's first step
    assert term[:, :, 2].tolist() == [[1, 1], [0, 0], [0, 0], [0, 0]] * 2  # its episode ended in that step
    # agent 1 leaves in the step the time limit ends: a termination for it, a truncation for agent 0
    assert term[:, :, 1].tolist() == [[0, 0], [0, 0], [0, 0], [1, 1]] * 2
    assert term[:, :, 0].eq(0).all()


def test_ddpg_learns_from_the_agents_in_the_game_only():
    """An update over a batch with out-of-game rows (garbage values) equals one over its live rows."""
    import copy
    from workbench.learn.algorithms import ddpg

    trainer = wb.make_trainer(wb.DDPGConfig(env="leaver_box", num_envs=2, target="cpu"))
    g = torch.Generator().manual_seed(0)
    n, live = 12, torch.tensor([1.0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1])
    batch = [torch.randn(n, 2, generator=g), torch.rand(n, 1, generator=g) * 2 - 1, torch.randn(n, generator=g),
             torch.randn(n, 2, generator=g), (torch.rand(n, generator=g) < 0.3).float()]
    for field in batch:
        field[live == 0] = 1e3  # what the masked rows hold must not matter
    results = []
    for rows, mask in ((slice(None), live), (live > 0, None)):
        agent = copy.deepcopy(trainer.models["shared"])
        opts = [torch.optim.Adam(agent.actor.parameters(), 1e-3), torch.optim.Adam(agent.critic.parameters(), 1e-3)]
        stats = {k: torch.zeros(1) for k in ddpg.STATS}
        ddpg.update(agent, *opts, [f[rows] for f in batch] + [mask], trainer.config, stats=stats)
        results.append((torch.cat([p.detach().reshape(-1) for p in agent.parameters()]), stats))
    (p_masked, s_masked), (p_live, s_live) = results
    torch.testing.assert_close(p_masked, p_live)
    for k in ("critic_loss", "actor_loss", "q_mean"):
        torch.testing.assert_close(s_masked[k], s_live[k])
    assert s_masked["critic_loss"].item() < 1e3
