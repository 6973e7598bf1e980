// wb_runtime.cuh: what CUDA C env code may use besides its arrays.
//
//   random numbers  wb_make_key, wb_uniform, wb_uniform_range, wb_randint, wb_normal
//                   (bit for bit the values of workbench/compiler/rng.py, the same on every target)
//   atomics         wb_atomic_add / wb_atomic_max / wb_atomic_min (address, value)
//                   or (array, index, value); each returns the old value
//   math helpers    rint, round_half_even, clip, sign (as workbench/compiler/helpers.py)
//   array views     wb_view<T, dims...>: a row-major [E, dims...] array indexed v(env, i...);
//                   the driver defines one per array as NAME_view
//   register cap    #define WB_MAX_REGISTERS N in the env's source caps the driver kernels at N
//                   registers a thread (__maxnreg__): more replicas share a multiprocessor
//
// NVRTC and nvcc compile it as CUDA; any other C++ compiler gets a host build (used by the tests
// to run the same env code and drivers on the CPU).
#pragma once

#ifdef __CUDACC__
#define WB_FN static __forceinline__ __device__
#else
#include <math.h>
#define __device__
#define __host__
#define __global__
#define __maxnreg__(n)
#define __forceinline__ inline
#define WB_FN static inline
#endif

typedef unsigned long long wb_u64;
typedef unsigned long long wb_key;  // one agent's random stream at one step (see wb_make_key)

#define WB_GOLDEN 0x9E3779B97F4A7C15ULL
#define WB_MUL1 0xBF58476D1CE4E5B9ULL
#define WB_MUL2 0x94D049BB133111EBULL
#define WB_RESET_STEP 0xFFFFFFFFULL
#define WB_OBSERVE_STEP 0x100000000ULL  // observe's keys: step t + WB_OBSERVE_STEP (rng.OBSERVE_STEP)

// ---- random numbers: mirrors workbench/compiler/rng.py ----------------------------------------------

// Rounded products and sums that the compiler may not fuse into an FMA, so that
// wb_uniform_range rounds as the cpu target does.
#ifdef __CUDACC__
#define WB_FMUL(a, b) __fmul_rn((a), (b))
#define WB_FADD(a, b) __fadd_rn((a), (b))
#else
#define WB_FMUL(a, b) ((a) * (b))
#define WB_FADD(a, b) ((a) + (b))
#endif

// splitmix64 finaliser: a bijective 64-bit hash.
WB_FN wb_u64 wb_mix64(wb_u64 x)
{
    x = (x ^ (x >> 30)) * WB_MUL1;
    x = (x ^ (x >> 27)) * WB_MUL2;
    return x ^ (x >> 31);
}

// Key of one agent's random stream at one step of one episode of one replica.
WB_FN wb_key wb_make_key(wb_u64 seed, wb_u64 env, wb_u64 agent, wb_u64 episode, wb_u64 step)
{
    wb_u64 k = wb_mix64(seed + WB_GOLDEN);
    k = wb_mix64(k ^ (env * WB_GOLDEN));
    k = wb_mix64(k ^ (agent * WB_MUL1));
    k = wb_mix64(k ^ (episode * WB_MUL2));
    return wb_mix64(k ^ step);
}

// i-th uniform float in [0, 1) of the stream `key`.
WB_FN float wb_uniform(wb_key key, wb_u64 i)
{
    const wb_u64 x = wb_mix64(key + (i + 1ULL) * WB_GOLDEN);
    return (float)(x >> 40) * (1.0f / 16777216.0f);
}

// i-th uniform float in [low, high).
WB_FN float wb_uniform_range(wb_key key, wb_u64 i, float low, float high)
{
    return WB_FADD(low, WB_FMUL(high - low, wb_uniform(key, i)));
}

// i-th integer uniform in [0, n).
WB_FN int wb_randint(wb_key key, wb_u64 i, long long n)
{
    const wb_u64 x = wb_mix64(key + (i + 1ULL) * WB_GOLDEN);
    return (int)((x >> 30) % (wb_u64)n);
}

// i-th standard normal float (Box-Muller over draws 2i and 2i+1).
WB_FN float wb_normal(wb_key key, wb_u64 i)
{
    const float u1 = wb_uniform(key, 2 * i) + (float)1e-12;
    const float u2 = wb_uniform(key, 2 * i + 1);
    return sqrtf(-2.0f * logf(u1)) * cosf((float)6.283185307179586 * u2);
}

// ---- atomics ---------------------------------------------------------------------------------

template <typename T> struct wb_same { typedef T type; };  // keeps an argument out of deduction

// math helpers of workbench/compiler/helpers.py, with its results for NaN and reversed bounds
// (rint itself is CUDA's and C's own); clip's bounds take x's type, so clip(x_float, 0.0, 1.0) compiles
template <typename T> WB_FN T clip(T x, typename wb_same<T>::type low, typename wb_same<T>::type high)
{
    const T above = (x >= low || x != x) ? x : low;  // np.maximum(x, low): a NaN wins
    return (above <= high || above != above) ? above : high;  // np.minimum(above, high)
}
template <typename T> WB_FN T sign(T x) { return x > (T)0 ? (T)1 : (x < (T)0 ? (T)-1 : x - x); }  // NaN stays NaN
WB_FN double round_half_even(double x) { return rint(x); }
WB_FN float round_half_even(float x) { return rintf(x); }

