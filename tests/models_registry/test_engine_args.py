"""The engine-arg allow-list: typos and wrong types fail at registration, not as a crash-looping engine."""
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from models_registry.engine_args import (
    ENGINE_FLAGS,
    REFUSED_FLAGS,
    Kind,
    flag_name,
    render_vllm_argv,
    validate_engine_args,
)
from models_registry.models import Model, ModelFamily, ModelVersion

HELP_SNAPSHOT = Path(__file__).with_name("vllm_0_32_flags.txt")


def help_flags() -> dict[str, bool]:
    """Flag name → whether vLLM accepts --no-FLAG, from the stored `--help=all` snapshot."""
    lines = [line.split() for line in HELP_SNAPSHOT.read_text().splitlines() if line and not line.startswith("#")]
    return {parts[0]: parts[1:] == ["+no"] for parts in lines}


def errors(engine_args) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        validate_engine_args(engine_args)
    return caught.value.message_dict["engine_args"]


def test_a_typo_is_refused_with_a_suggestion():
    assert errors({"max_num_seq": 8}) == ["unknown vLLM flag 'max_num_seq' (did you mean max_num_seqs?)"]


def test_a_cli_spelling_suggests_the_snake_case_name():
    assert "did you mean enable_prefix_caching?" in errors({"--enable-prefix-caching": True})[0]


def test_nonsense_gets_no_suggestion():
    assert errors({"zzz": 1}) == ["unknown vLLM flag 'zzz'"]


@pytest.mark.parametrize("name,value", [
    ("max_num_seqs", "8"), ("max_num_seqs", 8.5), ("max_num_seqs", True), ("max_num_seqs", 0),
    ("gpu_memory_utilization", "0.9"), ("gpu_memory_utilization", 1.5), ("gpu_memory_utilization", False),
    ("enable_prefix_caching", "yes"), ("enable_prefix_caching", 1),
    ("scheduling_policy", "lifo"), ("kv_cache_dtype", 8), ("tool_call_parser", ""),
])
def test_wrong_types_and_ranges_are_refused(name, value):
    assert errors({name: value})[0].startswith(f"'{name}' must be")


@pytest.mark.parametrize("name", ["model", "port", "dtype", "quantization", "trust_remote_code", "served_model_name"])
def test_flags_switchyard_controls_are_refused_with_the_reason(name):
    assert errors({name: "x"}) == [f"'{name}' cannot be set in engine_args: {REFUSED_FLAGS[name]}"]


def test_every_problem_is_reported_at_once():
    assert len(errors({"max_num_seq": 1, "enforce_eager": "no", "max_model_len": -1})) == 3


def test_not_an_object_is_refused():
    assert errors(["max_num_seqs", 8]) == ["Must be an object mapping vLLM flag names to values."]


def test_good_args_pass_unchanged():
    args = {"max_num_seqs": 8, "gpu_memory_utilization": 0.85, "scheduling_policy": "fcfs", "enforce_eager": True}
    assert validate_engine_args(args) is args


def test_every_allowed_flag_exists_in_vllm_0_32():
    known = help_flags()
    missing = [name for name in ENGINE_FLAGS if flag_name(name)[2:] not in known]
    assert missing == []


def test_bool_flags_marked_negatable_really_accept_no_prefix():
    known = help_flags()
    for name, flag in ENGINE_FLAGS.items():
        if flag.kind == Kind.BOOL:
            assert flag.negatable == known[flag_name(name)[2:]], name


def test_refused_flags_are_real_vllm_flags():
    known = help_flags()
    assert [name for name in REFUSED_FLAGS if flag_name(name)[2:] not in known] == []


def _version(family=ModelFamily.QWEN_CODER, **fields):
    return ModelVersion(model=Model(name="qwen-coder-7b", family=family), version="v1", artifact_uri="x", **fields)


def _pairs(argv: list[str]) -> dict:
    """argv → {flag: value or True} (each flag appears once)."""
    out, i = {}, 0
    while i < len(argv):
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        out[argv[i]] = argv[i + 1] if has_value else True
        i += 2 if has_value else 1
    return out


def test_cpu_argv_drops_gpu_flags_and_forces_float32():
    version = _version(engine_args={"tensor_parallel_size": 2, "max_num_seqs": 8})
    argv = render_vllm_argv(version, model_path="/m/qwen", served_model_name="qwen-coder-7b", port=8123)
    flags = _pairs(argv)
    assert flags["--model"] == "/m/qwen" and flags["--served-model-name"] == "qwen-coder-7b"
    assert flags["--port"] == "8123" and flags["--host"] == "127.0.0.1"
    assert flags["--dtype"] == "float32" and flags["--max-num-seqs"] == "8"
    assert flags["--enable-prefix-caching"] is True and flags["--scheduling-policy"] == "priority"
    assert flags["--enable-prompt-tokens-details"] is True
    assert "--gpu-memory-utilization" not in flags and "--tensor-parallel-size" not in flags
    assert len(flags) == len([a for a in argv if a.startswith("--")])  # no flag twice


def test_gpu_argv_keeps_gpu_flags_and_the_model_dtype():
    version = _version(engine_args={"max_num_seqs": 32}, quantization="awq")
    flags = _pairs(render_vllm_argv(version, model_path="/m", served_model_name="q", port=1, cpu=False,
                                    tensor_parallel_size=2))
    assert flags["--tensor-parallel-size"] == "2" and flags["--gpu-memory-utilization"] == "0.9"
    assert flags["--quantization"] == "awq" and "--dtype" not in flags and flags["--max-num-seqs"] == "32"


def test_the_deployments_parallel_sizes_win_over_a_versions():
    """The deployment's sizes decide the devices an engine is given; a version's own would contradict them."""
    version = _version(engine_args={"tensor_parallel_size": 4, "pipeline_parallel_size": 2})
    flags = _pairs(render_vllm_argv(version, model_path="/m", served_model_name="q", port=1, cpu=False,
                                    tensor_parallel_size=2))
    assert flags["--tensor-parallel-size"] == "2" and "--pipeline-parallel-size" not in flags


def test_explicit_dtype_wins_on_cpu():
    flags = _pairs(render_vllm_argv(_version(dtype="bfloat16"), model_path="/m", served_model_name="q", port=1))
    assert flags["--dtype"] == "bfloat16"


def test_false_bools_render_as_no_flags():
    version = _version(engine_args={"enable_prefix_caching": False, "disable_log_stats": False})
    argv = render_vllm_argv(version, model_path="/m", served_model_name="q", port=1)
    assert "--no-enable-prefix-caching" in argv and "--enable-prefix-caching" not in argv
    assert "--disable-log-stats" not in argv and "--no-disable-log-stats" not in argv


def test_every_rendered_flag_exists_in_vllm_0_32():
    every = {name: _sample(flag) for name, flag in ENGINE_FLAGS.items()}
    argv = render_vllm_argv(_version(engine_args=every), model_path="/m", served_model_name="q", port=1, cpu=False)
    known = help_flags()
    rendered = [arg[2:].removeprefix("no-") for arg in argv if arg.startswith("--")]
    assert [name for name in rendered if name not in known] == []


def _sample(flag):
    if flag.kind == Kind.CHOICE:
        return flag.choices[0]
    return {Kind.INT: 2, Kind.FLOAT: 0.5, Kind.BOOL: False, Kind.STR: "hermes"}[flag.kind]
