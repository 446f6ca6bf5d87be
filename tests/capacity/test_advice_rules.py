"""Serving advice from live figures: each rule fires on the figures that support it, and only then."""
from capacity.advice import LiveSignals, Sample, Thresholds, advise, slope


def samples(*, serving=2, waiting=(0,) * 10, running=None, kv=None, every=10.0):
    running = running if running is not None else [4] * len(waiting)
    kv = kv if kv is not None else [0.5] * len(waiting)
    return [Sample(at=i * every, serving=serving, waiting=w, running=r, kv_cache_usage=k)
            for i, (w, r, k) in enumerate(zip(waiting, running, kv))]


def codes(signals: LiveSignals) -> list[str]:
    return [item.code for item in advise(signals)]


def test_a_healthy_busy_deployment_gets_no_advice():
    assert codes(LiveSignals(samples(), prefix_cache_hits=8_000, prefix_cache_queries=10_000)) == []


def test_a_low_hit_ratio_with_round_robin_routing_advises_prefix_affinity():
    found = advise(LiveSignals(samples(), prefix_cache_hits=1_000, prefix_cache_queries=20_000,
                               routing_policy="round_robin"))
    assert [a.code for a in found] == ["enable_prefix_affinity"]
    assert "5% of 20,000 prompt tokens" in found[0].detail and found[0].severity == "action"


def test_a_low_hit_ratio_already_routed_by_prefix_advises_restructuring_prompts():
    signals = LiveSignals(samples(), prefix_cache_hits=1_000, prefix_cache_queries=20_000)
    assert codes(signals) == ["restructure_prompts"]


def test_a_single_engine_cannot_be_helped_by_routing():
    signals = LiveSignals(samples(serving=1), prefix_cache_hits=0, prefix_cache_queries=50_000,
                          routing_policy="round_robin")
    assert codes(signals) == ["restructure_prompts"]


def test_prefix_caching_off_is_the_first_thing_to_fix():
    signals = LiveSignals(samples(), prefix_cache_hits=0, prefix_cache_queries=50_000, prefix_caching_enabled=False)
    assert codes(signals) == ["enable_prefix_caching"]


def test_too_few_lookups_say_nothing_about_the_cache():
    assert codes(LiveSignals(samples(), prefix_cache_hits=0, prefix_cache_queries=500)) == []


def test_a_full_kv_cache_and_a_growing_queue_advise_scaling_out():
    found = advise(LiveSignals(samples(waiting=[0, 1, 2, 4, 6, 8, 10, 12, 14, 16], kv=[0.95] * 10)))
    assert [a.code for a in found] == ["scale_out"]
    assert "95% full" in found[0].detail and "waiting/min" in found[0].detail


def test_a_growing_queue_with_room_in_the_cache_points_at_max_num_seqs():
    assert codes(LiveSignals(samples(waiting=[0, 2, 4, 6, 8, 10, 12, 14, 16, 18], kv=[0.3] * 10))) == [
        "raise_max_num_seqs"]


def test_a_full_cache_without_a_queue_is_information_only():
    assert codes(LiveSignals(samples(kv=[0.9] * 10))) == ["kv_nearly_full"]


def test_a_queue_that_shrinks_is_not_growing():
    assert codes(LiveSignals(samples(waiting=[16, 14, 12, 10, 8, 6, 4, 2, 1, 0], kv=[0.95] * 10))) == [
        "kv_nearly_full"]


def test_idle_replicas_advise_fewer():
    found = advise(LiveSignals(samples(serving=4, running=[0.4] * 10, kv=[0.02] * 10)))
    assert [a.code for a in found] == ["fewer_replicas"]
    assert "0.10 requests in flight per serving instance" in found[0].detail


def test_one_idle_replica_advises_a_smaller_model_or_gpu():
    assert codes(LiveSignals(samples(serving=1, running=[0.1] * 10, kv=[0.05] * 10))) == ["smaller_model"]


def test_nothing_is_judged_on_too_few_samples():
    assert codes(LiveSignals(samples(serving=4, waiting=(0, 0), running=[0, 0], kv=[0.0, 0.0]))) == []


def test_urgent_advice_comes_first():
    signals = LiveSignals(samples(serving=4, running=[0.1] * 10, kv=[0.02] * 10), prefix_cache_hits=0,
                          prefix_cache_queries=50_000, routing_policy="least_outstanding")
    assert codes(signals) == ["enable_prefix_affinity", "fewer_replicas"]


def test_thresholds_are_parameters():
    signals = LiveSignals(samples(), prefix_cache_hits=4_000, prefix_cache_queries=10_000)
    assert codes(signals) == []
    assert advise(signals, Thresholds(low_hit_ratio=0.5))[0].code == "restructure_prompts"


def test_the_queue_trend_is_per_minute():
    assert slope(samples(waiting=[0, 1, 2, 3], every=30.0)) == 2.0
    assert slope(samples(waiting=[5, 5, 5])) == 0.0
