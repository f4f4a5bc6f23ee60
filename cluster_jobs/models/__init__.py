"""Model code shared by training, evaluation and serving: base model loading, the vision policy, the tiny test model.

Import from the submodules, e.g. ``from cluster_jobs.models.policy import VisionPolicy``.
"""
