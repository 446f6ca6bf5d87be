import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The fixtures create users with passwords; the production hasher is slow on purpose.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def eager_celery():
    """Tasks run in the test's process when queued (the witness tasks queued on commit, for instance)."""
    from controlplane.celery import app

    before = {name: app.conf.get(name) for name in ("task_always_eager", "task_eager_propagates")}
    app.conf.update(task_always_eager=True, task_eager_propagates=True)
    yield
    app.conf.update(before)


@pytest.fixture
def committed(django_capture_on_commit_callbacks, eager_celery):
    """Run `fn`, then its on-commit work (the witness tasks, run in this process), as a real commit would."""
    def run(fn):
        with django_capture_on_commit_callbacks(execute=True):
            return fn()
    return run
