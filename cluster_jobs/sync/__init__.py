"""Checkpoint sync: finished LoRA exports on the shared file system -> S3 adapters + manifests."""
