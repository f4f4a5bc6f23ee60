"""The training Ray job: SkyRL GRPO on the cluster, a tiny CPU GRPO loop locally, metrics, launch."""
