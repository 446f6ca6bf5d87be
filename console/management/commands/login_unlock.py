"""manage.py login_unlock [--username NAME] [--ip ADDRESS]: lift a sign-in lock now (audited)."""
from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from audit.services import record_event
from console import login_throttle


class Command(BaseCommand):
    help = "Lift the sign-in lock of a username and/or an address (an IPv6 address unlocks its /64)."

    def add_arguments(self, parser):
        parser.add_argument("--username")
        parser.add_argument("--ip")

    def handle(self, *args, username, ip, **options):
        if not (username or ip):
            raise CommandError("Give --username, --ip or both.")
        found = login_throttle.unlock(username=username, ip=ip)
        after = {"username": username, "address": login_throttle.address_bucket(ip) if ip else None,
                 "was_locked": found}
        record_event(actor=Actor.system("cli:login_unlock"), action="auth.login_unlocked", after=after)
        self.stdout.write(f"unlocked: {', '.join(found) or 'nothing was locked'}")
