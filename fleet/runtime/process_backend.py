"""What the local and simulator backends share: one engine = one tagged process group on this host."""
from abc import abstractmethod

from django.conf import settings

from fleet.runtime import processes
from fleet.runtime.base import Launched, RuntimeBackend


class ProcessBackend(RuntimeBackend):
    """Engines as local processes; subclasses only say which command line to run."""

    host = "127.0.0.1"
    extra_env: dict = {}

    @abstractmethod
    def argv(self, instance, port: int) -> list[str]:
        """The engine's command line for `instance` listening on `port`."""

    def start(self, instance) -> Launched:
        running = processes.leader_handle(processes.tagged_processes().get(instance.pk, []))
        if running is not None:  # a previous attempt launched it but never recorded it: adopt
            handle = {**running, "log": str(processes.log_path(instance.pk))}
        else:
            port = processes.free_port()
            handle = processes.spawn(self.argv(instance, port), instance_id=instance.pk, port=port,
                                     extra_env=self.extra_env, cwd=str(settings.BASE_DIR))
        return Launched(endpoint_url=f"http://{self.host}:{handle['port']}", port=handle["port"], handle=handle)

    def stop(self, instance, grace: float) -> None:
        processes.kill_instance(instance.pk, grace)

    def is_alive(self, instance) -> bool:
        return processes.alive(instance.runtime_handle or {})

    def log_tail(self, instance, lines: int = 40) -> str:
        path = (instance.runtime_handle or {}).get("log") or str(processes.log_path(instance.pk))
        return processes.read_tail(path, lines)

    def running(self) -> dict[int, dict]:
        found = processes.tagged_processes()
        return {iid: processes.leader_handle(procs) or procs[0] for iid, procs in found.items()}

    def stop_orphan(self, instance_id: int, grace: float) -> None:
        processes.kill_instance(instance_id, grace)
