"""The consistent verifier: the oracle's expectation re-planned in the world the agent saw."""

import dataclasses

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rehearsal_gym.core.protocol import ToolCall, format_answer, format_call
from rehearsal_gym.rehearsal.consistency import (
    align,
    consistent_answer,
    in_request,
    premise_breaks,
    replan,
    substitute,
    value_key,
)
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

CHAIN_REQUEST = "Add 87 and 90, multiply the sum by 5, then take 6% of that."
CHAIN = [
    (ToolCall("add", {"a": 87, "b": 90}), {"result": 177}),
    (ToolCall("multiply", {"a": 177, "b": 5}), {"result": 885}),
    (ToolCall("percent_of", {"percent": 6, "value": 885}), {"result": 53.1}),
]


def test_chain_follows_the_shown_values():
    seen = [
        (ToolCall("add", {"a": 87, "b": 90}), {"result": 150}),
        (ToolCall("multiply", {"a": 150, "b": 5}), {"result": 700}),
        (ToolCall("percent_of", {"percent": 6, "value": 700}), {"result": 42}),
    ]
    calls, mapping = replan(CHAIN, seen, CHAIN_REQUEST)
    assert [c.arguments for c in calls] == [
        {"a": 87, "b": 90},
        {"a": 150, "b": 5},
        {"percent": 6, "value": 700},
    ]
    assert consistent_answer("number", "", "53.1", mapping) == ("", "42")


def test_agent_that_skipped_a_replanned_call_keeps_the_real_expectation():
    seen = [
        (ToolCall("add", {"a": 87, "b": 90}), {"result": 150}),
        (ToolCall("multiply", {"a": 177, "b": 5}), {"result": 885}),  # used the real sum, not the shown one
    ]
    assert replan(CHAIN, seen, CHAIN_REQUEST) is None


def test_values_written_in_the_request_never_follow_a_result():
    # the real sum equals a number of the request: it must not be remapped
    oracle = [
        (ToolCall("add", {"a": 2, "b": 3}), {"result": 5}),
        (ToolCall("multiply", {"a": 5, "b": 5}), {"result": 25}),
    ]
    seen = [
        (ToolCall("add", {"a": 2, "b": 3}), {"result": 7}),
        (ToolCall("multiply", {"a": 5, "b": 5}), {"result": 26}),
    ]
    calls, mapping = replan(oracle, seen, "Add 2 and 3, then multiply by 5.")
    assert calls[1].arguments == {"a": 5, "b": 5}
    assert consistent_answer("number", "", "25", mapping) == ("", "26")


def test_keyword_answers_and_nested_results():
    oracle = [
        (
            ToolCall("get_order", {"order_id": "O1"}),
            {"order_id": "O1", "status": "processing", "items": [{"price": 49}]},
        )
    ]
    seen = [
        (
            ToolCall("get_order", {"order_id": "O1"}),
            {"order_id": "O1", "status": "pending", "items": [{"price": 12}]},
        )
    ]
    _, mapping = replan(oracle, seen, "What is the status of order O1?")
    assert consistent_answer("keyword", "processing", "Order O1 is processing.", mapping)[0] == "pending"
    assert consistent_answer("number", "", "49", mapping) == ("", "12")
    assert consistent_answer("any", "", "ok", mapping) == ("", "ok")


SELL_REQUEST = "Sell all shares of CRUX in account A512."
SELL_ORACLE = [
    (
        ToolCall("get_account", {"account_id": "A512"}),
        {
            "account_id": "A512",
            "cash": 100.0,
            "holdings": [{"symbol": "BOLT", "qty": 50}, {"symbol": "CRUX", "qty": 39}],
        },
    ),
    (ToolCall("place_order", {"account_id": "A512", "symbol": "CRUX", "side": "sell", "qty": 39}), {}),
]


def _sell_seen(holdings, qty):
    return [
        (SELL_ORACLE[0][0], {"account_id": "A512", "cash": 7.5, "holdings": holdings}),
        (ToolCall("place_order", {"account_id": "A512", "symbol": "CRUX", "side": "sell", "qty": qty}), {}),
    ]


