// CartPole-v1 in CUDA C: the phases of cartpole.py, whose declarations (PARAMS, STATE, spaces) the
// cuda-c target uses with these functions. Parameter names bind to arrays as in the Python phases;
// per-env arrays come as pointers ([E]: x[env]), and action/reward/obs as their views
// ([E, A] and [E, A, 4]: action(env, agent), obs(env, agent, i)). Like the Python, the dynamics
// compute in double from float state and store floats.

__device__ void reset(int env, wb_key key, float* x, float* x_dot, float* theta, float* theta_dot)
{
    x[env] = wb_uniform_range(key, 0, -0.05, 0.05);
    x_dot[env] = wb_uniform_range(key, 1, -0.05, 0.05);
    theta[env] = wb_uniform_range(key, 2, -0.05, 0.05);
    theta_dot[env] = wb_uniform_range(key, 3, -0.05, 0.05);
}

__device__ void step(int env, int agent, action_view action, float* x, float* x_dot, float* theta,
                     float* theta_dot, reward_view reward, unsigned char* terminated)
{
    // every load issued before any arithmetic: one memory round trip a step, not three
    const int a = action(env, agent);
    const float x0 = x[env], x_dot0 = x_dot[env], theta0 = theta[env], theta_dot0 = theta_dot[env];
    const double total_mass = masspole + masscart;
    const double polemass_length = masspole * length;
    const double force = a == 1 ? force_mag : -force_mag;
    const float costheta = cosf(theta0);
    const float sintheta = sinf(theta0);
    const float theta_dot_sq = theta_dot0 * theta_dot0;  // float, as theta_dot ** 2 is in the Python
    const double temp = (force + polemass_length * theta_dot_sq * sintheta) / total_mass;
    const double thetaacc = (gravity * sintheta - costheta * temp) /
                            (length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass));
    const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    const double new_x = x0 + tau * x_dot0;
    x_dot[env] = x_dot0 + tau * xacc;
    const double new_theta = theta0 + tau * theta_dot0;
    theta_dot[env] = theta_dot0 + tau * thetaacc;
    x[env] = new_x;
    theta[env] = new_theta;
    reward(env, agent) = 1.0f;
    const bool failed = new_x < -x_threshold || new_x > x_threshold || new_theta < -theta_threshold ||
                        new_theta > theta_threshold;
    terminated[env] = failed ? 1 : 0;
}

__device__ void observe(int env, int agent, const float* x, const float* x_dot, const float* theta,
                        const float* theta_dot, obs_view obs)
{
    obs(env, agent, 0) = x[env];
    obs(env, agent, 1) = x_dot[env];
    obs(env, agent, 2) = theta[env];
    obs(env, agent, 3) = theta_dot[env];
}
