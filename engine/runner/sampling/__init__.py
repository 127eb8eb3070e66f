"""Sampling, the runners' last step of a forward: the sampler (:mod:`.sampler`), its input
(:mod:`.batch`: per-row tensors and host flags), how the sync runner builds that input on the host
(:mod:`.host`) and the counter-based noise that makes a seeded row's draw independent of its batch
(:mod:`.noise`)."""
