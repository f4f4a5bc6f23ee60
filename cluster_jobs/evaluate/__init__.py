"""The evaluation Ray job: one adapter on the fixed 64-maze set, result to S3.

``python -m cluster_jobs.evaluate.run --manifest s3://... --base-model-path ... --backend vllm|transformers
--output s3://.../result.json``; the logic is in :mod:`cluster_jobs.evaluate.job`.
"""