def test_the_record_the_request_names_lines_up_wherever_it_stands():
    # the shown account lists CRUX first and alone: its quantity is the one to sell
    seen = _sell_seen([{"symbol": "CRUX", "qty": 58}], 58)
    calls, mapping = replan(SELL_ORACLE, seen, SELL_REQUEST)
    assert calls[1].arguments["qty"] == 58
    assert value_key(50) not in mapping  # BOLT is not shown: its real quantity maps to nothing
    # the shown account lists the same symbols in another order
    seen = _sell_seen([{"symbol": "CRUX", "qty": 12}, {"symbol": "BOLT", "qty": 7}], 12)
    calls, mapping = replan(SELL_ORACLE, seen, SELL_REQUEST)
    assert calls[1].arguments["qty"] == 12
    # BOLT is not named in the request: it lines up by position, and position 0 went to CRUX
    assert value_key(50) not in mapping


def test_a_shown_account_without_the_symbol_never_rewards_another_holdings_quantity():
    # matched by position, the shown ACME quantity (49) stood in for the real CRUX one (39), so
    # selling the first holding's quantity passed; now no shown CRUX means the real 39 stands
    oracle = [
        (
            SELL_ORACLE[0][0],
            {"account_id": "A512", "cash": 100.0, "holdings": [{"symbol": "CRUX", "qty": 39}]},
        ),
        SELL_ORACLE[1],
    ]
    seen = _sell_seen([{"symbol": "ACME", "qty": 49}, {"symbol": "DYNA", "qty": 48}], 49)
    assert align(oracle[0][1], seen[0][1], SELL_REQUEST)["holdings"] == {}
    assert replan(oracle, seen, SELL_REQUEST) is None  # re-planned: sell the real 39, not 49


def test_records_the_request_does_not_name_line_up_by_position():
    oracle = [(ToolCall("t", {}), {"rows": [{"k": "x", "v": 1}, {"k": "y", "v": 2}], "xs": [3, 4]})]
    seen = [(ToolCall("t", {}), {"rows": [{"k": "y", "v": 5}, {"k": "z", "v": 6}], "xs": [7, 8]})]
    _, mapping = replan(oracle, seen, "request")
    assert [mapping[value_key(v)] for v in (1, 2, 3, 4)] == [5, 6, 7, 8]


def test_a_named_product_finds_its_item_and_the_rest_keep_their_places():
    oracle = [
        (
            ToolCall("get_order", {"order_id": "O7"}),
            {
                "items": [
                    {"item_id": "I71", "product": "lamp", "price": 20},
                    {"item_id": "I72", "product": "desk", "price": 99},
                ]
            },
        ),
        (ToolCall("refund_item", {"order_id": "O7", "item_id": "I71"}), {}),
    ]
    shown = {
        "items": [
            {"item_id": "I9", "product": "desk", "price": 5},
            {"item_id": "I8", "product": "lamp", "price": 6},
        ]
    }
    seen = [(oracle[0][0], shown), (ToolCall("refund_item", {"order_id": "O7", "item_id": "I8"}), {})]
    calls, mapping = replan(oracle, seen, "I want a refund for the lamp in order O7.")
    assert calls[1].arguments == {"order_id": "O7", "item_id": "I8"}
    assert consistent_answer("number", "", "20", mapping) == ("", "6")
    assert value_key(99) not in mapping  # the desk's position (0) went to the lamp


scalars = st.one_of(
    st.integers(-10_000, 10_000),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
results = st.dictionaries(
    st.sampled_from("abcde"), st.one_of(scalars, st.lists(scalars, max_size=3)), max_size=4
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from("xyz"), scalars, max_size=3), results), max_size=4))
def test_the_real_world_maps_to_itself(trace):
    """Shown results equal to the real ones: the re-planned calls and answers are the real ones."""
    oracle = [(ToolCall(f"tool{i}", args), result) for i, (args, result) in enumerate(trace)]
    calls, mapping = replan(oracle, oracle, "request")
    assert calls == [c for c, _ in oracle]
    assert all(value_key(shown) == key for key, shown in mapping.items())
    for _, result in oracle:
        assert substitute(result, mapping) == result


def _task_index(env_id: str, template: str) -> int:
    family = gym.make(env_id).unwrapped.family
    return next(i for i in range(500) if family.task("train", i).template == template)


