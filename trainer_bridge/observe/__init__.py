"""trainer_bridge.observe: watching a run: metrics, Prometheus monitoring, alerts."""
