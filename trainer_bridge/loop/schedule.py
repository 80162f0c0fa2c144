"""Schedule windows: when training (and ``corpusmill refresh``) may run, e.g. off-peak electricity hours.

``train.schedule: {windows: ["22:00-07:00", "Sat 00:00-Sun 23:59"], timezone: "Europe/Berlin"}``. A window is
``HH:MM-HH:MM`` (every day; past midnight allowed) or ``Day HH:MM-Day HH:MM`` (weekly; Mon…Sun); the start is
inside, the end is not. No window: always open. Outside every window the trainer checkpoints and pauses
(``train/PAUSED`` says why and until when, the alerts' pause path), and goes on by itself when the next window
opens; ``corpusmill refresh`` waits for it, or exits with ``ExitCode.OUTSIDE_WINDOW`` (``outside: exit``).

Time comes from a ``Clock`` (``now()`` epoch seconds, ``sleep(seconds)``), so tests run hours of schedule in
milliseconds. Local times follow the configured time zone; across a DST change a boundary moves with the wall
clock.
"""
from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from typing import Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runio.errors import ExitCode
from trainer_bridge.observe.alerts import mark_paused

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WEEK_MINUTES = 7 * 1440
_TIME = r"([01]?\d|2[0-3]):([0-5]\d)"
_DAILY = re.compile(rf"^\s*{_TIME}\s*-\s*{_TIME}\s*$")
_WEEKLY = re.compile(rf"^\s*([A-Za-z]{{3}})[a-z]*\s+{_TIME}\s*-\s*([A-Za-z]{{3}})[a-z]*\s+{_TIME}\s*$")


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


def parse_window(text: str) -> list[tuple[int, int]]:
    """One window as [start, end) intervals in minutes of the week (Monday 00:00 = 0); raises ValueError."""
    daily = _DAILY.match(text)
    if daily:
        start, end = int(daily[1]) * 60 + int(daily[2]), int(daily[3]) * 60 + int(daily[4])
        if start == end:
            raise ValueError(f"{text!r}: start and end are the same time")
        return [interval for day in range(7) for interval in _span(day * 1440 + start, day * 1440 + end
                                                                   + (1440 if end < start else 0))]
    weekly = _WEEKLY.match(text)
    if weekly:
        days = [d.lower() for d in (weekly[1], weekly[4])]
        for day in days:
            if day not in DAYS:
                raise ValueError(f"{text!r}: {day!r} is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)")
        start = DAYS.index(days[0]) * 1440 + int(weekly[2]) * 60 + int(weekly[3])
        end = DAYS.index(days[1]) * 1440 + int(weekly[5]) * 60 + int(weekly[6])
        if start == end:
            raise ValueError(f"{text!r}: start and end are the same time")
        return _span(start, end + (WEEK_MINUTES if end < start else 0))
    raise ValueError(f"{text!r}: expected 'HH:MM-HH:MM' or 'Day HH:MM-Day HH:MM' (e.g. '22:00-07:00', "
                     "'Sat 00:00-Sun 23:59')")


def _span(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) within one week, split where it passes the week's end."""
    if end <= WEEK_MINUTES:
        return [(start, end)]
    return [(start, WEEK_MINUTES), (0, end - WEEK_MINUTES)]


class ScheduleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    windows: list[str] = Field(default_factory=list, description="when training may run; [] : always")
    timezone: str = Field("UTC", description="IANA time zone of the windows, e.g. Europe/Berlin")
    outside: Literal["wait", "exit"] = Field("wait", description="corpusmill refresh started outside every "
                                                                  "window: wait for the next, or exit 75")

    @field_validator("windows")
    @classmethod
    def _windows(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_window(text)
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as 'UTC' or 'Europe/Berlin')") \
                from None
        return value


