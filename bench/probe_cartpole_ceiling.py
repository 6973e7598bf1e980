"""How fast a CartPole step can be on this GPU, whatever the env compiler generates: hand-written
CUDA C steps (one thread a replica, state in float arrays [E]) that do gymnax's work and then what the
learner reads, each piece switched on by a flag, timed like env.random_steps() (32 steps a CUDA graph,
median of CUDA events), beside the shipped cuda-c kernel and a device copy.

    python bench/probe_cartpole_ceiling.py                      # 1M and 10M replicas, every variant
    python bench/probe_cartpole_ceiling.py --num-envs 1e7 --variants gymnax_work learner_min

Variants (flags in brackets):
  gymnax_work     gymnax's scan: the action drawn in the step, x, x_dot, theta, theta_dot and the clock
                  read and written (40 B), reset state drawn where an episode ends; nothing else stored
  learner_min     + reward, terminated, truncated, done, the return (read and written), the final
                    observation, last return and length where an episode ends: what the learner reads,
                    with the observation aliasing the state (no observation array written)
  learner_obs     learner_min + the observation written (16 B), as the store keeps it today
  learner_obs_ep  learner_obs + the episode counter read every step, reset keys from it (today's key)
  shipped_like    learner_obs_ep + actions from a separate int8 sampler launch (torch.randint) and the
                    framework's 64-bit key hash: about the generated kernel's work
Each in float (as gymnax) and, with the suffix _f64, with the dynamics in double (as the shipped env).
"""
from __future__ import annotations

import argparse

import numpy as np

import _common as C  # (also puts the checkout on sys.path)

SOURCE = r"""
#ifndef REAL
#define REAL float
#endif
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 hash32(u32 x)  // lowbias32: two multiplies
{
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}
__device__ __forceinline__ u64 mix64(u64 x)
{
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL; x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
__device__ __forceinline__ float uniform_pm005(u64 key, u32 i)
{
#ifdef HASH64
    const u64 h = mix64(key + (i + 1ULL) * 0x9E3779B97F4A7C15ULL);
    const float u = (float)(h >> 40) * (1.0f / 16777216.0f);
#else
    const u32 h = hash32((u32)key + (i + 1U) * 0x9E3779B9U);
    const float u = (float)(h >> 8) * (1.0f / 16777216.0f);
#endif
    return -0.05f + 0.1f * u;
}

extern "C" __global__ void __launch_bounds__(256) step(
    int n, u32 seed, u32 clock,
    float* __restrict__ x, float* __restrict__ x_dot, float* __restrict__ theta, float* __restrict__ theta_dot,
    int* __restrict__ t, const signed char* __restrict__ action, float* __restrict__ obs,
    float* __restrict__ final_obs, float* __restrict__ reward, unsigned char* __restrict__ terminated,
    unsigned char* __restrict__ truncated, unsigned char* __restrict__ done, float* __restrict__ ret,
    float* __restrict__ last_ret, int* __restrict__ last_len, int* __restrict__ episode)
{
    const int e = blockIdx.x * 256 + threadIdx.x;
    if (e >= n)
        return;
    const float x0 = x[e], xd0 = x_dot[e], th0 = theta[e], thd0 = theta_dot[e];
    const int t0 = t[e];
#ifdef ACTION_ARRAY
    const int a = action[e];
#else
    const int a = hash32(seed ^ hash32((u32)e * 0x9E3779B9U ^ clock)) & 1;
#endif
#ifdef LEARNER
    const float ret0 = ret[e];
#endif
#ifdef EPISODE
    const int ep = episode[e];
#endif
    const REAL gravity = 9.8, masscart = 1.0, masspole = 0.1, length = 0.5, force_mag = 10.0, tau = 0.02;
    const REAL total_mass = masspole + masscart, polemass_length = masspole * length;
    const REAL force = a == 1 ? force_mag : -force_mag;
    const REAL c = cosf(th0), s = sinf(th0);  // in float, as the shipped env
    const REAL temp = (force + polemass_length * (REAL)thd0 * (REAL)thd0 * s) / total_mass;
    const REAL thacc = (gravity * s - c * temp) / (length * ((REAL)4.0 / (REAL)3.0 - masspole * c * c / total_mass));
    const REAL xacc = temp - polemass_length * thacc * c / total_mass;
    float nx = (float)(x0 + tau * xd0), nxd = (float)(xd0 + tau * xacc);
    float nth = (float)(th0 + tau * thd0), nthd = (float)(thd0 + tau * thacc);
    const bool failed = nx < -2.4f || nx > 2.4f || nth < -0.20943951f || nth > 0.20943951f;
    const bool out_of_time = t0 + 1 >= 500;
    const bool d = failed || out_of_time;
#ifdef LEARNER
    reward[e] = 1.0f;
    terminated[e] = failed;
    truncated[e] = out_of_time;
    done[e] = d;
    ret[e] = d ? 0.0f : ret0 + 1.0f;
#endif
    if (d) {
#ifdef LEARNER
        final_obs[4 * (long long)e + 0] = nx; final_obs[4 * (long long)e + 1] = nxd;
        final_obs[4 * (long long)e + 2] = nth; final_obs[4 * (long long)e + 3] = nthd;
        last_ret[e] = ret0 + 1.0f;
        last_len[e] = t0 + 1;
#endif
#ifdef EPISODE
        episode[e] = ep + 1;
#ifdef HASH64
        u64 k = mix64((u64)seed + 0x9E3779B97F4A7C15ULL);
        k = mix64(k ^ ((u64)e * 0x9E3779B97F4A7C15ULL));
        k = mix64(k ^ 0ULL);
        k = mix64(k ^ ((u64)(ep + 1) * 0x94D049BB133111EBULL));
        const u64 key = mix64(k ^ 0xFFFFFFFFULL);
#else
        const u64 key = hash32(seed ^ hash32((u32)e * 0x85EBCA6BU ^ (u32)(ep + 1)));
#endif
#else
        const u64 key = hash32(seed ^ hash32((u32)e * 0x85EBCA6BU ^ clock ^ 0x5bd1e995U));
#endif
        nx = uniform_pm005(key, 0); nxd = uniform_pm005(key, 1);
        nth = uniform_pm005(key, 2); nthd = uniform_pm005(key, 3);
    }
    x[e] = nx; x_dot[e] = nxd; theta[e] = nth; theta_dot[e] = nthd;
    t[e] = d ? 0 : t0 + 1;
#ifdef OBS
    obs[4 * (long long)e + 0] = nx; obs[4 * (long long)e + 1] = nxd;
    obs[4 * (long long)e + 2] = nth; obs[4 * (long long)e + 3] = nthd;
#endif
}
"""

