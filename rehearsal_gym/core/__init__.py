"""Core primitives, free of any env family: the turn protocol and its grammar, the tokenizer and
`LM`, the sampler, episodes (`rollout`), atomic directories and result tables."""
