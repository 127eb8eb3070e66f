"""The OpenAI Responses API over the chat core: types, items, the Redis store, the stream."""
