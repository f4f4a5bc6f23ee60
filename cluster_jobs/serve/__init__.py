"""Serving: Ray Serve LLM with dynamic LoRA loading on the cluster (`llm_app`), and a local stand-in with the
same OpenAI-compatible interface (`local_app`, `chat_service`, `adapter_store`)."""