@pytest.mark.parametrize("verifier", ["real", "consistent"])
def test_selfsim_scores_the_shown_price(tiny_lm, verifier):
    env = SelfSimEnv("Finance-v0", model=tiny_lm, verifier=verifier, split="train", bank_tasks=4)
    index = _task_index("Finance-v0", "price")
    task = env.family.task("train", index)
    ((call, real),) = env.family.oracle_trace(task)
    shown = {**real, "close": round(real["close"] + 11.0, 2)}
    history = [(format_call(call.name, call.arguments), json_text(shown))]
    for answer, want in ((shown["close"], verifier == "consistent"), (real["close"], verifier == "real")):
        env.reset(options={"task": task, "history": history})
        _, reward, terminated, _, info = env.step(format_answer(str(answer)))
        assert terminated and info["success"] is want and reward == float(want)
        assert info["expected_answer"] == str(shown["close"] if verifier == "consistent" else real["close"])
        if verifier == "consistent":  # what the real verifier says is reported alongside
            assert info["real_verifier_success"] is (answer == real["close"])
        else:
            assert "real_verifier_success" not in info


def test_selfsim_consistent_chain_and_wrong_arguments(tiny_lm):
    env = SelfSimEnv("ToolCall-v0", model=tiny_lm, verifier="consistent", split="train", bank_tasks=4)
    task = env.family.task("train", _task_index("ToolCall-v0", "chain"))
    trace = env.family.oracle_trace(task)
    history, shown_for = [], {}  # real result -> the (different) result the agent is shown
    for call, real in trace:  # an agent that follows the oracle's plan on the values it is shown
        args = {k: shown_for.get(v, v) for k, v in call.arguments.items()}
        value = shown_for[real["result"]] = real["result"] + 1
        history.append((format_call(call.name, args), json_text({"result": value})))
    env.reset(options={"task": task, "history": history})
    assert env.step(format_answer(str(value)))[4]["success"] is True
    # the same shown results, but the first call had a wrong argument: no credit
    bad = [(history[0][0].replace(str(trace[0][0].arguments["a"]), "1", 1), history[0][1]), *history[1:]]
    env.reset(options={"task": task, "history": bad})
    assert env.step(format_answer(str(value)))[4]["success"] is False


def _sell_all_task(holdings: int):
    """A train sell_all task whose account holds `holdings` symbols, the requested one not first."""
    from rehearsal_gym.envs.finance import FinanceFamily

    family = FinanceFamily()
    for i in range(2000):
        task = family.task("train", i)
        if task.template == "sell_all":
            ((_, account), _) = family.oracle_trace(task)
            symbols = [h["symbol"] for h in account["holdings"]]
            if len(symbols) == holdings and symbols[0] != task.params["symbol"]:
                return task, account
    raise AssertionError("no such task")


@pytest.mark.parametrize(
    ("shown", "order", "want"),
    [
        ("requested-first", "shown", True),  # the shown quantity of the requested symbol, listed first
        ("requested-first", "real", False),
        ("requested-first", "other-symbol", False),  # a wrong symbol never passes, rejected or not
        ("requested-first", "too-many", False),  # more than the shown holding: rejected in the shown world
        ("requested-missing", "first-shown", False),  # another holding's quantity
        # a shown account without the symbol defines no quantity: the real expectation stands
        ("requested-missing", "real", True),
    ],
)
def test_selfsim_scores_a_sell_all_in_the_account_it_showed(tiny_lm, shown, order, want):
    env = SelfSimEnv("Finance-v0", model=tiny_lm, verifier="consistent", split="train", bank_tasks=4)
    task, real = _sell_all_task(holdings=2)
    symbol = task.params["symbol"]
    other = next(h for h in real["holdings"] if h["symbol"] != symbol)
    real_qty = next(h["qty"] for h in real["holdings"] if h["symbol"] == symbol)
    shown_qty = real_qty + 7
    holdings = (
        [{"symbol": symbol, "qty": shown_qty}, {"symbol": other["symbol"], "qty": 3}]
        if shown == "requested-first"
        else [{"symbol": other["symbol"], "qty": shown_qty}]
    )
    account = {**real, "holdings": holdings}
    qty = {"shown": shown_qty, "real": real_qty, "other-symbol": shown_qty, "too-many": shown_qty + 1}
    qty["first-shown"] = shown_qty
    sell = {
        "account_id": task.params["account_id"],
        "symbol": other["symbol"] if order in ("other-symbol", "first-shown") else symbol,
        "side": "sell",
        "qty": qty[order],
    }
    history = [
        (format_call("get_account", {"account_id": task.params["account_id"]}), json_text(account)),
        (format_call("place_order", sell), json_text({"status": "filled", **sell})),
    ]
    env.reset(options={"task": task, "history": history})
    info = env.step(format_answer("Done."))[4]
    assert info["success"] is want
    assert info["real_verifier_success"] is (order == "real")  # the real book holds real_qty of it