class Schedule:
    """The windows of a ``ScheduleConfig``: whether a moment is inside one, and when that changes."""

    def __init__(self, cfg: ScheduleConfig):
        self.cfg = cfg
        self.zone = ZoneInfo(cfg.timezone)
        self.intervals = sorted(i for text in cfg.windows for i in parse_window(text))

    @property
    def always_open(self) -> bool:
        return not self.intervals

    def _minute_of_week(self, t: float) -> tuple[float, datetime]:
        local = datetime.fromtimestamp(t, self.zone)
        return local.weekday() * 1440 + local.hour * 60 + local.minute + local.second / 60 + \
            local.microsecond / 6e7, local

    def is_open(self, t: float) -> bool:
        if self.always_open:
            return True
        minute, _ = self._minute_of_week(t)
        return any(start <= minute < end for start, end in self.intervals)

    def _at(self, t: float, minutes_ahead: float) -> float:
        """Epoch of the local wall-clock time ``minutes_ahead`` after ``t``'s (whole minutes stay whole)."""
        _, local = self._minute_of_week(t)
        naive = local.replace(tzinfo=None) + timedelta(minutes=minutes_ahead)
        return naive.replace(tzinfo=self.zone).timestamp()

    def next_open(self, t: float) -> float:
        """``t`` when a window is open; else when the next one opens."""
        if self.is_open(t):
            return t
        minute, _ = self._minute_of_week(t)
        ahead = min((start - minute) % WEEK_MINUTES for start, _ in self.intervals)
        return self._at(t, ahead)

    def closes_at(self, t: float) -> float | None:
        """When the window open at ``t`` closes (None: always open; ``t`` when none is open)."""
        if self.always_open:
            return None
        if not self.is_open(t):
            return t
        minute, _ = self._minute_of_week(t)
        boundary = minute
        for _ in range(len(self.intervals) + 1):  # adjacent windows merge: follow them to the real end
            ends = [end for start, end in self.intervals if start <= boundary % WEEK_MINUTES < end]
            if not ends:
                break
            boundary += max(ends) - boundary % WEEK_MINUTES
        return self._at(t, boundary - minute)

    def describe(self, t: float) -> str:
        """A moment as the windows' local time, for messages."""
        return datetime.fromtimestamp(t, self.zone).strftime(f"%a %Y-%m-%d %H:%M {self.cfg.timezone}")


def wait_for_window(schedule: Schedule, clock: Clock, say=print, what: str = "waiting") -> float:
    """Sleep until a window is open (re-checked after each sleep); return the seconds waited."""
    waited = 0.0
    while not schedule.is_open(now := clock.now()):
        opens = schedule.next_open(now)
        say(f"outside the schedule windows ({', '.join(schedule.cfg.windows)}): {what} until "
            f"{schedule.describe(opens)}")
        clock.sleep(max(1.0, opens - now))
        waited += clock.now() - now
    return waited


class ScheduleCheck:
    """The training loop's schedule component. ``before_start()``: outside every window, wait (nothing to
    checkpoint yet). ``check(step)`` after each step: when the window has closed (on any rank: ``agree`` is a
    max-reduce), checkpoint, write ``train/PAUSED`` (why, and until when), sleep until the next window opens,
    remove ``PAUSED`` and go on. Adds a ``schedule pause`` event per pause."""

    def __init__(self, cfg: ScheduleConfig, paths, *, clock: Clock, agree, checkpoint, events: list[dict], say,
                 is_main: bool = True):
        self.schedule = Schedule(cfg)
        self.paths, self.clock, self.agree, self.checkpoint = paths, clock, agree, checkpoint
        self.events, self.say, self.is_main = events, say, is_main
        self.pauses = 0

    def _closed(self) -> bool:
        return bool(self.agree(0 if self.schedule.is_open(self.clock.now()) else 1))

    def before_start(self, step: int) -> None:
        if self.schedule.always_open or not self._closed():
            return
        self._pause(step, checkpoint=False)

    def check(self, step: int) -> None:
        if self.schedule.always_open or not self._closed():
            return
        self._pause(step, checkpoint=True)

    def _pause(self, step: int, *, checkpoint: bool) -> None:
        now = self.clock.now()
        until = self.schedule.next_open(now)
        if checkpoint:
            self.checkpoint()
        reason = f"outside the schedule windows ({', '.join(self.schedule.cfg.windows)})"
        if self.is_main:
            mark_paused(self.paths, None, now, reason=reason, until=until,
                        resume=f"resumes by itself at {self.schedule.describe(until)}")
        self.say(f"paused at step {step}: {reason}" + ("; checkpoint saved" if checkpoint else "")
                 + f"; resuming at {self.schedule.describe(until)}")
        self.events.append({"step": step, "event": "schedule pause", "paused_at": now, "until": until})
        wait_for_window(self.schedule, self.clock, say=lambda line: None)
        if self.is_main:
            try:
                self.paths.paused.unlink()
            except FileNotFoundError:
                pass
        self.pauses += 1
        self.say(f"resumed at step {step}: the window opened ({self.schedule.describe(self.clock.now())})")

    def close(self) -> None:
        pass


def refresh_gate(cfg: ScheduleConfig, clock: Clock, say) -> int | None:
    """For ``corpusmill refresh`` started by cron/systemd: None when a window is open (after waiting for one,
    with ``outside: wait``); ``ExitCode.OUTSIDE_WINDOW`` after one line, with ``outside: exit``."""
    schedule = Schedule(cfg)
    now = clock.now()
    if schedule.is_open(now):
        return None
    if cfg.outside == "exit":
        say(f"outside the schedule windows ({', '.join(cfg.windows)}): not started (train.schedule.outside: "
            f"exit); the next window opens {schedule.describe(schedule.next_open(now))}")
        return ExitCode.OUTSIDE_WINDOW
    wait_for_window(schedule, clock, say)
    return None
