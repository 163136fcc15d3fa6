"""Supervised recipes: the warm start of both roles, SEED's analyst and skills, world grounding;
all through one supervised loop (`sft`)."""
