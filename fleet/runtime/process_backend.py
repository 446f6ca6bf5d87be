"""What the local and simulator backends share: one engine = one tagged process group on this host."""
from abc import abstractmethod

from django.conf import settings

from fleet.install import engine_owner
from fleet.runtime import capacity, processes, sockets
from fleet.runtime.base import Launched, NoCapacity, RuntimeBackend


class ProcessBackend(RuntimeBackend):
    """Engines as local processes; subclasses say which command line to run and what one engine needs."""

    host = "127.0.0.1"

    @abstractmethod
    def argv(self, instance, port: int) -> list[str]:
        """The engine's command line for `instance` listening on `port`."""

    @abstractmethod
    def estimate(self, instance) -> capacity.Need:
        """What one engine of this instance's deployment needs, before any has been measured."""

    def extra_env(self, instance) -> dict[str, str]:
        return {}

    def start(self, instance) -> Launched:
        owner = engine_owner()
        running = processes.leader_handle(processes.tagged_processes(owner).get(instance.pk, []))
        if running is not None:  # a previous attempt launched it but never recorded it: adopt
            handle = {**running, "log": str(processes.log_path(owner.namespace, instance.pk))}
        else:
            handle = self._admit_and_spawn(instance, owner)
        return Launched(endpoint_url=f"http://{self.host}:{handle['port']}", port=handle["port"], handle=handle)

    def _admit_and_spawn(self, instance, owner) -> dict:
        need = self.need(instance)
        with capacity.host_lock():  # held until the new engine carries its tags, so the next admission sees it
            reason = capacity.shortfall(need)
            if reason:
                raise NoCapacity(reason)
            port = processes.free_port(taken=processes.engine_ports())
            return processes.spawn(self.argv(instance, port), owner=owner, backend=self.name, instance_id=instance.pk,
                                   port=port, env={**self.extra_env(instance), **need.environment()},
                                   cwd=str(settings.BASE_DIR))

    def need(self, instance) -> capacity.Need:
        """The estimate, or more if this deployment's ready engines were measured bigger."""
        estimate = self.estimate(instance)
        return capacity.Need(memory_bytes=max(estimate.memory_bytes, self.measured_bytes(instance)),
                             cpus=estimate.cpus, gpus=estimate.gpus)

    def measured_bytes(self, instance) -> int:
        """Resident memory of the largest ready engine of the instance's deployment (0 when none runs)."""
        from fleet.models import Instance
        from fleet.states import InstanceState

        ready = set(Instance.objects.filter(deployment_id=instance.deployment_id, state=InstanceState.READY)
                    .values_list("pk", flat=True))
        found = processes.tagged_processes(engine_owner())
        return max((sum(processes.rss_bytes(p["pid"]) for p in found[pk]) for pk in ready & set(found)), default=0)

    def stop(self, instance, grace: float) -> bool:
        return processes.kill_instance(engine_owner(), instance.pk, grace)

    def is_alive(self, instance) -> bool:
        return processes.alive(instance.runtime_handle or {})

    def serves_endpoint(self, instance) -> bool:
        """The port is listened on by the engine we started (another process may have grabbed it first)."""
        pids = [p["pid"] for p in processes.tagged_processes(engine_owner()).get(instance.pk, [])]
        return bool(instance.port) and sockets.listened_by(instance.port, pids)

    def log_tail(self, instance, lines: int = 40) -> str:
        path = (instance.runtime_handle or {}).get("log") or str(processes.log_path(engine_owner().namespace,
                                                                                     instance.pk))
        return processes.read_tail(path, lines)

    def running(self) -> dict[int, dict]:
        found = processes.tagged_processes(engine_owner())
        return {iid: processes.leader_handle(procs) or procs[0] for iid, procs in found.items()
                if any(self._launched(proc) for proc in procs)}

    def _launched(self, proc: dict) -> bool:
        # An engine started before engines carried their backend's name is claimed by every process backend.
        return proc.get("backend", "") in ("", self.name)

    def stop_orphan(self, instance_id: int, grace: float) -> bool:
        return processes.kill_instance(engine_owner(), instance_id, grace)