FLAGS = {
    "gymnax_work": (),
    "learner_min": ("LEARNER",),
    "learner_obs": ("LEARNER", "OBS"),
    "learner_obs_ep": ("LEARNER", "OBS", "EPISODE"),
    "shipped_like": ("LEARNER", "OBS", "EPISODE", "ACTION_ARRAY", "HASH64"),
}
VARIANTS = ["copy", "shipped"] + [f"{v}{suffix}" for v in FLAGS for suffix in ("", "_f64")]


def _kernel(name):
    from cuda.core import Device, Program, ProgramOptions
    import torch
    base = name[:-4] if name.endswith("_f64") else name
    defines = "".join(f"#define {f}\n" for f in FLAGS[base])
    defines += "#define REAL double\n" if name.endswith("_f64") else ""
    major, minor = torch.cuda.get_device_capability()
    Device(torch.cuda.current_device()).set_current()
    program = Program(defines + SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{major}{minor}", std="c++17"))
    return program.compile("cubin").get_kernel("step"), "ACTION_ARRAY" in FLAGS[base]


def one(name: str, n: int, repeats: int) -> float:
    """Microseconds a step of `n` replicas under the variant (32 steps a CUDA graph)."""
    import torch
    dev = torch.device("cuda")
    block = 32
    if name == "shipped":
        import workbench as wb
        env = wb.make("cartpole", num_envs=n, target="cuda-c", seed=0)
        steps = lambda: env.random_steps(block)  # noqa: E731
    elif name == "copy":  # the same bytes as gymnax_work's state (20 B read, 20 B written a replica)
        src = torch.empty(n * 5, dtype=torch.float32, device=dev)
        dst = torch.empty_like(src)
        steps = lambda: [dst.copy_(src) for _ in range(block)]  # noqa: E731
    else:
        from cuda.core import LaunchConfig, Stream, launch
        kernel, action_array = _kernel(name)
        f = lambda *s, dtype=torch.float32: torch.zeros(*s, dtype=dtype, device=dev)  # noqa: E731
        state = [f(n) for _ in range(4)]
        for s in state:
            s.uniform_(-0.05, 0.05)
        arrays = state + [f(n, dtype=torch.int32), f(n, dtype=torch.int8), f(n, 4), f(n, 4), f(n),
                          f(n, dtype=torch.uint8), f(n, dtype=torch.uint8), f(n, dtype=torch.uint8), f(n), f(n),
                          f(n, dtype=torch.int32), f(n, dtype=torch.int32)]
        action = arrays[5]
        pointers = [a.data_ptr() for a in arrays]
        config = LaunchConfig(grid=(n + 255) // 256, block=256)
        generator = torch.Generator(device=dev).manual_seed(0)

        def one_step(k):
            if action_array:
                torch.randint(0, 2, action.shape, generator=generator, out=action, device=dev)
            stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
            launch(stream, config, kernel, np.int32(n), np.uint32(12345), np.uint32(k), *pointers)

        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(generator)
        one_step(0)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for k in range(block):
                one_step(k + 1)
        steps = graph.replay
    return C.steady_us_per_step(steps, block, repeats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", nargs="+", type=C.count, default=[10**6, 10**7])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    info = C.machine()
    print(f"# probe_cartpole_ceiling on {info['gpu']}; torch {info['torch']}")
    rows = []
    for n in args.num_envs:
        for name in args.variants:
            us = one(name, n, args.repeats)
            rows.append([f"{n:,}", name, f"{us:.1f}", f"{n / us / 1e3:.2f} G"])
            print(f"  {n:>10,} {name:20s} {us:8.1f} us/step", flush=True)
    print()
    print(C.markdown(["replicas", "variant", "us a step", "env-steps/s"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
