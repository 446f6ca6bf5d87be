"""Console forms: sign-in, tenants and members, keys, quotas, fleet and registry."""
from console.forms.login import ThrottledAuthenticationForm

__all__ = ["ThrottledAuthenticationForm"]
