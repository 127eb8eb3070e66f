"""Text around the token ids: the tokenizer, chat templates, incremental detokenizing and stop strings. Torch-
free, so front ends import it.
"""
