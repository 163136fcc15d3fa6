from rehearsal_gym.rehearsal.demos import Demo, record_oracle_episodes
from rehearsal_gym.rehearsal.recall import copied_values, recall_counts


def _values(demo: Demo) -> list[tuple[str, str]]:
    return [(demo.transcript[j][1][a:b], source) for j, a, b, source in copied_values(demo)]


def test_copied_values_split_by_where_the_value_was_shown():
    demo = Demo(
        "Retail-v0",
        "t",
        {},
        [
            ("task", "Tools:\nget_order(order_id: string) - order details\nRequest: Status of order O2184?"),
            ("agent", 'CALL get_order {"order_id": "O2184"}'),
            ("env", '{"order_id": "O2184", "status": "pending", "items": [{"item_id": "I77", "price": 95}]}'),
            ("agent", "ANSWER Order O2184 is pending, item I77 costs 95."),
        ],
        [],
        "status",
    )
    assert _values(demo) == [
        ("O2184", "request"),  # shown in the request (and in the result: the request wins)
        ("O2184", "request"),
        ("pending", "result"),  # shown only in get_order's result
        ("I77", "result"),
        ("95", "result"),  # the sentence's full stop is not part of the value
    ]
    # keys of a result ("status", "items") and the agent's own words ("Order", "costs") are not values
    demo.transcript[-1] = ("agent", "ANSWER The status: items cost money.")
    assert _values(demo)[2:] == []


def test_copied_values_of_real_transcripts():
    retail = record_oracle_episodes("Retail-v0", range(40), split="test")
    status = next(d for d in retail if d.template == "status")
    values = _values(status)
    answer_status = status.transcript[-1][1].split(" is ")[1].rstrip(".")
    assert (answer_status, "result") in values and values[0][1] == "request"
    finance = record_oracle_episodes("Finance-v0", range(40), split="test")
    sell = next(d for d in finance if d.template == "sell_all")
    qty = str(sell.call_turns[1][1].arguments["qty"])
    assert (qty, "result") in _values(sell)  # the quantity held is looked up in get_account's result
    assert all(d.template for d in retail + finance)


def test_recall_counts_right_only_when_every_value_token_is_greedy(tiny_lm, shifted_oracle):
    demos = record_oracle_episodes("Retail-v0", range(8), split="test")

    def probe(model):
        return recall_counts(tiny_lm.with_model(model), demos)

    perfect, stuck = probe(shifted_oracle(1)), probe(shifted_oracle(0))
    assert perfect.keys() == stuck.keys() and {source for _, source in perfect} == {"request", "result"}
    assert all(right == n > 0 for right, n in perfect.values())
    assert all(right == 0 and n > 0 for right, n in stuck.values())
    was_training = tiny_lm.model.training
    counts = recall_counts(tiny_lm, demos)  # a real model: counts bounded, train/eval mode restored
    assert all(0 <= right <= n for right, n in counts.values()) and tiny_lm.model.training == was_training
