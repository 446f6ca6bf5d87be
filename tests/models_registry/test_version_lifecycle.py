"""Version lifecycle: draft → published → deprecated → retired, and published rows never change."""
import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction

from audit.models import AuditEvent
from models_registry import services
from models_registry.models import ModelVersion, VersionStatus
from models_registry.profiles import effective_engine_args, profile_for
from tests.factories import SYSTEM
from tests.models_registry.registry_helpers import make_model, make_version

pytestmark = pytest.mark.django_db


def test_a_new_version_is_a_draft_with_its_profile_context():
    version = make_version()
    assert version.status == VersionStatus.DRAFT and version.published_at is None
    assert version.max_context == profile_for("qwen-coder").engine_defaults["max_model_len"]


def test_engine_args_override_the_profile_and_set_max_context():
    version = make_version(engine_args={"max_model_len": 2048, "max_num_seqs": 4})
    args = effective_engine_args(version)
    assert args["max_num_seqs"] == 4 and args["enable_prefix_caching"] is True
    assert args["scheduling_policy"] == "priority" and version.max_context == 2048


@pytest.mark.parametrize("fields,field", [
    ({"engine_args": {"max_num_seq": 8}}, "engine_args"),
    ({"artifact_uri": "https://169.254.169.254/x"}, "artifact_uri"),
    ({"quantization": "int3"}, "quantization"),
    ({"dtype": "float8"}, "dtype"),
    ({"fim_template": "<pre>{prefix}<mid>"}, "fim_template"),
])
def test_create_version_refuses_bad_input_naming_the_field(fields, field):
    with pytest.raises(ValidationError) as caught:
        make_version(**fields)
    assert field in caught.value.message_dict
    assert not ModelVersion.objects.exists()


def test_version_labels_are_unique_per_model():
    model = make_model()
    make_version(model)
    with pytest.raises(ValidationError, match="already has a version"):
        make_version(model)


def test_the_full_lifecycle_in_order():
    version = make_version()
    version = services.publish_version(version, actor=SYSTEM)
    assert version.status == VersionStatus.PUBLISHED and version.published_at is not None
    version = services.deprecate_version(version, actor=SYSTEM)
    version = services.retire_version(version, actor=SYSTEM)
    assert ModelVersion.objects.get(pk=version.pk).status == VersionStatus.RETIRED


@pytest.mark.parametrize("path,illegal", [
    ([], services.deprecate_version),
    ([], services.retire_version),
    ([services.publish_version], services.publish_version),
    ([services.publish_version], services.retire_version),
    ([services.publish_version, services.deprecate_version], services.publish_version),
    ([services.publish_version, services.deprecate_version, services.retire_version], services.deprecate_version),
])
def test_illegal_transitions_are_refused(path, illegal):
    version = make_version()
    for step in path:
        version = step(version, actor=SYSTEM)
    with pytest.raises(ValidationError, match="draft → published → deprecated → retired"):
        illegal(version, actor=SYSTEM)
    assert ModelVersion.objects.get(pk=version.pk).status == version.status


def test_a_draft_can_be_edited():
    version = services.update_draft_version(make_version(), engine_args={"max_num_seqs": 2}, checksum="sha256:ab",
                                            actor=SYSTEM)
    assert version.engine_args == {"max_num_seqs": 2} and version.checksum == "sha256:ab"


def test_a_draft_edit_is_validated_too():
    with pytest.raises(ValidationError) as caught:
        services.update_draft_version(make_version(), engine_args={"max_num_seq": 2}, actor=SYSTEM)
    assert "did you mean max_num_seqs?" in caught.value.message_dict["engine_args"][0]


def test_status_and_label_are_not_editable_as_fields():
    with pytest.raises(ValidationError) as caught:
        services.update_draft_version(make_version(), status="published", version="v9", actor=SYSTEM)
    assert set(caught.value.message_dict) == {"status", "version"}


@pytest.fixture
def published():
    return services.publish_version(make_version(), actor=SYSTEM)


def test_the_service_refuses_to_edit_a_published_version(published):
    with pytest.raises(ValidationError, match="immutable"):
        services.update_draft_version(published, checksum="sha256:other", actor=SYSTEM)


def test_save_refuses_to_change_a_published_version(published):
    published.engine_args = {"max_num_seqs": 1}
    with pytest.raises(ValidationError) as caught:
        published.save()
    assert "engine_args" in caught.value.message_dict
    assert ModelVersion.objects.get(pk=published.pk).engine_args == {}


def test_save_refuses_to_send_a_published_version_back_to_draft(published):
    published.status = VersionStatus.DRAFT
    with pytest.raises(ValidationError):
        published.save()


@pytest.mark.parametrize("change", [
    {"artifact_uri": "s3://bucket/other"}, {"checksum": "x"}, {"engine_args": {"max_num_seqs": 1}},
    {"quantization": "awq"}, {"max_context": 1}, {"status": VersionStatus.DRAFT},
    {"fim_template": "<pre>{prefix}<suf>{suffix}<mid>"},
])
def test_the_database_refuses_updates_that_bypass_save(published, change):
    with pytest.raises(DatabaseError), transaction.atomic():
        ModelVersion.objects.filter(pk=published.pk).update(**change)
    assert ModelVersion.objects.get(pk=published.pk).status == VersionStatus.PUBLISHED


def test_a_version_fim_template_is_set_at_registration_and_frozen_on_publish():
    template = "<pre>{prefix}<suf>{suffix}<mid>"
    version = services.publish_version(make_version(fim_template=template), actor=SYSTEM)
    assert ModelVersion.objects.get(pk=version.pk).fim_template == template
    version.fim_template = ""
    with pytest.raises(ValidationError) as caught:
        version.save()
    assert "fim_template" in caught.value.message_dict


def test_a_full_save_may_still_move_status_forward(published):
    published.status = VersionStatus.DEPRECATED
    published.save()
    assert ModelVersion.objects.get(pk=published.pk).status == VersionStatus.DEPRECATED


def test_the_database_still_allows_moving_status_forward(published):
    assert ModelVersion.objects.filter(pk=published.pk).update(status=VersionStatus.DEPRECATED) == 1


def test_the_database_refuses_deleting_a_published_version(published):
    with pytest.raises(DatabaseError), transaction.atomic():
        ModelVersion.objects.filter(pk=published.pk).delete()
    assert ModelVersion.objects.filter(pk=published.pk).exists()


def test_drafts_stay_freely_editable_at_the_database():
    version = make_version()
    assert ModelVersion.objects.filter(pk=version.pk).update(checksum="sha256:ab") == 1


def test_every_write_is_audited_with_before_and_after():
    model = make_model()
    version = make_version(model)
    services.update_draft_version(version, checksum="sha256:ab", actor=SYSTEM)
    for step in (services.publish_version, services.deprecate_version, services.retire_version):
        version = step(version, actor=SYSTEM)
    events = list(AuditEvent.objects.filter(action__startswith="model").order_by("seq"))
    assert [e.action for e in events] == ["model.register", "model_version.create", "model_version.update",
                                         "model_version.publish", "model_version.deprecate", "model_version.retire"]
    assert events[3].before["status"] == "draft" and events[3].after["status"] == "published"
    assert events[2].after["checksum"] == "sha256:ab" and events[1].target_id == str(version.pk)
    assert all(e.actor_label == "tests" for e in events)


def test_a_refused_write_leaves_no_audit_event():
    version = services.publish_version(make_version(), actor=SYSTEM)
    count = AuditEvent.objects.count()
    with pytest.raises(ValidationError):
        services.publish_version(version, actor=SYSTEM)
    assert AuditEvent.objects.count() == count
