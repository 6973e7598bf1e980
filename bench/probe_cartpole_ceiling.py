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
                    framework's 64-bit key hash: about the generated kernel's work before acf36b7
  shipped_now     learner_min + the episode counter and the 64-bit key hash, the action drawn in the
                    step: about today's generated kernel's work (the observation is the state)
Each also with the suffix _vec4: four consecutive replicas a thread, every per-replica array read and
written as one 16-byte (or 4-byte, for the flags) vector.
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

struct Replica {  // one replica's values in registers
    float x, xd, th, thd, ret, reward;
    int t, ep;
    unsigned char term, trunc, done;
};

__device__ __forceinline__ void advance(Replica& r, int e, u32 seed, u32 clock, int a,
    float* __restrict__ final_obs, float* __restrict__ last_ret, int* __restrict__ last_len, int* __restrict__ episode)
{
    const float x0 = r.x, xd0 = r.xd, th0 = r.th, thd0 = r.thd;
    const int t0 = r.t;
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
    const float ret0 = r.ret;
    r.reward = 1.0f; r.term = failed; r.trunc = out_of_time; r.done = d;
    r.ret = d ? 0.0f : ret0 + 1.0f;
    if (d) {
#ifdef LEARNER
        final_obs[4 * (long long)e + 0] = nx; final_obs[4 * (long long)e + 1] = nxd;
        final_obs[4 * (long long)e + 2] = nth; final_obs[4 * (long long)e + 3] = nthd;
        last_ret[e] = ret0 + 1.0f;
        last_len[e] = t0 + 1;
#endif
#ifdef EPISODE
        const int ep = r.ep;
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
    r.x = nx; r.xd = nxd; r.th = nth; r.thd = nthd;
    r.t = d ? 0 : t0 + 1;
}

__device__ __forceinline__ int draw_action(u32 seed, u32 clock, int e)
{
    return hash32(seed ^ hash32((u32)e * 0x9E3779B9U ^ clock)) & 1;
}

#define STEP_ARGS int n, u32 seed, u32 clock, \
    float* __restrict__ x, float* __restrict__ x_dot, float* __restrict__ theta, float* __restrict__ theta_dot, \
    int* __restrict__ t, const signed char* __restrict__ action, float* __restrict__ obs, \
    float* __restrict__ final_obs, float* __restrict__ reward, unsigned char* __restrict__ terminated, \
    unsigned char* __restrict__ truncated, unsigned char* __restrict__ done, float* __restrict__ ret, \
    float* __restrict__ last_ret, int* __restrict__ last_len, int* __restrict__ episode

extern "C" __global__ void __launch_bounds__(256) step(STEP_ARGS)
{
    const int e = blockIdx.x * 256 + threadIdx.x;
    if (e >= n)
        return;
    Replica r;
    r.x = x[e]; r.xd = x_dot[e]; r.th = theta[e]; r.thd = theta_dot[e]; r.t = t[e];
#ifdef ACTION_ARRAY
    const int a = action[e];
#else
    const int a = draw_action(seed, clock, e);
#endif
#ifdef LEARNER
    r.ret = ret[e];
#else
    r.ret = 0.0f;
#endif
#ifdef EPISODE
    r.ep = episode[e];
#endif
    advance(r, e, seed, clock, a, final_obs, last_ret, last_len, episode);
#ifdef LEARNER
    reward[e] = r.reward; terminated[e] = r.term; truncated[e] = r.trunc; done[e] = r.done; ret[e] = r.ret;
#endif
    x[e] = r.x; x_dot[e] = r.xd; theta[e] = r.th; theta_dot[e] = r.thd; t[e] = r.t;
#ifdef OBS
    obs[4 * (long long)e + 0] = r.x; obs[4 * (long long)e + 1] = r.xd;
    obs[4 * (long long)e + 2] = r.th; obs[4 * (long long)e + 3] = r.thd;
#endif
}

// four consecutive replicas a thread, every per-replica array read and written as one vector
extern "C" __global__ void __launch_bounds__(256) step4(STEP_ARGS)
{
    const int q = blockIdx.x * 256 + threadIdx.x;
    if (4 * q >= n)
        return;
    const float4 X = ((const float4*)x)[q], XD = ((const float4*)x_dot)[q];
    const float4 TH = ((const float4*)theta)[q], THD = ((const float4*)theta_dot)[q];
    const int4 T = ((const int4*)t)[q];
#ifdef LEARNER
    const float4 RET = ((const float4*)ret)[q];
#else
    const float4 RET = make_float4(0.f, 0.f, 0.f, 0.f);
#endif
#ifdef EPISODE
    const int4 EP = ((const int4*)episode)[q];
#else
    const int4 EP = make_int4(0, 0, 0, 0);
#endif
#ifdef ACTION_ARRAY
    const char4 A = ((const char4*)action)[q];
    const int as[4] = {A.x, A.y, A.z, A.w};
#endif
    const float xs[4] = {X.x, X.y, X.z, X.w}, xds[4] = {XD.x, XD.y, XD.z, XD.w};
    const float ths[4] = {TH.x, TH.y, TH.z, TH.w}, thds[4] = {THD.x, THD.y, THD.z, THD.w};
    const int ts[4] = {T.x, T.y, T.z, T.w}, eps[4] = {EP.x, EP.y, EP.z, EP.w};
    const float rets[4] = {RET.x, RET.y, RET.z, RET.w};
    Replica r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        r[k].x = xs[k]; r[k].xd = xds[k]; r[k].th = ths[k]; r[k].thd = thds[k]; r[k].t = ts[k];
        r[k].ret = rets[k]; r[k].ep = eps[k];
#ifdef ACTION_ARRAY
        const int a = as[k];
#else
        const int a = draw_action(seed, clock, 4 * q + k);
#endif
        advance(r[k], 4 * q + k, seed, clock, a, final_obs, last_ret, last_len, episode);
    }
#ifdef LEARNER
    ((float4*)reward)[q] = make_float4(r[0].reward, r[1].reward, r[2].reward, r[3].reward);
    ((uchar4*)terminated)[q] = make_uchar4(r[0].term, r[1].term, r[2].term, r[3].term);
    ((uchar4*)truncated)[q] = make_uchar4(r[0].trunc, r[1].trunc, r[2].trunc, r[3].trunc);
    ((uchar4*)done)[q] = make_uchar4(r[0].done, r[1].done, r[2].done, r[3].done);
    ((float4*)ret)[q] = make_float4(r[0].ret, r[1].ret, r[2].ret, r[3].ret);
#endif
    ((float4*)x)[q] = make_float4(r[0].x, r[1].x, r[2].x, r[3].x);
    ((float4*)x_dot)[q] = make_float4(r[0].xd, r[1].xd, r[2].xd, r[3].xd);
    ((float4*)theta)[q] = make_float4(r[0].th, r[1].th, r[2].th, r[3].th);
    ((float4*)theta_dot)[q] = make_float4(r[0].thd, r[1].thd, r[2].thd, r[3].thd);
    ((int4*)t)[q] = make_int4(r[0].t, r[1].t, r[2].t, r[3].t);
#ifdef OBS
#pragma unroll
    for (int k = 0; k < 4; ++k)
        ((float4*)obs)[4 * q + k] = make_float4(r[k].x, r[k].xd, r[k].th, r[k].thd);
#endif
}
"""

FLAGS = {
    "gymnax_work": (),
    "learner_min": ("LEARNER",),
    "learner_obs": ("LEARNER", "OBS"),
    "learner_obs_ep": ("LEARNER", "OBS", "EPISODE"),
    "shipped_like": ("LEARNER", "OBS", "EPISODE", "ACTION_ARRAY", "HASH64"),
    # today's generated step's work: the observation is the state, the action drawn in the step
    "shipped_now": ("LEARNER", "EPISODE", "HASH64"),
}
VARIANTS = (["copy", "shipped"] + [f"{v}{suffix}" for v in FLAGS for suffix in ("", "_f64")]
            + [f"{v}_vec4" for v in FLAGS])


def _kernel(name):
    from cuda.core import Device, Program, ProgramOptions
    import torch
    base = name.removesuffix("_f64").removesuffix("_vec4")
    defines = "".join(f"#define {f}\n" for f in FLAGS[base])
    defines += "#define REAL double\n" if name.endswith("_f64") else ""
    major, minor = torch.cuda.get_device_capability()
    Device(torch.cuda.current_device()).set_current()
    program = Program(defines + SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{major}{minor}", std="c++17"))
    kernel = "step4" if name.endswith("_vec4") else "step"
    return program.compile("cubin").get_kernel(kernel), "ACTION_ARRAY" in FLAGS[base]


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
        per_thread = 4 if name.endswith("_vec4") else 1  # (n a multiple of 4 there: whole vectors)
        config = LaunchConfig(grid=(n // per_thread + 255) // 256, block=256)
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
