import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rehearsal_gym.agents.losses import (
    approx_kl,
    entropy,
    grounding_loss,
    group_advantages,
    kl_to_reference,
    masked_mean,
    opd_loss,
    policy_loss,
    reduce_masked,
    token_gae,
    value_loss,
    weight_negative,
)


def test_gae_hand_computed():
    # Tokens: [prompt, a1, a2, result, a3]; reward 1 at the last agent token.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[9.0, 0.5, 0.6, 9.0, 0.8]])
    mask = torch.tensor([[0, 1, 1, 0, 1]])
    adv, ret = token_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    d3 = 1.0 - 0.8  # last agent token: no next value
    d2 = 0.0 + 0.9 * 0.8 - 0.6  # next masked value skips the result token
    d1 = 0.0 + 0.9 * 0.6 - 0.5
    a3, a2 = d3, d2 + 0.45 * d3
    a1 = d1 + 0.45 * a2
    torch.testing.assert_close(adv, torch.tensor([[0.0, a1, a2, 0.0, a3]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0, a1 + 0.5, a2 + 0.6, 0.0, a3 + 0.8]]))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-2, 2), st.floats(-2, 2), st.booleans()), min_size=1, max_size=12),
    st.floats(0.5, 1.0),
    st.floats(0.0, 1.0),
)
def test_gae_equals_gae_on_the_masked_tokens_alone(rows, gamma, lam):
    r = torch.tensor([[x[0] for x in rows]], dtype=torch.float64)
    v = torch.tensor([[x[1] for x in rows]], dtype=torch.float64)
    m = torch.tensor([[x[2] for x in rows]])
    adv, _ = token_gae(r, v, m, gamma, lam)
    keep = m[0].bool()
    compact, _ = token_gae(r[:, keep], v[:, keep], torch.ones(1, int(keep.sum())), gamma, lam)
    torch.testing.assert_close(adv[:, keep], compact)
    assert torch.all(adv[:, ~keep] == 0)


def test_policy_loss_clips():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0]]))
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, frac = policy_loss(logp, old, adv, mask, clip=0.2)
    # token 1: ratio 1.5, A=1 -> min(1.5, 1.2) = 1.2 ; token 2: ratio 0.5, A=-1 -> max(-(-0.5), -(-0.8)) -> 0.8
    assert loss.item() == pytest.approx((-1.2 + 0.8) / 2)
    assert frac.item() == pytest.approx(1.0)


def test_policy_loss_ignores_unmasked_tokens():
    logp, old, adv = torch.randn(2, 5), torch.randn(2, 5), torch.randn(2, 5)
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 0, 1, 0]])
    changed = logp.clone()
    changed[mask == 0] += 10.0  # e.g. tool-result tokens scored differently
    assert policy_loss(logp, old, adv, mask)[0] == pytest.approx(
        policy_loss(changed, old, adv, mask)[0].item()
    )


def test_value_loss_and_kl_and_entropy():
    v, old, ret = torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    mask = torch.ones(1, 2)
    assert value_loss(v, old, ret, mask, clip=None).item() == pytest.approx(0.5 * (1 + 9) / 2)
    assert value_loss(v, old, ret, mask, clip=0.5).item() == pytest.approx(
        0.5 * (1 + 9) / 2
    )  # max keeps unclipped
    # the clip binds: values moved 1 from the old ones toward the returns, clipped to 0.5 of that
    # move, the clipped values are farther from the returns, and PPO2 takes the larger error
    ret = torch.tensor([[2.0, -2.0]])
    v = torch.tensor([[1.0, -1.0]])
    assert value_loss(v, old, ret, mask, clip=None).item() == pytest.approx(0.5 * 1.0)
    assert value_loss(v, old, ret, mask, clip=0.5).item() == pytest.approx(0.5 * 1.5**2)
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    r = math.log(0.25) - math.log(0.5)
    assert kl_to_reference(logp, ref, torch.ones(1, 1)).item() == pytest.approx(math.exp(r) - r - 1)
    assert kl_to_reference(logp, logp, torch.ones(1, 1)).item() == 0.0
    uniform = torch.zeros(1, 1, 4)
    assert entropy(uniform, torch.ones(1, 1)).item() == pytest.approx(math.log(4))


