"""Charts drawn on the server as SVG (`templates/chart.html`): stacked bars of hourly
counts, with a table of the same numbers for screen readers and for reading without the
picture. No script, no inline style: colours come from the stylesheet, by series class."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from headwater.ingestion.traffic import HourCount

WIDTH = 720
HEIGHT = 180
LEFT = 44  # room for the axis labels
BOTTOM = 20
TOP = 10  # room for the top value's label
# the order series stack in, bottom first; others follow by name
ORDER = (
    "completed",
    "rejected",
    "failed",
    "processing",
    "awaiting_upload",
    "expired",
    "api",
    "upload",
    "sftp",
    "email",
)


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart's numbers and geometry; `templates/chart.html` draws it."""

    title: str
    series: list[str]
    rows: list[tuple[str, list[int]]]  # (hour, count per series), hours with any traffic
    bars: list[Bar]
    values: list[Tick]
    times: list[Tick]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT


@dataclass(frozen=True, slots=True)
class Totals:
    transactions: int
    records: int
    rejected: int

    @property
    def rejection_rate(self) -> str:
        return f"{100 * self.rejected / self.records:.1f} %" if self.records else "no records"


def totals(counts: Sequence[HourCount]) -> Totals:
    return Totals(
        transactions=sum(c.transactions for c in counts),
        records=sum(c.records for c in counts),
        rejected=sum(c.rejected for c in counts),
    )


def by_hour(
    counts: Sequence[HourCount],
    *,
    now: datetime,
    hours: int,
    key: Literal["status", "channel"],
    measure: Literal["transactions", "records"],
    title: str,
) -> Chart:
    """Stacked bars, one an hour for the last `hours` hours up to `now`'s, one colour a
    `key` value."""
    last = now.replace(minute=0, second=0, microsecond=0)
    slots = [last - timedelta(hours=hours - 1 - i) for i in range(hours)]
    index = {hour: i for i, hour in enumerate(slots)}
    names = sorted({getattr(c, key) for c in counts}, key=_rank)
    grid = {name: [0] * hours for name in names}
    for c in counts:
        if c.hour in index:
            grid[getattr(c, key)][index[c.hour]] += getattr(c, measure)
    stacks = [sum(grid[name][i] for name in names) for i in range(hours)]
    top = _nice(max(stacks, default=0))
    rows = [
        (_label(slots[i]), [grid[name][i] for name in names]) for i in range(hours) if stacks[i]
    ]
    bars, values, times = _draw(slots, names, grid, top)
    return Chart(title, names, rows, bars, values, times)


@dataclass(frozen=True, slots=True)
class Bar:
    series: str
    x: float
    y: float
    width: float
    height: float
    label: str  # "<hour> · <series>: <value>", the bar's tooltip and accessible name


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    y: float
    text: str


def _draw(
    slots: list[datetime], names: list[str], grid: dict[str, list[int]], top: int
) -> tuple[list[Bar], list[Tick], list[Tick]]:
    """The bars, the value axis's ticks (with their gridlines) and the time axis's."""
    plot_w, plot_h = WIDTH - LEFT, HEIGHT - BOTTOM - TOP
    floor = TOP + plot_h  # the y of a zero
    step = plot_w / len(slots)
    width = max(1.0, step * 0.8)
    values = [Tick(LEFT - 4, floor - f * plot_h, _short(round(top * f))) for f in (0, 0.5, 1)]
    bars: list[Bar] = []
    times: list[Tick] = []
    for i, hour in enumerate(slots):
        x = LEFT + i * step
        base = 0.0
        for name in names:
            value = grid[name][i]
            if value:
                h = value / top * plot_h
                bars.append(
                    Bar(
                        name,
                        x,
                        floor - base - h,
                        width,
                        max(h, 0.5),
                        f"{_label(hour)} · {name}: {value}",
                    )
                )
                base += h
        if hour.hour == 0 or (len(slots) <= 24 and hour.hour % 6 == 0):
            text = hour.strftime("%a %d") if hour.hour == 0 else hour.strftime("%H:00")
            times.append(Tick(x, HEIGHT - 4, text))
    return bars, values, times


def _rank(name: str) -> tuple[int, str]:
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


def _nice(peak: int) -> int:
    """The axis's top: the first of 1, 2 or 5 times a power of 10 at or above the peak."""
    top = 1
    while True:
        for m in (1, 2, 5):
            if m * top >= peak:
                return m * top
        top *= 10


def _short(value: int) -> str:
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return str(value)


def _label(hour: datetime) -> str:
    return hour.strftime("%Y-%m-%d %H:00 UTC")
