"""The env compiler: an env source (envs/*.py, a `%%warpenv` cell, CUDA C phases) parsed into an
EnvDefinition (envdef, envdef_c, vocabulary) and compiled into kernels for each target (targets/:
cpu, cuda, cuda-c; codegen and codegen_c write their drivers; kernel_cache keeps them on disk)."""
