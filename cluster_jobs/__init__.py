"""Ray jobs and Ray Serve apps that run on the HyperPod Ray cluster (or a local Ray head)."""
