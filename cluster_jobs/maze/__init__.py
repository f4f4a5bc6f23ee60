"""The 2D maze task (VisGym ``maze_2d`` style): generation, rendering, actions, episodes, SkyRL env.

Import from the submodules, e.g. ``from cluster_jobs.maze.generator import generate_maze``.
"""