def test_kl_to_reference_cap_bounds_a_token_and_its_gradient():
    # a token the policy made e^20 times less likely than the reference: k3 = e^20 - 21
    logp = torch.tensor([[-21.0, math.log(0.5)]], requires_grad=True)
    ref = torch.tensor([[-1.0, math.log(0.25)]])
    mask = torch.ones(1, 2)
    r = math.log(0.25) - math.log(0.5)
    small = math.exp(r) - r - 1
    uncapped = kl_to_reference(logp, ref, mask)
    assert uncapped.item() == pytest.approx((math.exp(20) - 21 + small) / 2, rel=1e-5)
    capped = kl_to_reference(logp, ref, mask, max_token_kl=10.0)
    assert capped.item() == pytest.approx((10.0 + small) / 2, rel=1e-5)
    capped.backward()
    # the capped token gives no gradient; the other keeps k3's (1 - exp(r)) / n
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[0, 1].item() == pytest.approx((1 - math.exp(r)) / 2)
    # below the cap nothing changes, and an extreme ratio stays finite
    assert kl_to_reference(logp[:, 1:], ref[:, 1:], mask[:, 1:], 10.0).item() == pytest.approx(small)
    huge = kl_to_reference(torch.tensor([[-500.0]]), torch.tensor([[0.0]]), torch.ones(1, 1), 10.0)
    assert huge.item() == 10.0


def test_approx_kl_hand_computed():
    new = torch.tensor([[math.log(0.5), math.log(0.2)]])
    old = torch.tensor([[math.log(0.25), math.log(0.2)]])
    log_ratio = math.log(0.5) - math.log(0.25)
    expected = (math.exp(log_ratio) - 1 - log_ratio) / 2  # the second token did not move
    assert approx_kl(new, old, torch.ones(1, 2)).item() == pytest.approx(expected)
    assert approx_kl(new, old, torch.tensor([[0.0, 1.0]])).item() == 0.0
    assert approx_kl(new, old, torch.tensor([[1.0, 0.0]])).item() > 0


def test_group_advantages():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    torch.testing.assert_close(group_advantages(rewards, groups), torch.tensor([0.5, -0.5, 0.0, 0.0]))


def test_group_advantages_scaled_by_group_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    std = math.sqrt(3) / 4  # population std of (1, 0, 0, 0)
    expected = torch.tensor([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std, 0.0, 0.0])
    torch.testing.assert_close(group_advantages(rewards, groups, scale=True, eps=0.0)[:4], expected[:4])
    assert group_advantages(rewards, groups, scale=True)[4:].abs().max() == 0  # no signal stays no signal


def test_grounding_loss_is_the_masked_nll():
    logp = torch.tensor([[math.log(0.5), math.log(0.25), math.log(0.1)]])
    mask = torch.tensor([[0, 1, 1]])
    assert grounding_loss(logp, mask).item() == pytest.approx((math.log(4) + math.log(10)) / 2)


def test_weight_negative():
    adv = torch.tensor([[0.5, -0.5, 0.0, -2.0]])
    torch.testing.assert_close(weight_negative(adv, 0.25), torch.tensor([[0.5, -0.125, 0.0, -0.5]]))
    torch.testing.assert_close(weight_negative(adv, 1.0), adv)


def test_reductions_hand_computed():
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
    assert reduce_masked(x, mask, "token").item() == pytest.approx(8 / 5)  # the long row weighs 4x
    assert reduce_masked(x, mask, "sequence").item() == pytest.approx((1 + 4) / 2)  # empty row left out
    with pytest.raises(ValueError, match="reduction"):
        reduce_masked(x, mask, "sum")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.floats(-3, 3))
def test_sequence_reduction_of_a_constant_is_the_constant(lengths, c):
    mask = torch.zeros(len(lengths), 6)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    x = torch.full((len(lengths), 6), c)
    assert reduce_masked(x, mask, "sequence").item() == pytest.approx(c, abs=1e-5)
    assert reduce_masked(x, mask, "token").item() == pytest.approx(c, abs=1e-5)


def test_opd_gate_and_gradient():
    logp = torch.tensor([[math.log(0.2), math.log(0.6)]], requires_grad=True)
    skill = torch.tensor([[math.log(0.4), math.log(0.3)]])
    mask = torch.tensor([[1, 1]])
    loss = opd_loss(logp, skill, mask, beta=5.0)
    g = [
        1 / (1 + math.exp(-5 * (math.log(0.4) - math.log(0.2)))),
        1 / (1 + math.exp(-5 * (math.log(0.3) - math.log(0.6)))),
    ]
    expected = (g[0] * (math.log(0.4) - math.log(0.2)) + g[1] * (math.log(0.3) - math.log(0.6))) / 2
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    # the gradient raises logp most where the skill-conditioned teacher is more confident
    torch.testing.assert_close(logp.grad, torch.tensor([[-g[0] / 2, -g[1] / 2]]))


def test_masked_mean_empty_mask():
    assert masked_mean(torch.ones(3), torch.zeros(3)).item() == 0.0


def test_world_model_loss_is_the_token_mean_nll_of_the_marked_tokens():
    from rehearsal_gym.agents.losses import world_model_loss

    logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    mask = torch.tensor([[0, 1, 1], [1, 0, 0]])
    assert world_model_loss(logp, mask).item() == pytest.approx((2 + 3 + 4) / 3)
    assert world_model_loss(logp, torch.zeros_like(mask)).item() == 0.0
