"""The step's bookkeeping in one launch per policy group (learn/fused_record.py) against the torch
path it replaces: Collector.step_outcome's copies, EpisodeStats.after_step's sums and the rollout's
in-game masks, on a Tag game (two groups, an ACTIVE array, the runners-tagged metric) and on
CartPole (one group, final observations kept), with stacked members. On a GPU the kernel compiles;
elsewhere it runs in Triton's interpreter."""
import pytest
import torch

pytest.importorskip("triton", reason="the fused kernels need Triton (pip install triton)")

import workbench as wb  # noqa: E402
from workbench.learn.episode_stats import EpisodeStats  # noqa: E402
from workbench.learn.fused_record import FusedStepRecord  # noqa: E402
from workbench.learn.groups import build_groups  # noqa: E402

GPU = torch.cuda.is_available()


def policy_map(env):
    """Tag's two policies (the env's AGENT_GROUPS, as Env attributes), else one over every agent."""
    if env.definition.namespace.get("AGENT_GROUPS") is None:
        return {"shared": env.agents}
    return {"taggers": env.taggers, "runners": env.runners}


def scrambled(env, seed):
    """The env's store after a made-up step: episodes ending in some replicas, runners out of the
    game (their final observations all zeros), arbitrary rewards and returns."""
    g = torch.Generator().manual_seed(seed)
    s = env.store
    E, A = s["reward"].shape[:2]
    s["done"].copy_((torch.rand(E, generator=g) < 0.5).to(s["done"].dtype))
    s["terminated"].copy_((torch.rand(E, generator=g) < 0.3).to(s["terminated"].dtype))
    s["truncated"].copy_((torch.rand(E, generator=g) < 0.3).to(s["truncated"].dtype))
    s["reward"].copy_(torch.randn(E, A, generator=g))
    s["last_return"].copy_(torch.randn(E, A, generator=g))
    s["last_length"].copy_(torch.randint(1, 50, (E,), generator=g))
    final = torch.randn(s["final_obs"].shape, generator=g)
    final[torch.rand(E, A, generator=g) < 0.4] = 0
    s["final_obs"].copy_(final)
    return s


@pytest.mark.parametrize("env_name,members,keep_final,shared", [
    ("tag_continuous", 1, False, False), ("tag_continuous", 2, True, False), ("cartpole", 2, True, False),
    ("tag_continuous", 1, False, True), ("tag_continuous", 2, True, True)])  # (shared: each team's return apart)
def test_step_record_matches_the_torch_path(env_name, members, keep_final, shared):
    params = dict(num_taggers=2, num_runners=5, num_other_agents_observed=2) if env_name != "cartpole" else {}
    env = wb.make(env_name, num_envs=6, target="cuda" if GPU else "cpu", seed=1, **params)
    device, E, A = env.device, env.num_envs, env.num_agents
    groups = build_groups({"shared": env.agents} if shared else policy_map(env), A, device)
    active = env.definition.namespace.get("ACTIVE")
    want_stats, got_stats = (EpisodeStats(env, groups, members=members) for _ in range(2))
    assert list(got_stats.agent_groups) == (["taggers", "runners"] if shared else [])
    assert FusedStepRecord.applies(type("T", (), {"env": env}), groups, got_stats, active)
    record = FusedStepRecord(env.store, got_stats, groups, active, members)
    assert record.masks == (active is not None) and (record.metric is not None) == (env_name != "cartpole")
    O = env.store["final_obs"][0].numel() // A
    for step in range(3):  # (sums accumulate over steps)
        s = scrambled(env, step)
        want = dict(terminated=torch.zeros(E, device=device), truncated=torch.zeros(E, device=device),
                    final_obs=torch.zeros(E, A, O, device=device) if keep_final else None,
                    rewards=[torch.zeros(E, g.n, device=device) for g in groups],
                    masks=[torch.zeros(E, g.n, device=device) for g in groups])
        got = {k: (v.clone() if torch.is_tensor(v) else [x.clone() for x in v] if v is not None else None)
               for k, v in want.items()}
        want_stats.after_step()
        want["terminated"].copy_(s["terminated"])
        want["truncated"].copy_(s["truncated"])
        if keep_final:
            want["final_obs"].copy_(s["final_obs"].reshape(E, A, O))
        for g, reward, mask in zip(groups, want["rewards"], want["masks"]):
            reward.copy_(g.gather(s["reward"]))
            if active is not None:
                mask.copy_(g.gather(s[active]) != 0)
        record(got["terminated"], got["truncated"], got["final_obs"], got["rewards"], masks=got["masks"])
        torch.testing.assert_close(got["terminated"], want["terminated"])
        torch.testing.assert_close(got["truncated"], want["truncated"])
        for g, r_got, r_want, m_got, m_want in zip(groups, got["rewards"], want["rewards"], got["masks"], want["masks"]):
            torch.testing.assert_close(r_got, r_want, msg=f"rewards of {g.name}")
            if active is not None:
                torch.testing.assert_close(m_got, m_want, msg=f"mask of {g.name}")
        if keep_final:
            ended = s["done"].bool()
            torch.testing.assert_close(got["final_obs"][ended], want["final_obs"][ended])
        torch.testing.assert_close(got_stats.sums, want_stats.sums, rtol=1e-5, atol=1e-5)
    assert (want_stats.sums[..., -1] > 0).all()  # (episodes ended in every member)
    pulled_got, pulled_want = got_stats.pull_members(), want_stats.pull_members()
    for row_got, row_want in zip(pulled_got, pulled_want):
        assert row_got == pytest.approx(row_want, rel=1e-5, abs=1e-5, nan_ok=True)
        if env_name != "cartpole":
            assert {"runners_tagged", "tag_rate", "survival"} <= set(row_got)
        if shared:
            assert {"group_return/taggers", "group_return/runners"} <= set(row_got)


def test_step_record_refuses_what_it_cannot_serve():
    env = wb.make("tag_continuous", num_envs=2, target="cpu", seed=1, num_taggers=2, num_runners=3,
                  num_other_agents_observed=2)
    trainer = type("T", (), {"env": env})
    scattered = build_groups({"odd": [0, 2, 4], "even": [1, 3]}, env.num_agents, env.device)
    assert not FusedStepRecord.applies(trainer, scattered, EpisodeStats(env, scattered), "in_game")
    groups = build_groups(policy_map(env), env.num_agents, env.device)
    stats = EpisodeStats(env, groups)
    stats.env_metrics["custom"] = lambda store, params: store["t"].float()  # (a torch function of the store)
    assert not FusedStepRecord.applies(trainer, groups, stats, "in_game")
