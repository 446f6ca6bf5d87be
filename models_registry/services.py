"""Registry writes: models, versions and their lifecycle. Each runs in one transaction with its audit event."""
from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.actor import Actor
from audit.services import record_event
from models_registry.artifacts import model_root, validate_artifact_uri
from models_registry.engine_args import validate_engine_args
from models_registry.fim import TemplateError, parse_template
from models_registry.models import Model, ModelFamily, ModelVersion, Quantization, VersionStatus
from models_registry.profiles import effective_engine_args

MODEL_EDITABLE = ("family", "description")
VERSION_EDITABLE = ("artifact_uri", "checksum", "quantization", "dtype", "engine_args", "fim_template")
DTYPES = ("auto", "float32", "float16", "bfloat16", "half", "float")
# Each status may move only to the next one; nothing goes back.
NEXT_STATUS: dict[str, str] = {VersionStatus.DRAFT: VersionStatus.PUBLISHED,
                               VersionStatus.PUBLISHED: VersionStatus.DEPRECATED,
                               VersionStatus.DEPRECATED: VersionStatus.RETIRED}
TINY_CODER = "tiny-coder"
TINY_CODER_ENGINE_ARGS = {"max_model_len": 1024, "max_num_seqs": 8, "max_num_batched_tokens": 2048}
# Its tokenizer carries Qwen2.5-Coder's FIM sentinels as special tokens (tiny_model_builder.FIM_TOKENS).
TINY_CODER_FAMILY = ModelFamily.QWEN_CODER
TINY_CODER_DESCRIPTION = ("Random-weight 2-layer Llama for CPU demos and tests (output is gibberish); "
                          "its tokenizer has Qwen2.5-Coder's FIM sentinels.")


def model_view(model: Model) -> dict:
    return {"name": model.name, "family": model.family, "description": model.description}


def version_view(version: ModelVersion) -> dict:
    return {"model": version.model.name, "version": version.version, "artifact_uri": version.artifact_uri,
            "checksum": version.checksum, "quantization": version.quantization, "dtype": version.dtype,
            "max_context": version.max_context, "engine_args": version.engine_args,
            "fim_template": version.fim_template, "status": version.status}


def register_model(*, name: str, family: str = ModelFamily.OTHER, description: str = "", actor: Actor) -> Model:
    """Add a model line that versions can then be created under."""
    model = Model(name=name, family=family, description=description)
    model.full_clean()
    with transaction.atomic():
        model.save()
        record_event(actor=actor, action="model.register", target=model, after=model_view(model))
    return model


def update_model(model: Model, /, *, actor: Actor, **changes) -> Model:
    """Change a model's family or description (its name is what clients call it: fixed)."""
    _refuse_unknown(changes, MODEL_EDITABLE)
    with transaction.atomic():
        model = Model.objects.select_for_update().get(pk=model.pk)
        before = model_view(model)
        for name, value in changes.items():
            setattr(model, name, value)
        model.full_clean()
        model.save()
        record_event(actor=actor, action="model.update", target=model, before=before, after=model_view(model))
    return model


def create_version(*, model: Model, version: str, artifact_uri: str, checksum: str = "",
                   quantization: str = Quantization.NONE, dtype: str = "auto", engine_args: dict | None = None,
                   fim_template: str = "", actor: Actor) -> ModelVersion:
    """Create a draft version; its URI, quantization, dtype, engine args and FIM template are checked now."""
    row = ModelVersion(model=model, version=version, checksum=checksum, quantization=quantization, dtype=dtype,
                       artifact_uri=validate_artifact_uri(artifact_uri), engine_args=_checked_engine_args(engine_args),
                       fim_template=_checked_fim_template(fim_template))
    _prepare(row)
    duplicate = ValidationError({"version": f"{model.name} already has a version '{version}'."})
    if ModelVersion.objects.filter(model=model, version=version).exists():
        raise duplicate
    try:
        with transaction.atomic():
            row.save()
            record_event(actor=actor, action="model_version.create", target=row, after=version_view(row))
    except IntegrityError:  # a concurrent create took the label between the check and the insert
        raise duplicate from None
    return row


def update_draft_version(version: ModelVersion, /, *, actor: Actor, **changes) -> ModelVersion:
    """Edit a draft; published and later versions never change (create a new version)."""
    _refuse_unknown(changes, VERSION_EDITABLE)
    if "artifact_uri" in changes:
        changes["artifact_uri"] = validate_artifact_uri(changes["artifact_uri"])
    if "engine_args" in changes:
        changes["engine_args"] = _checked_engine_args(changes["engine_args"])
    if "fim_template" in changes:
        changes["fim_template"] = _checked_fim_template(changes["fim_template"])
    with transaction.atomic():
        version = _locked(version)
        _require_draft(version)
        before = version_view(version)
        for name, value in changes.items():
            setattr(version, name, value)
        _prepare(version)
        version.save()
        record_event(actor=actor, action="model_version.update", target=version, before=before,
                     after=version_view(version))
    return version


