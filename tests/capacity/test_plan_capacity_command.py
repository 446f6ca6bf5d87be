"""manage.py plan_capacity: a table or the API's JSON, clear errors, and advice for a deployment."""
import io
import json
import re

import pytest
from django.core.management import CommandError, call_command

from tests.capacity.test_capacity_api import TINY_CONFIG, deployment_of, version  # noqa: F401 (fixture)
from tests.capacity.test_planner_arithmetic import QWEN25_CODER_7B

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command("plan_capacity", *args, stdout=out)
    return out.getvalue()


def test_a_table_for_a_pasted_config(tmp_path):
    config = tmp_path / "qwen2.5-coder-7b" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(QWEN25_CODER_7B))
    table = run("--config", str(config), "--gpu", "L4", "--context", "16384", "--developers", "50")
    assert "qwen2.5-coder-7b" in table
    assert "28 × 4 × 128" in table
    assert "57,344 B" in table
    assert re.search(r"--max-num-seqs\s+\d+", table)
    assert re.search(r"replicas \(peak \+ redundancy\)\s+2 \(1 \+ 1\), 2 GPUs", table)
    assert "$1168.00" in table


def test_json_is_the_api_s_answer_for_a_registered_version(version):  # noqa: F811
    plan = json.loads(run("--model", "tiny", "--kv-space-gib", "1", "--json"))
    assert plan["plan"]["kv_tokens"] == 1024 ** 3 // 1024
    assert plan["model"]["weights_source"] == "safetensors headers"


@pytest.mark.parametrize("args, words", [
    (["--gpu", "L4"], "model_version"),
    (["--model", "nope", "--gpu", "L4"], "No registered version 'nope'"),
    (["--model", "tiny", "--gpu", "TPU"], "No GPU type named 'TPU'"),
    (["--model", "tiny", "--gpu", "L4", "--gpu-memory-utilization", "2"], "gpu_memory_utilization"),
    (["--model", "tiny", "--gpu", "L4", "--traffic", "usage", "--tenant", "nope"], "No tenant 'nope'"),
    (["--model", "tiny", "--gpu", "L4", "--traffic", "usage"], "No completed requests"),
])
def test_bad_arguments_are_a_clear_error(version, args, words):  # noqa: F811
    with pytest.raises(CommandError, match=words):
        run(*args)


def test_advice_for_a_deployment(alice, version):  # noqa: F811
    deployment = deployment_of(alice.tenant, version, "coder-a")
    text = run("--advise", str(deployment.pk))
    assert f"{deployment}: 0 samples in the last 15 min, prefix-cache hit ratio" in text
    # No demand samples yet, so only the cache is judged: 1,000 of 40,000 tokens hit.
    assert "[warning] Make prompts share their beginning." in text