// Driver use: asks L2 for the line at p ahead of its load (nothing in a host build).
template <typename T> WB_FN void wb_prefetch(const T* p)
{
#ifdef __CUDA_ARCH__
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

#ifdef __CUDACC__
WB_FN int wb_atomic_add(int* p, int v) { return atomicAdd(p, v); }
WB_FN unsigned wb_atomic_add(unsigned* p, unsigned v) { return atomicAdd(p, v); }
WB_FN unsigned long long wb_atomic_add(unsigned long long* p, unsigned long long v) { return atomicAdd(p, v); }
WB_FN long long wb_atomic_add(long long* p, long long v)
{
    return (long long)atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
WB_FN float wb_atomic_add(float* p, float v) { return atomicAdd(p, v); }
WB_FN double wb_atomic_add(double* p, double v) { return atomicAdd(p, v); }

WB_FN int wb_atomic_max(int* p, int v) { return atomicMax(p, v); }
WB_FN unsigned wb_atomic_max(unsigned* p, unsigned v) { return atomicMax(p, v); }
WB_FN long long wb_atomic_max(long long* p, long long v) { return atomicMax(p, v); }
WB_FN int wb_atomic_min(int* p, int v) { return atomicMin(p, v); }
WB_FN unsigned wb_atomic_min(unsigned* p, unsigned v) { return atomicMin(p, v); }
WB_FN long long wb_atomic_min(long long* p, long long v) { return atomicMin(p, v); }

// Floating-point max/min: compare-and-swap on the bits until the stored value wins or ours lands.
#define WB_ATOMIC_EXTREME(NAME, T, BITS, TO_T, TO_BITS, BETTER)                               \
    WB_FN T NAME(T* p, T v)                                                                    \
    {                                                                                          \
        BITS* bits = (BITS*)p;                                                                 \
        BITS old = *bits, assumed;                                                             \
        do {                                                                                   \
            assumed = old;                                                                     \
            if (!(v BETTER TO_T(assumed)))                                                     \
                break;                                                                         \
            old = atomicCAS(bits, assumed, TO_BITS(v));                                        \
        } while (old != assumed);                                                              \
        return TO_T(old);                                                                      \
    }
WB_ATOMIC_EXTREME(wb_atomic_max, float, int, __int_as_float, __float_as_int, >)
WB_ATOMIC_EXTREME(wb_atomic_min, float, int, __int_as_float, __float_as_int, <)
WB_ATOMIC_EXTREME(wb_atomic_max, double, unsigned long long, __longlong_as_double, (unsigned long long)__double_as_longlong, >)
WB_ATOMIC_EXTREME(wb_atomic_min, double, unsigned long long, __longlong_as_double, (unsigned long long)__double_as_longlong, <)
#undef WB_ATOMIC_EXTREME
#else
// Host build: the same operations through GCC/Clang atomic builtins.
template <typename T, typename Op>
static inline T wb_host_atomic(T* p, Op op)
{
    T old, desired;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    do {
        desired = op(old);
    } while (!__atomic_compare_exchange(p, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
template <typename T> static inline T wb_atomic_add(T* p, typename wb_same<T>::type v)
{
    return wb_host_atomic(p, [v](T x) { return (T)(x + v); });
}
template <typename T> static inline T wb_atomic_max(T* p, typename wb_same<T>::type v)
{
    return wb_host_atomic(p, [v](T x) { return v > x ? v : x; });
}
template <typename T> static inline T wb_atomic_min(T* p, typename wb_same<T>::type v)
{
    return wb_host_atomic(p, [v](T x) { return v < x ? v : x; });
}
#endif

// (array, index, value) forms, as atomic_add(array, index, value) in Python env code.
template <typename T> WB_FN T wb_atomic_add(T* array, long long index, typename wb_same<T>::type value)
{
    return wb_atomic_add(array + index, value);
}
template <typename T> WB_FN T wb_atomic_max(T* array, long long index, typename wb_same<T>::type value)
{
    return wb_atomic_max(array + index, value);
}
template <typename T> WB_FN T wb_atomic_min(T* array, long long index, typename wb_same<T>::type value)
{
    return wb_atomic_min(array + index, value);
}

// ---- array views ------------------------------------------------------------------------------

// A row-major array [E, Dims...] over raw memory. Per-env arrays have Dims = shape, per-agent
// arrays Dims = (NUM_AGENTS, shape...): view(env, agent, i) is element [env, agent, i].
// Converts from and to T*, so a phase may take either form of the same array.
template <typename T, long long... Dims>
struct wb_view {
    T* data;
    static constexpr long long size = (1LL * ... * Dims);  // elements per replica

    __device__ wb_view(T* pointer) : data(pointer) {}
    __device__ operator T*() const { return data; }

    template <typename... I>
    __device__ T& operator()(long long env, I... index) const
    {
        static_assert(sizeof...(I) == sizeof...(Dims), "a view takes the replica index and one index per dimension");
        long long k = env;
        ((k = k * Dims + (long long)index), ...);
        return data[k];
    }

    __device__ T& operator[](long long env) const
    {
        static_assert(sizeof...(Dims) == 0, "[] indexes [E] arrays only; use view(env, agent, ...)");
        return data[env];
    }
};
