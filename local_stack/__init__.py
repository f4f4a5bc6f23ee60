"""The embedded local default: a moto server with the project's SAM stack, real handler code
running in-process, and an optional local Ray head. Start with `local_stack.stack.LocalStack`."""
