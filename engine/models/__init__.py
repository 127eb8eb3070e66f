"""The Llama-family decoder (`llama.CausalLM`) and what it looks like (`config.ModelConfig`).

Its layers are in `engine.layers`; reading a checkpoint into it is `engine.loaders.load_model`.
"""
