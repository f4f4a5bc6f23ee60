"""The read-only queries of one deployment, shared by the ops CLI and the web console; nothing here writes."""
