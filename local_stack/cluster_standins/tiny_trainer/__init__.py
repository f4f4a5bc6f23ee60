"""The tiny GRPO trainer behind the run spec's ``backend: tiny``: SkyRL's GRPO update and artifacts on the tiny
Qwen3-VL (:func:`~local_stack.cluster_standins.tiny_trainer.train.train_tiny_grpo`)."""
