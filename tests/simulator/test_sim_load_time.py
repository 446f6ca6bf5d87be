"""`--load-seconds`: a modeled model load, so cold starts cost time in autoscaling benchmarks as real ones do."""
import pytest

from fleet.runtime.simulator import simulator_flags
from fleet.validation import simulator_params_problem
from simulator.__main__ import parse_config
from simulator.config import SimulatorConfig


def test_the_flag_sets_the_load_time_and_a_negative_one_is_refused():
    assert parse_config(["--load-seconds", "1.5"]).load_seconds == 1.5
    assert parse_config([]).load_seconds == 0
    with pytest.raises(ValueError):
        SimulatorConfig(load_seconds=-1)


def test_a_deployment_may_ask_its_simulators_for_a_load_time():
    assert simulator_params_problem({"load_seconds": 3}) is None
    assert simulator_flags({"load_seconds": 3}) == ["--load-seconds", "3"]
    assert simulator_params_problem({"load_seconds": -3}) is not None
