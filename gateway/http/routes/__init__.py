"""The gateway's routes, one module per group: OpenAI, tokenize, operations."""
