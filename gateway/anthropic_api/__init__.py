"""The Anthropic Messages API over the chat core: types, translation, the stream, error bodies."""
