"""Learning on the device: the trainer's loop (trainer) and its parts (collection, learners, metrics,
iteration_graph, trainer_state), the algorithms (algorithms/: ppo, a2c, ddpg), rollouts and GAE,
policies, configs, checkpoints, data parallelism, evaluation, run folders and their reports."""
