"""idp_seed --client-id ID --client-secret S --redirect-uri URI --post-logout-uri URI
[--user NAME:PASSWORD:EMAIL:GROUP,GROUP ...]

Registers the relying party (confidential, authorization code, RS256, no consent screen) and creates
or updates users with exactly the groups given — the tests call it again to change a user's groups.
"""
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from oauth2_provider.models import Application


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("--client-id")
        parser.add_argument("--client-secret")
        parser.add_argument("--redirect-uri", action="append", default=[])
        parser.add_argument("--post-logout-uri", action="append", default=[])
        parser.add_argument("--user", action="append", default=[])

    def handle(self, *args, client_id, client_secret, redirect_uri, post_logout_uri, user, **options):
        if client_id:
            Application.objects.update_or_create(client_id=client_id, defaults={
                "name": "switchyard", "client_type": Application.CLIENT_CONFIDENTIAL,
                "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE, "client_secret": client_secret,
                "hash_client_secret": False, "redirect_uris": " ".join(redirect_uri), "skip_authorization": True,
                "algorithm": Application.RS256_ALGORITHM, "post_logout_redirect_uris": " ".join(post_logout_uri)})
        for spec in user:
            name, password, email, groups = spec.split(":", 3)
            account, _ = User.objects.get_or_create(username=name)
            account.email = email
            account.set_password(password)
            account.save()
            account.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups.split(",") if g])
