"""maze-rl-ops domain package: contracts and logic shared by the Lambda handlers, cluster jobs and tools."""
