"""The loss terms as the trainer wires them: each term moves the policy the way its sign says.

Each test isolates one term (the others weigh 0, and equal rewards give zero advantages), takes a
few optimizer steps on a tiny model, and checks the direction of the change; flipping the term's
sign in `PPOTrainer.loss_terms` makes it fail.
"""

import copy

import pytest
import torch
from rehearsal_gym.agents.buffer import Role, RoleSequence
from rehearsal_gym.agents.config import PPOConfig
from rehearsal_gym.agents.losses import entropy, kl_to_reference
from rehearsal_gym.agents.ppo import PPOTrainer

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.sampling import token_logprobs

BASE = dict(tasks_per_iter=1, group_size=2, epochs=1, minibatch_size=4, max_turns=2, lr=1e-2, kl_coef=0.0)


def _trainer(tiny_lm, **options) -> PPOTrainer:
    return PPOTrainer(
        PPOConfig.from_flat(**{**BASE, **options}), LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)
    )


def _sequences(trainer, answers, rewards, role=Role.AGENT, skill=None):
    """One sequence per answer after the same context, old log-probs from the current policy."""
    lm = trainer.lm
    ctx = lm.turn("task", "What is 1 + 1?") + [lm.role_ids["agent"]]
    out = []
    for answer, reward in zip(answers, rewards, strict=True):
        full = ctx + lm.encode(answer) + [lm.end_id]
        with torch.no_grad():
            lp = token_logprobs(
                lm.model(input_ids=torch.tensor([full])).logits[:, :-1], torch.tensor([full[1:]])
            )
        mask = [0] * len(ctx) + [1] * (len(full) - len(ctx))
        skill_ids = lm.turn("skill", skill) if skill else None
        out.append(RoleSequence(full, mask, [0.0, *lp[0].tolist()], reward, 0, role, skill_ids))
    return out


def _measure(trainer, seqs):
    """(mean log-prob of the trained tokens, KL to the reference, entropy) under the current policy."""
    with torch.no_grad():
        rows = []
        for s in seqs:
            ids = torch.tensor([s.ids])
            logits = trainer.lm.model(input_ids=ids).logits[:, :-1]
            logp = token_logprobs(logits, ids[:, 1:])
            ref = token_logprobs(trainer.ref(input_ids=ids).logits[:, :-1], ids[:, 1:])
            m = torch.tensor([s.mask[1:]])
            rows.append(((logp * m).sum() / m.sum(), kl_to_reference(logp, ref, m), entropy(logits, m)))
    return [float(torch.stack(col).mean()) for col in zip(*rows, strict=True)]


def _steps(trainer, seqs, n=5):
    for _ in range(n):
        trainer.update(copy.deepcopy(seqs))


def test_kl_term_pulls_the_policy_back_to_the_reference(tiny_lm):
    trainer = _trainer(tiny_lm, kl_coef=1.0)
    with torch.no_grad():  # move the policy away from its reference
        for p in trainer.lm.model.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    seqs = _sequences(trainer, ["ANSWER 2", "ANSWER 3"], [1.0, 1.0])  # equal rewards: no policy term
    _, kl_before, _ = _measure(trainer, seqs)
    _steps(trainer, seqs)
    _, kl_after, _ = _measure(trainer, seqs)
    assert kl_before > 0 and kl_after < 0.9 * kl_before


def test_entropy_bonus_raises_the_entropy(tiny_lm):
    trainer = _trainer(tiny_lm, ent_coef=1.0)
    with torch.no_grad():  # a sharper policy than the untrained one (whose entropy is near log V)
        trainer.lm.model.get_output_embeddings().weight.mul_(20.0)
    seqs = _sequences(trainer, ["ANSWER 2", "ANSWER 3"], [1.0, 1.0])
    *_, before = _measure(trainer, seqs)
    _steps(trainer, seqs)
    *_, after = _measure(trainer, seqs)
    assert before < 5.5 and after > before + 0.05


