"""Where a model lives and how its files read: model paths and GGUF headers. Torch-free, so front ends find the
tokenizer without loading the model.
"""
