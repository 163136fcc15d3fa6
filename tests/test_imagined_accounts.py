import importlib.util
from collections import Counter
from pathlib import Path

from rehearsal_gym.protocol import ToolCall


def _script():
    path = Path(__file__).parents[1] / "benchmarks" / "imagined_accounts.py"
    spec = importlib.util.spec_from_file_location("imagined_accounts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOOK = ToolCall("get_account", {"account_id": "A1"})


def _sell(symbol, qty):
    return ToolCall("place_order", {"account_id": "A1", "symbol": symbol, "side": "sell", "qty": qty})


def test_an_episode_is_tallied_against_the_account_it_was_shown():
    script = _script()
    real = {"BOLT": 50, "CRUX": 39}
    shown = {"account_id": "A1", "cash": 1.0, "holdings": [{"symbol": "CRUX", "qty": 58}]}
    c = script.tally("CRUX", real, [(LOOK, shown), (_sell("CRUX", 58), {})], True, False)
    assert c == Counter(
        {
            "episodes": 1,
            "consistent success": 1,
            "account shown": 1,
            "symbol shown": 1,
            "right symbol": 1,
            "shown qty sold": 1,
            "several real": 1,
        }
    )
    # the same symbols as the real account; another holding's quantity sold
    shown = {"holdings": [{"symbol": "BOLT", "qty": 3}, {"symbol": "CRUX", "qty": 4}]}
    c = script.tally("CRUX", real, [(LOOK, shown), (_sell("CRUX", 3), {})], False, False)
    assert c["same symbols"] == 1 and c["right symbol"] == 1 and c["shown qty sold"] == 0
    assert c["several shown"] == c["several real"] == 1  # CRUX second in both
    assert c["symbol first shown"] == c["symbol first real"] == 0
    shown = {"holdings": [{"symbol": "CRUX", "qty": 4}, {"symbol": "ACME", "qty": 1}]}
    c = script.tally("CRUX", {"CRUX": 39, "DYNA": 2}, [(LOOK, shown)], False, False)
    assert c["symbol first shown"] == c["symbol first real"] == 1
    # the symbol not shown, a wrong one sold; no account and no order
    shown = {"holdings": [{"symbol": "ACME", "qty": 9}]}
    c = script.tally("CRUX", real, [(LOOK, shown), (_sell("ACME", 9), {})], False, False)
    assert c["symbol shown"] == 0 and c["right symbol"] == 0 and c["shown qty sold"] == 0
    assert script.tally("CRUX", real, [], False, False) == Counter({"episodes": 1, "several real": 1})
    # the symbol listed twice
    shown = {"holdings": [{"symbol": "CRUX", "qty": 9}, {"symbol": "CRUX", "qty": 4}]}
    c = script.tally("CRUX", real, [(LOOK, shown)], False, False)
    assert c["symbol shown"] == 1 and c["symbol twice"] == 1


def test_unreadable_shown_holdings_count_as_none():
    script = _script()
    for account in (None, {}, {"holdings": "lots"}, {"holdings": [1, {"qty": 2}, {"symbol": 5}]}):
        assert script.shown_holdings(account) == {}