def test_opd_term_raises_the_students_log_probs_of_the_sampled_tokens(tiny_lm):
    trainer = _trainer(tiny_lm, lambda_opd=1.0, skill_hints=True)
    seqs = _sequences(trainer, ["ANSWER 2", "ANSWER 3"], [1.0, 1.0], skill="Workflow: ANSWER.")
    before, *_ = _measure(trainer, seqs)
    stats = trainer.update(copy.deepcopy(seqs))
    _steps(trainer, seqs, 4)
    after, *_ = _measure(trainer, seqs)
    assert stats["opd_loss"] != 0 and after > before + 0.05


@pytest.mark.parametrize("role", [Role.AGENT, Role.ENV])
def test_update_moves_each_role_toward_its_advantage(tiny_lm, role):
    """Of two samples of one group, the rewarded one gains log-probability against the other,
    for the environment role's sequences as for the agent's."""
    trainer = _trainer(tiny_lm)
    seqs = _sequences(trainer, ["ANSWER 2", "ANSWER 3"], [1.0, 0.0], role=role)
    gap_before = _measure(trainer, seqs[:1])[0] - _measure(trainer, seqs[1:])[0]
    _steps(trainer, seqs)
    gap_after = _measure(trainer, seqs[:1])[0] - _measure(trainer, seqs[1:])[0]
    assert gap_after > gap_before + 0.1


def test_negative_weight_scales_what_a_failure_teaches(tiny_lm):
    """A failure whose group mean comes from a sample with no trained tokens: its advantage is
    -0.5. At negative_weight 1 its tokens lose probability; at 0 the update leaves them nearly alone."""

    def drop(weight):
        trainer = _trainer(tiny_lm, negative_weight=weight)
        bad, good = _sequences(trainer, ["ANSWER 3", "ANSWER 2"], [0.0, 1.0])
        good.mask = [0] * len(good.mask)  # sets the baseline, trains nothing
        before, *_ = _measure(trainer, [bad])
        _steps(trainer, [bad, good])
        return before - _measure(trainer, [bad])[0]

    full, none = drop(1.0), drop(0.0)
    assert full > 0.5 and abs(none) < 0.1 * full


def test_gradients_are_clipped_to_max_grad_norm(tiny_lm):
    trainer = _trainer(tiny_lm, max_grad_norm=1e-3)
    seqs = _sequences(trainer, ["ANSWER 2", "ANSWER 3"], [1.0, 0.0])
    norms = []
    step = trainer.opt.step

    def recording_step(*args, **kwargs):
        grads = [p.grad for group in trainer.opt.param_groups for p in group["params"] if p.grad is not None]
        norms.append(
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        )
        return step(*args, **kwargs)

    trainer.opt.step = recording_step
    trainer.update(seqs)
    assert norms and max(norms) <= 1e-3 * 1.0001


def test_world_loss_raises_the_likelihood_of_real_tool_results(tiny_lm):
    """ECHO's term: equal rewards (no policy term), the world loss alone makes the policy predict
    the real result tokens of its own conversation better, and leaves the other tokens' targets."""
    trainer = _trainer(tiny_lm, world_loss_coef=1.0)
    seqs = _sequences(trainer, ["ANSWER 2", "ANSWER 3"], [1.0, 1.0])
    lm = trainer.lm
    result = lm.turn("env", '{"result": 2}')
    for s in seqs:  # a real result after each answer, marked as ECHO's targets
        s.ids += result
        s.mask += [0] * len(result)
        s.old_logprobs += [0.0] * len(result)
        s.world_mask = (
            [0] * (len(s.ids) - len(result))
            + [0] * len(lm.head("env"))
            + [1] * (len(result) - len(lm.head("env")))
        )

    def result_logp():
        with torch.no_grad():
            ids = torch.tensor([seqs[0].ids])
            logp = token_logprobs(lm.model(input_ids=ids).logits[:, :-1], ids[:, 1:])[0]
            return float(logp[torch.tensor(seqs[0].world_mask[1:]).bool()].mean())

    before = result_logp()
    _steps(trainer, seqs)
    assert result_logp() > before + 0.1