def test_verifier_is_validated(tiny_lm):
    with pytest.raises(ValueError, match="verifier"):
        SelfSimEnv("Finance-v0", model=tiny_lm, verifier="lenient", bank_tasks=2)


def json_text(value) -> str:
    import json

    return json.dumps(value)


def test_trainer_envs_use_the_configured_verifier(tiny_lm):
    from rehearsal_gym.agents import PPOConfig
    from rehearsal_gym.agents.train_envs import make_train_envs

    with pytest.raises(ValueError, match="rehearsal_verifier"):
        PPOConfig.from_flat(rehearse="replace", rehearsal_verifier="lenient")
    config = PPOConfig.from_flat(
        env="Finance-v0", rehearse="replace", rehearsal_verifier="consistent", premise_redraws=2
    )
    (env,) = make_train_envs(config, tiny_lm, 1)
    assert env.verifier == "consistent" and env.mode == "replace" and env.premise_redraws == 2


def _retail_task(template: str, status: str):
    from rehearsal_gym.envs.retail import RetailFamily

    family = RetailFamily()
    for i in range(2000):
        task = family.task("train", i)
        if (
            task.template == template
            and family.make_backend(task).query(
                "SELECT status FROM orders WHERE id = ?", (task.params["order_id"],)
            )[0][0]
            == status
        ):
            return family, task
    raise AssertionError(f"no {template} task on a {status} order")


def _shown_order(family, task, status: str) -> list:
    ((call, real),) = family.oracle_trace(dataclasses.replace(task, template="status"))
    return [(call, {**real, "status": status})]


def test_retail_shown_task_takes_the_shown_status_and_its_decision():
    family, task = _retail_task("cancel", "shipped")
    assert (task.answer_kind, task.answer_key) == ("keyword", "shipped")
    shown = family.shown_task(task, _shown_order(family, task, "pending"))
    assert shown.facts == {"status": {task.params["order_id"]: "pending"}}
    assert (shown.answer_kind, shown.answer_key) == ("any", "")
    assert [c.name for c, _ in family.oracle_trace(shown)] == ["get_order", "cancel_order"]
    assert [c.name for c, _ in family.oracle_trace(task)] == ["get_order"]
    # the real results change nothing; unknown statuses, other orders and other templates are ignored
    assert family.shown_task(task, family.oracle_trace(task)).answer_key == "shipped"
    assert family.shown_task(task, _shown_order(family, task, "lost in space")) is task
    other = [(ToolCall("get_order", {"order_id": "O1"}), {"status": "pending"})]
    assert family.shown_task(task, other) is task
    by_email = next(
        family.task("train", i) for i in range(500) if family.task("train", i).template == "cancel_by_email"
    )
    assert family.shown_task(by_email, _shown_order(family, by_email, "shipped")) is by_email


def test_retail_backend_status_overrides_are_bound_parameters():
    from rehearsal_gym.envs.retail import RetailDB

    family, task = _retail_task("cancel", "shipped")
    oid = task.params["order_id"]
    hostile = {
        oid: "pending",
        "x'); DROP TABLE orders; --": "pending",
        "O1": "pending'; --",
        7: "pending",
        oid + "x": ["pending"],
    }
    db = RetailDB(task.world_seed, hostile)
    assert db.query("SELECT status FROM orders WHERE id = ?", (oid,)) == [("pending",)]
    generated = family.make_backend(task).state()
    patched = {k: [row for row in rows if row[0] != oid] for k, rows in db.state().items()}
    assert patched == {k: [row for row in rows if row[0] != oid] for k, rows in generated.items()}
    assert len(db.state()["orders"]) == len(generated["orders"])  # nothing else changed or dropped


