"""trainer_bridge.parallel: parallelism and devices: the mesh, FSDP, tensor, context and pipeline parallelism, precision."""
