import importlib.util
from pathlib import Path

from rehearsal_gym.envs.finance import FinanceEnv

from rehearsal_gym.protocol import format_call


def _script():
    path = Path(__file__).parents[1] / "benchmarks" / "sell_all_errors.py"
    spec = importlib.util.spec_from_file_location("sell_all_errors", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sell_all_orders_are_classified_against_the_oracles():
    script = _script()
    family = FinanceEnv.family
    tasks = script.sell_all_tasks(0, 60)
    assert tasks and all(0 <= pos < held for _, held, pos in tasks)
    index = tasks[0][0]
    task = family.task("test", index)
    assert task.template == "sell_all"
    calls, _ = family.oracle_plan(task)
    order = dict(calls[-1].arguments)
    look = format_call("get_account", {"account_id": order["account_id"]})
    assert script.kind([look, format_call("place_order", order)], calls[-1]) == "ok"
    wrong_qty = {**order, "qty": order["qty"] + 1}
    wrong_sym = {**order, "symbol": "ZZZZ"}
    assert script.kind([format_call("place_order", wrong_qty)], calls[-1]) == "quantity"
    assert script.kind([format_call("place_order", wrong_sym)], calls[-1]) == "ticker"
    assert (
        script.kind([format_call("place_order", {**wrong_sym, "qty": order["qty"] + 1})], calls[-1]) == "both"
    )
    assert script.kind([look, "ANSWER done", "CALL place_order {not json"], calls[-1]) == "no order"
    assert script.first_order([look, format_call("place_order", wrong_sym)]).arguments["symbol"] == "ZZZZ"
    assert script.first_order([look, "ANSWER done"]) is None
