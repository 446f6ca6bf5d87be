"""Two reconciles of one deployment at once create no extra instance and no extra engine (PostgreSQL)."""
import threading

import pytest
from django.db import connection

from fleet import reconcile
from fleet.models import BuiltinRuntime, Deployment, Instance
from tests.fleet.conftest import engine_pids, make_version

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL")


@pytest.mark.django_db(transaction=True)
def test_two_reconciles_at_once_start_exactly_the_target():
    deployment = Deployment.objects.create(name="race", model_version=make_version(), min_replicas=2,
                                           max_replicas=2, runtime_backend=BuiltinRuntime.SIMULATOR,
                                           simulator_params={"decode_ms_per_token": 1.0})
    barrier = threading.Barrier(2)
    errors = []

    def run():
        try:
            barrier.wait()
            reconcile.reconcile_deployment(deployment.pk)
        except Exception as exc:  # surfaced below, in the test thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    instances = Instance.objects.filter(deployment=deployment)
    assert instances.count() == 2 and all(i.state == "starting" for i in instances)
    assert set(engine_pids()) == {i.pk for i in instances}
