"""Field-level read rules: fields of `tenants.roles.FIELD_RULES` read as null for callers without the rule's
permission in the row's tenant (engine log tails, artifact URIs …).

The key stays and is documented nullable, so the schema holds for every reader. Fails closed: a
serializer given no request in its context shows none of them.
"""
from typing import Any

from tenants.access import may_read_field, principal_for
from tenants.roles import FIELD_RULES


class RestrictedFieldsMixin:
    """For a ModelSerializer: set `field_rule` (a FIELD_RULES key) and override `row_tenant` for tenant rows."""

    field_rule: str
    context: dict[str, Any]  # the serializer's

    def get_fields(self):
        fields = super().get_fields()
        for name in FIELD_RULES[self.field_rule][0]:
            fields[name].allow_null = True
        return fields

    def to_representation(self, instance):
        data = super().to_representation(instance)
        names, perm = FIELD_RULES[self.field_rule]
        if not self._may_see(instance, perm):
            data.update(dict.fromkeys(names))
        return data

    def row_tenant(self, instance):
        """The tenant whose permission decides; None for tenant-less rows (then: the permission anywhere)."""
        return None

    def _may_see(self, instance, perm: str) -> bool:
        request = self.context.get("request")
        if request is None:
            return False
        return may_read_field(principal_for(request), self.row_tenant(instance), perm)