@pytest.mark.parametrize(
    ("real", "shown", "cancel_wins"), [("shipped", "pending", True), ("pending", "delivered", False)]
)
def test_selfsim_consistent_retail_follows_the_shown_decision(tiny_lm, real, shown, cancel_wins):
    """An agent shown a status that allows (forbids) the write must write (refuse naming it)."""
    env = SelfSimEnv("Retail-v0", model=tiny_lm, verifier="consistent", split="train", bank_tasks=4)
    family, task = _retail_task("cancel", real)
    ((get_order, result),) = _shown_order(family, task, shown)
    oid, reason = task.params["order_id"], task.params["reason"]
    looked = [(format_call(get_order.name, get_order.arguments), json_text(result))]
    cancelled = looked + [
        (
            format_call("cancel_order", {"order_id": oid, "reason": reason}),
            json_text({"order_id": oid, "status": "cancelled"}),
        )
    ]
    outcomes = {}
    for name, history, answer in (
        ("cancel", cancelled, f"Order {oid} is cancelled."),
        ("refuse", looked, f"Sorry, order {oid} is {shown}, so I cannot do that."),
        ("refuse naming the real status", looked, f"Sorry, order {oid} is {real}, so I cannot do that."),
    ):
        env.reset(options={"task": task, "history": history})
        info = env.step(format_answer(answer))[4]
        outcomes[name] = (info["success"], info["real_verifier_success"])
    assert outcomes["cancel"] == (cancel_wins, real == "pending")
    assert outcomes["refuse"][0] is not cancel_wins
    assert outcomes["refuse naming the real status"][0] is False


@pytest.mark.parametrize("affordable", [True, False])
def test_selfsim_consistent_finance_buy_reports_the_shown_outcome(tiny_lm, affordable):
    env = SelfSimEnv("Finance-v0", model=tiny_lm, verifier="consistent", split="train", bank_tasks=4)
    family = env.family
    task = next(
        t
        for t in (family.task("train", i) for i in range(2000))
        if t.template == "buy" and (t.answer_kind == "any") is affordable
    )
    ((call, real),) = family.oracle_trace(task)
    p = task.params
    if affordable:  # the world the agent saw rejects the order
        shown = {"error": f"insufficient cash: {p['qty']} {p['symbol']} cost 1e9, cash is 3.0"}
    else:
        shown = {
            "status": "filled",
            "side": "buy",
            "symbol": p["symbol"],
            "qty": p["qty"],
            "price": 1.0,
            "cash": 5.0,
        }
    assert ("error" in real) is not affordable and ("error" in shown) is affordable
    history = [(format_call(call.name, call.arguments), json_text(shown))]
    verdicts = {}
    for answer in ("The order was rejected: insufficient cash.", f"Bought {p['qty']} {p['symbol']}."):
        env.reset(options={"task": task, "history": history})
        verdicts[answer.split()[0]] = env.step(format_answer(answer))[4]["success"]
    # a rejection shown must be reported; a fill shown needs no report (either answer passes the state check)
    assert verdicts == ({"The": True, "Bought": False} if affordable else {"The": True, "Bought": True})
    assert family.shown_task(task, family.oracle_trace(task)) == task  # the real outcome changes nothing


def test_premise_breaks_names_the_requested_record_a_shown_result_lacks_or_repeats():
    real = SELL_ORACLE[0][1]
    account = {"account_id": "A512", "cash": 7.5}
    # CRUX shown anywhere keeps the premise; BOLT (not named in the request) may be missing
    assert premise_breaks(real, {**account, "holdings": [{"symbol": "CRUX", "qty": 3}]}, SELL_REQUEST) == []
    both = [{"symbol": "BOLT", "qty": 1}, {"symbol": "CRUX", "qty": 2}]
    assert premise_breaks(real, {**account, "holdings": both[::-1]}, SELL_REQUEST) == []
    # no CRUX, no holdings list at all, or a refusal: the account the user sells from is not theirs
    assert premise_breaks(real, {**account, "holdings": both[:1]}, SELL_REQUEST) == ["CRUX"]
    assert premise_breaks(real, account, SELL_REQUEST) == ["CRUX"]
    assert premise_breaks(real, {"error": "unknown account"}, SELL_REQUEST) == ["CRUX"]
    # CRUX listed twice: which quantity the user holds is undefined
    twice = [{"symbol": "CRUX", "qty": 1}, {"symbol": "crux", "qty": 2}]
    assert premise_breaks(real, {**account, "holdings": twice}, SELL_REQUEST) == ["CRUX"]
    # results with no record the request names never drop anything
    assert premise_breaks(SELL_ORACLE[1][1], {}, SELL_REQUEST) == []
    assert premise_breaks({"rows": [{"k": "x"}]}, {"rows": []}, "request") == []


def _scripted_world(env, texts):
    """Make `env`'s environment role write `texts` in order, one per draw; returns the draw log."""
    from rehearsal_gym.core.sampling import Samples

    drawn = []

    def sample_role(plans):
        out = []
        for _, seed, count in plans:
            drawn.append(seed)
            ids = env.lm.encode(texts[len(drawn) - 1]) + [env.lm.end_id]
            out.append(Samples([ids] * count, [[0.0] * len(ids)] * count, [True] * count))
        return out

    env.sample_role = sample_role
    return drawn


