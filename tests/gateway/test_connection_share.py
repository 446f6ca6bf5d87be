"""Workers keep an even share of connections: the fuller one sheds, one connection at a time."""
from gateway.server.connection_share import SLACK, ConnectionShare, create_table


def test_a_worker_above_its_share_sheds_until_it_is_back_within_it(tmp_path):
    table = str(tmp_path / "connections")
    create_table(table, 2)
    full, light = ConnectionShare(table, 0, 2), ConnectionShare(table, 1, 2)
    for _ in range(20):
        full.opened()
    for _ in range(12):
        light.opened()
    assert not light.should_shed()
    shed = 0
    while full.should_shed():  # each True closes one connection after its response
        shed += 1
    # Shed connections count as gone at once (their clients reconnect later, hashed afresh), so
    # the share is recomputed as it goes: 15 is within ceil((15 + 12) / 2) + SLACK.
    assert (full.open, shed) == (15, 5) and full.open <= -(-(full.open + 12) // 2) + SLACK
    full.closed(was_shed=True)  # a shed connection is not counted twice when it closes
    assert full.open == 15


def test_a_restarted_worker_starts_from_zero_and_others_see_it(tmp_path):
    table = str(tmp_path / "connections")
    create_table(table, 2)
    first = ConnectionShare(table, 0, 2)
    for _ in range(30):
        first.opened()
    assert first.should_shed()  # 30 of 30 is far above 15 + slack
    replaced = ConnectionShare(table, 1, 2)
    replaced.opened()
    replaced.closed(was_shed=False)
    assert replaced.open == 0 and not replaced.should_shed()
