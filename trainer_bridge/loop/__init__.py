"""trainer_bridge.loop: the training loop: data, steps, validation, schedule windows, distillation."""