@pytest.mark.parametrize("redraws", [0, 1, 3])
def test_selfsim_draws_an_account_again_until_it_holds_the_requested_symbol(tiny_lm, redraws):
    task, real = _sell_all_task(holdings=2)
    symbol = task.params["symbol"]
    other = next(h["symbol"] for h in real["holdings"] if h["symbol"] != symbol)
    without = {**real, "holdings": [{"symbol": other, "qty": 5}]}
    with_it = {**real, "holdings": [{"symbol": symbol, "qty": 9}]}
    texts = [json_text(without), json_text(without), json_text(with_it)]
    env = SelfSimEnv(
        "Finance-v0", model=tiny_lm, verifier="consistent", split="train", bank_tasks=4,
        premise_redraws=redraws,
    )  # fmt: skip
    drawn = _scripted_world(env, texts)
    env.reset(options={"task": task, "world_seed": 3})
    _, _, terminated, _, info = env.step(
        format_call("get_account", {"account_id": task.params["account_id"]})
    )
    assert not terminated
    kept = redraws >= 2  # the third draw is the first that holds the symbol
    assert env.seen[-1][1] == (with_it if kept else without)
    assert len(drawn) == 1 + min(redraws, 2) and len(set(drawn)) == len(drawn)  # a new seed each draw
    if redraws:
        assert info["premise_redraws"] == min(redraws, 2) and info["premise_kept"] is kept
    else:
        assert "premise_redraws" not in info
    # the same world seed draws the same seeds again: the redraws are part of the world
    first = list(drawn)
    drawn.clear()
    env.reset(options={"task": task, "world_seed": 3})
    env.step(format_call("get_account", {"account_id": task.params["account_id"]}))
    assert drawn == first and env.seen[-1][1] == (with_it if kept else without)


def test_world_temperature_samples_the_untrained_environment_role(tiny_lm):
    from rehearsal_gym.agents import PPOConfig
    from rehearsal_gym.agents.train_envs import make_train_envs

    frozen = dict(rehearse="replace", rehearsal_world="frozen", train_env_role=False, temperature=0.7)
    (env,) = make_train_envs(PPOConfig.from_flat(**frozen), tiny_lm, 1)
    assert env.temperature == 0.7  # 0 (default): the agent's temperature
    (env,) = make_train_envs(PPOConfig.from_flat(**frozen, world_temperature=0.1), tiny_lm, 1)
    assert env.temperature == 0.1
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="world_temperature"):
            PPOConfig.from_flat(**frozen, world_temperature=bad)
    # a trained environment role must be sampled at the temperature its log-probs are taken at
    with pytest.raises(ValueError, match="world_temperature.*no-train-env-role"):
        PPOConfig.from_flat(rehearse="replace", world_temperature=0.1)
    PPOConfig.from_flat(world_temperature=0.1)  # real env: no environment role, nothing to check


def test_premise_redraws_is_validated(tiny_lm):
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="premise_redraws"):
            SelfSimEnv("Finance-v0", model=tiny_lm, bank_tasks=2, premise_redraws=bad)
    from rehearsal_gym.agents import PPOConfig

    with pytest.raises(ValueError, match="premise_redraws"):
        PPOConfig.from_flat(premise_redraws=-1)


def test_a_value_is_in_the_request_only_as_a_whole_token():
    assert in_request("O123", "Please cancel order O123.") and in_request("o123", "cancel O123")
    assert not in_request("O12", "Please cancel order O123.")  # an id inside a longer id
    assert not in_request("pen", "cancel my pending order") and in_request("pending", "my pending order")
    assert in_request("iris.tanaka@mail.com", "my email is iris.tanaka@mail.com. Please")
    assert in_request("91 pine ave", "ship order O2058 to 91 pine ave instead.")
    assert not in_request("a.b", "axb")  # the value is text, not a pattern
    assert in_request(87, CHAIN_REQUEST) and not in_request(8, CHAIN_REQUEST)
    # a holding whose symbol is only part of the requested one is not the requested record
    real = {"holdings": [{"symbol": "CRU", "qty": 1}, {"symbol": "CRUX", "qty": 2}]}
    assert premise_breaks(real, {"holdings": [{"symbol": "CRUX", "qty": 5}]}, SELL_REQUEST) == []
