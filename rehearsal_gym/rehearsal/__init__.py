"""World rehearsal: the environment role's prompts and results bank, SelfSim-v0, its fidelity
metrics and verifiers, and private rehearsal before acting (the planner)."""