def publish_version(version: ModelVersion, *, actor: Actor) -> ModelVersion:
    """Make a draft deployable; from now on it is immutable."""
    return _advance(version, VersionStatus.PUBLISHED, actor=actor)


def deprecate_version(version: ModelVersion, *, actor: Actor) -> ModelVersion:
    """Keep serving a published version but steer new deployments away from it."""
    return _advance(version, VersionStatus.DEPRECATED, actor=actor)


def retire_version(version: ModelVersion, *, actor: Actor) -> ModelVersion:
    """End a deprecated version's life: it may no longer be deployed."""
    return _advance(version, VersionStatus.RETIRED, actor=actor)


def _advance(version: ModelVersion, target: str, *, actor: Actor) -> ModelVersion:
    with transaction.atomic():
        version = _locked(version)
        if NEXT_STATUS.get(version.status) != target:
            raise ValidationError({"status": f"Cannot move a {version.status} version to {target}; "
                                   f"versions go draft → published → deprecated → retired."})
        before = version_view(version)
        version.status = target
        if target == VersionStatus.PUBLISHED:
            version.published_at = timezone.now()
        version.save(update_fields=["status", "published_at"])
        record_event(actor=actor, action=f"model_version.{_verb(target)}", target=version,
                     before=before, after=version_view(version))
    return version


def _verb(status: str) -> str:
    verbs: dict[str, str] = {VersionStatus.PUBLISHED: "publish", VersionStatus.DEPRECATED: "deprecate",
                             VersionStatus.RETIRED: "retire"}
    return verbs[status]


def _locked(version: ModelVersion) -> ModelVersion:
    return ModelVersion.objects.select_for_update().select_related("model").get(pk=version.pk)


def _require_draft(version: ModelVersion) -> None:
    if not version.is_draft:
        raise ValidationError({"status": f"{version} is {version.status}: published versions are immutable; "
                               "create a new version instead."})


def _checked_engine_args(engine_args) -> dict:
    return validate_engine_args({} if engine_args is None else engine_args)


def _checked_fim_template(template) -> str:
    """Blank (the family's template, if it has one), or a template the gateway can render."""
    if template in (None, ""):
        return ""
    try:
        parse_template(template)
    except TemplateError as exc:
        raise ValidationError({"fim_template": str(exc)}) from None
    return template


def _prepare(version: ModelVersion) -> None:
    """Derive max_context from the effective max_model_len, then validate the row."""
    if version.dtype not in DTYPES:
        raise ValidationError({"dtype": f"Choose one of: {', '.join(DTYPES)}."})
    version.max_context = effective_engine_args(version)["max_model_len"]
    version.full_clean(validate_unique=False, validate_constraints=False)


def _refuse_unknown(changes: dict, editable: tuple[str, ...]) -> None:
    unknown = set(changes) - set(editable)
    if unknown:
        raise ValidationError({name: "This field cannot be changed." for name in sorted(unknown)})


def ensure_tiny_coder(*, model_dir: Path, actor: Actor) -> ModelVersion:
    """Register `tiny-coder` with a published version for the tiny local model; safe to call again."""
    uri = _relative_to_root(Path(model_dir))
    with transaction.atomic():
        model = Model.objects.filter(name=TINY_CODER).first() or register_model(
            name=TINY_CODER, family=TINY_CODER_FAMILY, actor=actor, description=TINY_CODER_DESCRIPTION)
        if model.family != TINY_CODER_FAMILY:  # registered before its tokenizer had Qwen2.5-Coder's FIM sentinels
            model = update_model(model, family=TINY_CODER_FAMILY, description=TINY_CODER_DESCRIPTION, actor=actor)
        existing = next((v for v in model.versions.filter(artifact_uri=uri).exclude(status=VersionStatus.RETIRED)
                         .order_by("-created_at") if v.engine_args == TINY_CODER_ENGINE_ARGS), None)
        version = existing or create_version(model=model, version=_next_label(model), artifact_uri=uri,
                                             dtype="float32", engine_args=TINY_CODER_ENGINE_ARGS, actor=actor)
        return publish_version(version, actor=actor) if version.is_draft else version


def _relative_to_root(model_dir: Path) -> str:
    """Stored relative to the model root, so the registry survives moving the root."""
    resolved, root = model_dir.resolve(), model_root()
    return str(resolved.relative_to(root)) if root in resolved.parents else str(resolved)


def _next_label(model: Model) -> str:
    return f"v{model.versions.count() + 1}"
