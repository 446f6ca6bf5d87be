"""A spawned engine is visible to every /proc scan from the moment spawn() returns: Popen returns when the child's
close-on-exec descriptors close, before the kernel lays out the new program's environment, so for a moment its
/proc/<pid>/environ is empty and a scan (the next start's port pick, the orphan sweep) would miss it."""
from __future__ import annotations

import sys
import uuid

from fleet.runtime import processes

STARTS = 30


def test_every_spawned_process_carries_its_tags_when_spawn_returns(tmp_path, settings):
    owner = processes.EngineOwner(f"spawn-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex)
    settings.SWITCHYARD_ENGINE_LOG_DIR = tmp_path
    missed = []
    try:
        for instance_id in range(1, STARTS + 1):
            handle = processes.spawn([sys.executable, "-c", "import time; time.sleep(60)"], owner=owner,
                                     backend="simulator", instance_id=instance_id, port=0, env={}, cwd=str(tmp_path))
            if processes.environ_tags(handle["pid"]).get(processes.INSTANCE_VAR) != str(instance_id):
                missed.append(instance_id)
        assert missed == []
        assert set(processes.tagged_processes(owner)) == set(range(1, STARTS + 1))
    finally:
        for instance_id in range(1, STARTS + 1):
            processes.kill_instance(owner, instance_id, 2.0)
    assert processes.tagged_processes(owner) == {}
