"""The unprivileged system user the services ojai writes run as (with ``--systemd``)."""

from __future__ import annotations

from ojai_setup.formats.accounts import users
from ojai_setup.model.actions import CreateSystemUser
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult


class ServiceUserStep:
    name = "service-user"

    def plan(self, ctx: Context) -> StepResult:
        settings = ctx.settings
        user = ctx.service_user
        if not settings.systemd:
            return StepResult.satisfied(self.name, "no systemd units asked for (--systemd), so "
                                        "no service user")
        try:
            passwd = ctx.root.read_text("/etc/passwd")
        except FileNotFoundError:
            passwd = ""
        uid = users(passwd).get(user)
        if uid is not None and (uid == 0 or uid >= 1000):
            return StepResult.blocked(
                self.name, f"a user {user} exists with uid {uid}: it is "
                f"{'root' if uid == 0 else 'a login user'}, not an unprivileged system user, so "
                f"the services will not run as it; rename that user (usermod -l) and plan again",
                reads=("/etc/passwd",))
        if uid is not None:
            return StepResult.satisfied(self.name, f"the services run as the system user "
                                        f"{user}, which exists", reads=("/etc/passwd",))
        return StepResult.change(
            self.name, f"create the unprivileged system user {user} that the services "
            "run as (no home, no login shell, no groups of its own)",
            [CreateSystemUser(name=user, description="ojai model servers",
                              needs_root=True, reason="the services must not run as root")],
            reads=("/etc/passwd",))
