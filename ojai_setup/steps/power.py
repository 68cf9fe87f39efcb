"""The platform profile for the GPU routes: ``--power performance`` sets the ACPI platform
profile to performance, persistently and the way the machine already manages it:

* tuned: ``/etc/tuned/active_profile`` (``accelerator-performance``: throughput-performance
  with the higher-latency CPU idle states off, the profile Strix Halo owners use, cited in
  noamsto/nix-amd-ai#19 from the Strix Halo wiki; an owner already on ``throughput-performance``
  is left there) and ``profile_mode`` (``manual``), then ``systemctl restart tuned``;
* power-profiles-daemon: ``Profile=performance`` in ``/var/lib/power-profiles-daemon/state.ini``
  (the state it restores at start), then ``systemctl restart power-profiles-daemon``;
* neither: a small unit, ``ojai-power.service``, that writes ``performance`` to
  ``/sys/firmware/acpi/platform_profile`` at boot, enabled by its ``multi-user.target.wants``
  link.

Each is a file edit, so the plan shows its diff and ``ojai rollback`` restores it.
"""

from __future__ import annotations

from ojai_setup.model.actions import RunCommand, Symlink
from ojai_setup.model.follow_ups import daemon_reload
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

PROFILE = "/sys/firmware/acpi/platform_profile"
TUNED_ACTIVE = "/etc/tuned/active_profile"
TUNED_MODE = "/etc/tuned/profile_mode"
TUNED_PROFILE = "accelerator-performance"
#: tuned profiles that set the platform profile to performance, any of which is kept
TUNED_PERFORMANCE = ("accelerator-performance", "throughput-performance")
PPD_STATE = "/var/lib/power-profiles-daemon/state.ini"
UNIT = "/etc/systemd/system/ojai-power.service"
UNIT_LINK = "/etc/systemd/system/multi-user.target.wants/ojai-power.service"
UNIT_TEXT = f"""[Unit]
Description=ojai: ACPI platform profile performance for the GPU routes
ConditionPathExists={PROFILE}

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo performance > {PROFILE}'

[Install]
WantedBy=multi-user.target
"""


def _ini_set(text: str, section: str, key: str, value: str) -> str:
    """``key=value`` in ``[section]`` of an ini text, by key (other lines kept)."""
    lines = text.splitlines()
    out, current, done = [], None, False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            if current == section and not done:
                out.append(f"{key}={value}")
                done = True
            current = stripped[1:-1]
        elif current == section and stripped.split("=", 1)[0].strip() == key:
            out.append(f"{key}={value}")
            done = True
            continue
        out.append(line)
    if not done:
        if current != section:
            out.append(f"[{section}]")
        out.append(f"{key}={value}")
    return "\n".join(out) + "\n"


class PowerStep:
    name = "power"

    def plan(self, ctx: Context) -> StepResult:
        power = ctx.facts.power
        now = (f"platform profile {power.profile} (choices: {' '.join(power.choices) or 'none'})"
               + (f", managed by {power.manager}" if power.manager else "")
               if power else "no ACPI platform profile here")
        if ctx.settings.power == "none":
            return StepResult.satisfied(self.name, f"power left as it is: {now}"
                                        + ("; --power performance sets it for the GPU routes"
                                           if power and "performance" in power.choices else ""))
        if power is None or "performance" not in power.choices:
            return StepResult.blocked(self.name, f"--power performance: {now}; this machine "
                                      "offers no performance profile")
        root = ctx.root
        actions, handlers = [], {}
        if power.manager == "tuned":
            current = (root.read_text(TUNED_ACTIVE).strip() if root.exists(TUNED_ACTIVE) else "")
            profile = current if current in TUNED_PERFORMANCE else TUNED_PROFILE
            for path, text in ((TUNED_ACTIVE, profile + "\n"), (TUNED_MODE, "manual\n")):
                a = ctx.file_action(path, text, 0o644, f"tuned profile {profile}",
                                    notify=("tuned",))
                if a:
                    actions.append(a)
            handlers["tuned"] = RunCommand(argv=("systemctl", "restart", "tuned"), needs_root=True,
                                           reason="apply the tuned profile")
            how = f"tuned profile {profile} ({TUNED_ACTIVE})"
        elif power.manager == "power-profiles-daemon":
            before = root.read_text(PPD_STATE) if root.exists(PPD_STATE) else ""
            a = ctx.file_action(PPD_STATE, _ini_set(before, "State", "Profile", "performance"),
                                0o644, "power-profiles-daemon: performance at every start",
                                notify=("power-profiles-daemon",))
            if a:
                actions.append(a)
            handlers["power-profiles-daemon"] = RunCommand(
                argv=("systemctl", "restart", "power-profiles-daemon"), needs_root=True,
                reason="make power-profiles-daemon take its saved profile")
            how = f"power-profiles-daemon's saved profile ({PPD_STATE})"
        else:
            a = ctx.file_action(UNIT, UNIT_TEXT, 0o644, "unit writing the platform profile at boot",
                                notify=("systemd",))
            if a:
                actions.append(a)
            link = root.resolve(UNIT_LINK)
            if not (link.is_symlink() and str(link.readlink()) == UNIT):
                actions.append(Symlink(path=UNIT_LINK, target=UNIT, needs_root=True,
                                       reason="enable ojai-power.service at boot"))
            handlers["systemd"] = daemon_reload("load the new unit")
            how = f"the unit {UNIT} (from the next boot; `sudo systemctl start ojai-power` now)"
        if not actions:
            return StepResult.satisfied(self.name, f"power: performance is set through {how}; "
                                        f"now {now}")
        return StepResult.change(self.name, f"set the platform profile to performance through "
                                 f"{how}; now {now}", actions, handlers=handlers)
